// Command fakeagent is an agent for Proctor's tests: it makes its own model
// calls, as a coding agent's CLI does, to the OpenAI-compatible API whose base
// URL and key are in the environment variables it is told, and prints the
// last answer. Calls are sequential; a failed one ends it with status 1.
//
//	fakeagent [-calls N] [-model M] [-base-env VAR] [-key-env VAR] PROMPT
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	calls := flag.Int("calls", 3, "model calls to make")
	model := flag.String("model", "fake-agent", "the model identifier to ask for")
	baseEnv := flag.String("base-env", "OPENAI_BASE_URL", "the variable holding the API's base URL")
	keyEnv := flag.String("key-env", "OPENAI_API_KEY", "the variable holding the API key")
	flag.Parse()
	prompt := strings.Join(flag.Args(), " ")
	base, key := os.Getenv(*baseEnv), os.Getenv(*keyEnv)
	if base == "" {
		fail("%s is not set", *baseEnv)
	}
	client := &http.Client{Timeout: 5 * time.Minute}
	var answer string
	for i := range *calls {
		body, _ := json.Marshal(map[string]any{
			"model":    *model,
			"messages": []map[string]string{{"role": "user", "content": prompt}},
		})
		req, err := http.NewRequest(http.MethodPost, strings.TrimSuffix(base, "/")+"/chat/completions", bytes.NewReader(body))
		if err != nil {
			fail("%v", err)
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			fail("call %d: %v", i+1, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fail("call %d: %s: %s", i+1, resp.Status, raw)
		}
		var out struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) == 0 {
			fail("call %d: an answer without choices: %s", i+1, raw)
		}
		answer = out.Choices[0].Message.Content
	}
	fmt.Print(answer)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fakeagent: "+format+"\n", args...)
	os.Exit(1)
}
