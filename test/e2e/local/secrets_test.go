package local_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// secretKey is a distinctive API key that must never be written out.
const secretKey = "sk-e2e-7f3a9c1d5b2e4a60-do-not-leak"

// echoServer is a model server that knows the key and echoes it back every way
// it can: in answers (Authorization and x-api-key headers), in 400 and 500 error
// messages (for prompts containing ECHO-400 or ECHO-500), everything else going
// to fakellm.
func echoServer(t *testing.T) (*fakellm.Server, string) {
	t.Helper()
	llm := fakellm.New(fakellm.Config{APIKey: secretKey, Responder: func(req fakellm.Request) fakellm.Reply {
		return fakellm.Reply{Text: fmt.Sprintf("Authorization=%s x-api-key=%s",
			req.Header.Get("Authorization"), req.Header.Get("X-Api-Key"))}
	}})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		creds := r.Header.Get("Authorization") + " " + r.Header.Get("X-Api-Key")
		for marker, status := range map[string]int{"ECHO-400": 400, "ECHO-500": 500} {
			if bytes.Contains(body, []byte(marker)) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
					"type": "invalid_request_error", "message": "your credentials " + creds + " are no good",
				}})
				return
			}
		}
		llm.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return llm, srv.URL
}

// secretAgent prints the key it is given on standard output, or on standard
// error before failing, or on standard output of a sample's context file.
const secretAgent = `#!/bin/sh
case "$1" in
*ECHO-400*) echo "cannot use $TEST_KEY" >&2; exit 3 ;;
*ECHO-500*) echo "fine" ;;
*) echo "my key is $TEST_KEY" ;;
esac
`

func TestAPIKeyNeverWrittenOut(t *testing.T) {
	t.Parallel()
	llm, url := echoServer(t)
	// A second server that expects another key: 401s all round.
	other := newFake(t, fakellm.Config{APIKey: "another-key-entirely"})

	w := newWorkspace(t)
	w.env["TEST_KEY"] = secretKey
	script := w.write("agent.sh", secretAgent)
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	w.writeEval("secrets", fmt.Sprintf(`  cache: {enabled: true}
  retry: {maxAttempts: 2, initialBackoff: 10ms, maxBackoff: 20ms}
  datasets:
  - name: qs
    source:
      inline:
      - {id: echo, input: "tell me the headers", expected: "x"}
      - {id: err400, input: "ECHO-400", expected: "x"}
      - {id: err500, input: "ECHO-500", expected: "x"}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %[1]s/v1, apiKey: {env: TEST_KEY}}
  - {name: claude, provider: anthropic, model: fake-model, baseURL: %[1]s, apiKey: {env: TEST_KEY}}
  - {name: wrongkey, provider: openai, model: fake-model, baseURL: %[2]s, apiKey: {env: TEST_KEY}}
  - name: bot
    provider: agent
    apiKey: {env: TEST_KEY}
    agent:
      command: [%[3]q, "{{ .Prompt }}"]
  scoring:
  - type: contains
`, url, other.OpenAIURL(), script))

	res := w.run("-v", "1") // verbosity 1 logs every retry, with its error
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}

	// The key was really echoed: the records show where it was removed.
	recs, _ := readRecords(t, w.out)
	byKey := map[string]record{}
	for _, r := range recs {
		byKey[r.Model+"/"+r.ID] = r
	}
	for _, c := range []struct{ rec, field, want string }{
		{"gpt/echo", "output", "Authorization=Bearer [REDACTED]"},
		{"claude/echo", "output", "x-api-key=[REDACTED]"},
		{"gpt/err400", "error", "[REDACTED]"},
		{"claude/err400", "error", "[REDACTED]"},
		{"gpt/err500", "error", "[REDACTED]"},
		{"bot/echo", "output", "my key is [REDACTED]"},
		{"bot/err400", "error", "[REDACTED]"},
	} {
		r, ok := byKey[c.rec]
		got := r.Output
		if c.field == "error" {
			got = r.Error
		}
		if !ok || !strings.Contains(got, c.want) {
			t.Errorf("%s %s: %q, want it to contain %q (the echoed key, redacted)", c.rec, c.field, got, c.want)
		}
	}
	if r := byKey["wrongkey/echo"]; !strings.Contains(r.Error, "401") {
		t.Errorf("wrongkey/echo: error %q, want a 401", r.Error)
	}
	if !strings.Contains(res.Stderr, "Retrying") {
		t.Errorf("stderr has no retry log although -v 1 and 500s:\n%s", res.Stderr)
	}

	check := func(what string, data []byte) {
		if bytes.Contains(data, []byte(secretKey)) {
			t.Errorf("the API key appears in %s:\n%s", what, data)
		}
	}
	check("stdout", []byte(res.Stdout))
	check("stderr", []byte(res.Stderr))
	// Everything in the output directory: results.jsonl, summary.json, checkpoints.
	err := filepath.WalkDir(w.out, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := os.ReadFile(path)
			check(path, data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := llm.Stats(); st.Succeeded == 0 || st.Rejected != 0 {
		t.Errorf("echo server stats %+v: want successes and no rejected key", st)
	}
}

// TestRotatedKeyNotReplayedFromCache: a response that echoed the key is cached as
// it came, unredacted; after the key is rotated, a run that hits the cache
// redacts only the new key, so the old one is written into results.jsonl.
func TestRotatedKeyNotReplayedFromCache(t *testing.T) {
	t.Parallel()
	const oldKey, newKey = "sk-e2e-old-1111111111", "sk-e2e-new-2222222222"
	srv := newFake(t, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		return fakellm.Reply{Text: "you sent " + req.Header.Get("Authorization")}
	}})
	w := newWorkspace(t)
	w.writeEval("rotated", fmt.Sprintf(`  cache: {enabled: true}
  datasets:
  - name: qs
    source:
      inline:
      - {id: q1, input: "hello"}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s, apiKey: {env: TEST_KEY}}
`, srv.OpenAIURL()))

	w.env["TEST_KEY"] = oldKey
	if res := w.run(); res.Code != 0 {
		t.Fatalf("first run: want exit 0\n%s", res)
	}
	if err := os.RemoveAll(w.out); err != nil {
		t.Fatal(err)
	}
	w.env["TEST_KEY"] = newKey
	res := w.run()
	if res.Code != 0 {
		t.Fatalf("second run: want exit 0\n%s", res)
	}
	data, err := os.ReadFile(filepath.Join(w.out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(oldKey)) {
		t.Errorf("results.jsonl of the run with the rotated key holds the old key:\n%s", data)
	}
}
