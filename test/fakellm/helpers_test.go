package fakellm_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

const (
	openAIPath    = "/v1/chat/completions"
	anthropicPath = "/v1/messages"
)

// start serves a new fakellm.Server for the test's lifetime.
func start(t *testing.T, cfg fakellm.Config) (*fakellm.Server, string) {
	t.Helper()
	s := fakellm.New(cfg)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// result is an answer, its JSON body decoded generically.
type result struct {
	status int
	header http.Header
	body   map[string]any
}

// post sends body (a string is sent as is, anything else as JSON) with headers
// given as name, value pairs, and fails the test on a transport error.
func post(t *testing.T, url string, body any, headers ...string) result {
	t.Helper()
	resp, err := send(http.DefaultClient, url, body, headers...)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return readResult(t, resp)
}

func send(c *http.Client, url string, body any, headers ...string) (*http.Response, error) {
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return c.Do(req)
}

func readResult(t *testing.T, resp *http.Response) result {
	t.Helper()
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	r := result{status: resp.StatusCode, header: resp.Header}
	if len(raw) > 0 && json.Unmarshal(raw, &r.body) != nil {
		t.Fatalf("status %d, body is not a JSON object: %s", resp.StatusCode, raw)
	}
	return r
}

// openAIText and anthropicText build minimal requests with one user message.
func openAIText(text string) map[string]any {
	return map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": text}}}
}

func anthropicText(text string) map[string]any {
	return map[string]any{"model": "m", "max_tokens": 100, "messages": []any{map[string]any{"role": "user", "content": text}}}
}

// answerText extracts the answer text of either API's response.
func answerText(t *testing.T, r result) string {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, body %v", r.status, r.body)
	}
	if choices, ok := r.body["choices"].([]any); ok {
		content, _ := choices[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		return content
	}
	for _, b := range r.body["content"].([]any) {
		if b := b.(map[string]any); b["type"] == "text" {
			return b["text"].(string)
		}
	}
	return ""
}

// errorType extracts the error type of either API's error body.
func errorType(r result) string {
	e, _ := r.body["error"].(map[string]any)
	typ, _ := e["type"].(string)
	return typ
}
