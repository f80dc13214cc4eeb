// Command fakeagent is an agent for Proctor's tests: it makes its own model
// calls, as a coding agent's CLI does, to the OpenAI-compatible API whose base
// URL and key are in the environment variables it is told, and prints the
// last answer. Calls are sequential; a failed one ends it with status 1.
// With -format it reports as Claude Code (-p --output-format json) or Codex
// (exec --json) do: the answer, and the tokens its calls used (Claude Code's
// total_cost_usd at -cost-per-token dollars a token).
//
// With -trace it propagates the W3C trace context it was given (TRACEPARENT)
// in each call's traceparent header, as an instrumented HTTP client does,
// and ends its text answer with it.
//
//	fakeagent [-calls N] [-model M] [-base-env VAR] [-key-env VAR] [-format text|claude-code|codex] [-cost-per-token D] [-trace] PROMPT
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
	format := flag.String("format", "text", "what to print: text (the answer), claude-code or codex (a report)")
	costPerToken := flag.Float64("cost-per-token", 0.000001, "what Claude Code's report says a token cost, in dollars")
	trace := flag.Bool("trace", false, "send TRACEPARENT as each call's traceparent header, and end the answer with it")
	flag.Parse()
	traceparent := os.Getenv("TRACEPARENT")
	prompt := strings.Join(flag.Args(), " ")
	base, key := os.Getenv(*baseEnv), os.Getenv(*keyEnv)
	if base == "" {
		fail("%s is not set", *baseEnv)
	}
	client := &http.Client{Timeout: 5 * time.Minute}
	var answer string
	var in, out int64
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
		if *trace && traceparent != "" {
			req.Header.Set("Traceparent", traceparent)
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
		var got struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(raw, &got); err != nil || len(got.Choices) == 0 {
			fail("call %d: an answer without choices: %s", i+1, raw)
		}
		answer = got.Choices[0].Message.Content
		in += got.Usage.PromptTokens
		out += got.Usage.CompletionTokens
	}
	if *trace {
		answer += "\ntraceparent: " + traceparent
	}
	report(*format, answer, in, out, *costPerToken)
}

// report prints the answer as the agent format does.
func report(format, answer string, in, out int64, costPerToken float64) {
	line := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Println(string(b))
	}
	switch format {
	case "text":
		fmt.Print(answer)
	case "claude-code":
		// Anthropic's input_tokens leave out the cache's: none here.
		line(map[string]any{
			"type": "result", "subtype": "success", "is_error": false, "num_turns": 1, "result": answer,
			"session_id": "fake", "total_cost_usd": float64(in+out) * costPerToken,
			"usage": map[string]int64{"input_tokens": in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": out},
		})
	case "codex":
		line(map[string]any{"type": "thread.started", "thread_id": "fake"})
		line(map[string]any{"type": "turn.started"})
		line(map[string]any{"type": "item.completed", "item": map[string]string{"id": "item_0", "type": "agent_message", "text": answer}})
		line(map[string]any{"type": "turn.completed", "usage": map[string]int64{"input_tokens": in, "cached_input_tokens": 0, "output_tokens": out}})
	default:
		fail("-format %q is not text, claude-code or codex", format)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fakeagent: "+format+"\n", args...)
	os.Exit(1)
}
