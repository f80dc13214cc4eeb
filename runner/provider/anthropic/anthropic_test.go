package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/providertest"
)

const testKey = "sk-ant-test-abcdef0123456789"

// fakeServer records the last request and answers a canned response.
type fakeServer struct {
	*httptest.Server
	mu     sync.Mutex
	path   string
	header http.Header
	body   []byte
}

func newFakeServer(t testing.TB, status int, header map[string]string, body string) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.path, f.header, f.body = r.URL.Path, r.Header.Clone(), b
		f.mu.Unlock()
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body) // a handler cannot help a client that went away
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) last() (path string, header http.Header, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.path, f.header, f.body
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return v
}

func ptr[T any](v T) *T { return &v }

func userMessage(s string) []provider.Message {
	return []provider.Message{{Role: provider.RoleUser, Content: s}}
}

const okBody = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}`

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantURL string
		wantErr bool
	}{
		{name: "no base URL", cfg: Config{Model: "m"}, wantErr: true}, // the Evaluation's default is applied before (api/v1alpha1)
		{name: "base ending in /v1", cfg: Config{BaseURL: "https://gateway.example/anthropic/v1/", Model: "m"}, wantURL: "https://gateway.example/anthropic/v1/messages"},
		{name: "base with a path", cfg: Config{BaseURL: "http://localhost:4000/proxy", Model: "m"}, wantURL: "http://localhost:4000/proxy/v1/messages"},
		{name: "no model", cfg: Config{}, wantErr: true},
		{name: "relative URL", cfg: Config{BaseURL: "api.anthropic.com", Model: "m"}, wantErr: true},
		{name: "other scheme", cfg: Config{BaseURL: "ws://x", Model: "m"}, wantErr: true},
		{name: "query", cfg: Config{BaseURL: "http://x?beta=1", Model: "m"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newProvider(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && p.endpoint.URL() != tt.wantURL {
				t.Errorf("url = %q, want %q", p.endpoint.URL(), tt.wantURL)
			}
		})
	}
}

func TestRequestBody(t *testing.T) {
	weather := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)
	tests := []struct {
		name   string
		params provider.Params
		req    provider.Request
		want   string
	}{
		{
			name: "plain prompt, default max_tokens",
			req:  provider.Request{Messages: userMessage("Say <hi> & bye")},
			want: `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":"Say <hi> & bye"}]}`,
		},
		{
			name: "system prompt",
			req:  provider.Request{System: "Be brief.", Messages: userMessage("Hi")},
			want: `{"model":"claude-test","max_tokens":1024,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}]}`,
		},
		{
			name: "system messages joined into the system prompt",
			req: provider.Request{System: "Be brief.", Messages: []provider.Message{
				{Role: "system", Content: "Answer in French."},
				{Role: "user", Content: "Hi"},
				{Role: "system", Content: ""},
				{Role: "system", Content: "No emoji."},
			}},
			want: `{"model":"claude-test","max_tokens":1024,"system":"Be brief.\n\nAnswer in French.\n\nNo emoji.","messages":[{"role":"user","content":"Hi"}]}`,
		},
		{
			name: "system messages only",
			req:  provider.Request{Messages: []provider.Message{{Role: "system", Content: "S."}, {Role: "user", Content: "Hi"}}},
			want: `{"model":"claude-test","max_tokens":1024,"system":"S.","messages":[{"role":"user","content":"Hi"}]}`,
		},
		{
			name: "multi-turn with tool calls and merged results",
			req: provider.Request{Messages: []provider.Message{
				{Role: "user", Content: "Weather in Paris and Rome?"},
				{Role: "assistant", Content: "Checking.", ToolCalls: []provider.ToolCall{
					{ID: "toolu_1", Name: "weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
					{ID: "toolu_2", Name: "weather", Arguments: json.RawMessage(`{"city":"Rome"}`)},
				}},
				{Role: "tool", ToolCallID: "toolu_1", Content: "18C"},
				{Role: "tool", ToolCallID: "toolu_2", Content: "25C"},
				{Role: "assistant", ToolCalls: []provider.ToolCall{{ID: "toolu_3", Name: "now"}}},
				{Role: "tool", ToolCallID: "toolu_3", Content: ""},
				{Role: "assistant", Content: "Paris 18C, Rome 25C."},
				{Role: "user", Content: "Thanks"},
			}},
			want: `{"model":"claude-test","max_tokens":1024,"messages":[
				{"role":"user","content":"Weather in Paris and Rome?"},
				{"role":"assistant","content":[
					{"type":"text","text":"Checking."},
					{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Paris"}},
					{"type":"tool_use","id":"toolu_2","name":"weather","input":{"city":"Rome"}}
				]},
				{"role":"user","content":[
					{"type":"tool_result","tool_use_id":"toolu_1","content":"18C"},
					{"type":"tool_result","tool_use_id":"toolu_2","content":"25C"}
				]},
				{"role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"now","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3","content":""}]},
				{"role":"assistant","content":"Paris 18C, Rome 25C."},
				{"role":"user","content":"Thanks"}
			]}`,
		},
		{
			name: "conversation ending in tool results",
			req: provider.Request{Messages: []provider.Message{
				{Role: "user", Content: "Time?"},
				{Role: "assistant", ToolCalls: []provider.ToolCall{{ID: "t1", Name: "now", Arguments: json.RawMessage(`{}`)}}},
				{Role: "tool", ToolCallID: "t1", Content: "12:00"},
			}},
			want: `{"model":"claude-test","max_tokens":1024,"messages":[
				{"role":"user","content":"Time?"},
				{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"now","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"12:00"}]}
			]}`,
		},
		{
			name: "tools",
			req: provider.Request{
				Messages: userMessage("Weather?"),
				Tools: []provider.Tool{
					{Name: "weather", Description: "Current weather.", Parameters: weather},
					{Name: "now"},
				},
			},
			want: `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":"Weather?"}],"tools":[
				{"name":"weather","description":"Current weather.","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},
				{"name":"now","input_schema":{"type":"object"}}
			]}`,
		},
		{
			name: "all params, seed ignored",
			params: provider.Params{
				Temperature: ptr(0.0), TopP: ptr(0.9), MaxTokens: 256, Seed: ptr(int64(42)), Stop: []string{"\n\nHuman:", "END"},
			},
			req:  provider.Request{Messages: userMessage("Hi")},
			want: `{"model":"claude-test","max_tokens":256,"messages":[{"role":"user","content":"Hi"}],"temperature":0,"top_p":0.9,"stop_sequences":["\n\nHuman:","END"]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, okBody)
			p, err := newProvider(Config{BaseURL: srv.URL, APIKey: testKey, Model: "claude-test", Params: tt.params})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Complete(context.Background(), &tt.req); err != nil {
				t.Fatal(err)
			}
			path, _, body := srv.last()
			if path != "/v1/messages" {
				t.Errorf("path = %q, want /v1/messages", path)
			}
			if diff := cmp.Diff(jsonValue(t, []byte(tt.want)), jsonValue(t, body)); diff != "" {
				t.Errorf("request body mismatch (-want +got):\n%s\ngot: %s", diff, body)
			}
		})
	}
}

func TestRequestHeaders(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want map[string]string // "" means the header must be absent
	}{
		{
			name: "defaults",
			cfg:  Config{APIKey: testKey},
			want: map[string]string{"X-Api-Key": testKey, "Anthropic-Version": "2023-06-01", "Content-Type": "application/json", "Authorization": ""},
		},
		{
			name: "version and extra headers",
			cfg:  Config{APIKey: testKey, Version: "2024-01-01", Headers: map[string]string{"anthropic-beta": "prompt-caching-2024-07-31"}},
			want: map[string]string{"X-Api-Key": testKey, "Anthropic-Version": "2024-01-01", "Anthropic-Beta": "prompt-caching-2024-07-31"},
		},
		{
			name: "no key",
			want: map[string]string{"X-Api-Key": "", "Anthropic-Version": "2023-06-01"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, okBody)
			cfg := tt.cfg
			cfg.BaseURL, cfg.Model = srv.URL, "m"
			p, err := newProvider(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Complete(context.Background(), &provider.Request{Messages: userMessage("Hi")}); err != nil {
				t.Fatal(err)
			}
			_, h, _ := srv.last()
			got := map[string]string{}
			for k := range tt.want {
				got[k] = h.Get(k)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("headers mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResponse(t *testing.T) {
	tests := []struct {
		name string
		body string
		want *provider.Response
	}{
		{
			name: "text",
			body: okBody,
			want: &provider.Response{Text: "hi", FinishReason: "end_turn", Usage: provider.Usage{InputTokens: 3, OutputTokens: 1}},
		},
		{
			name: "text blocks concatenated, thinking skipped, cache tokens counted",
			body: `{"content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"text","text":"Hello, "},{"type":"text","text":"world."}],
				"stop_reason":"max_tokens","usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":5}}`,
			want: &provider.Response{Text: "Hello, world.", FinishReason: "max_tokens", Usage: provider.Usage{InputTokens: 1110, OutputTokens: 5, CachedInputTokens: 1000, CacheWriteInputTokens: 100}},
		},
		{
			name: "tool use",
			body: `{"content":[{"type":"text","text":"Checking."},
				{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Paris"}},
				{"type":"tool_use","id":"toolu_2","name":"now","input":{}},
				{"type":"tool_use","id":"toolu_3","name":"odd"}],
				"stop_reason":"tool_use","usage":{"input_tokens":50,"cache_read_input_tokens":null,"output_tokens":20}}`,
			want: &provider.Response{
				Text: "Checking.",
				ToolCalls: []provider.ToolCall{
					{ID: "toolu_1", Name: "weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
					{ID: "toolu_2", Name: "now", Arguments: json.RawMessage(`{}`)},
					{ID: "toolu_3", Name: "odd", Arguments: json.RawMessage(`{}`)},
				},
				FinishReason: "tool_use",
				Usage:        provider.Usage{InputTokens: 50, OutputTokens: 20},
			},
		},
		{
			name: "empty content",
			body: `{"content":[],"stop_reason":"end_turn","usage":{"input_tokens":4,"output_tokens":0}}`,
			want: &provider.Response{FinishReason: "end_turn", Usage: provider.Usage{InputTokens: 4}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, tt.body)
			p, err := newProvider(Config{BaseURL: srv.URL, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Complete(context.Background(), &provider.Request{Messages: userMessage("Hi")})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadResponses(t *testing.T) {
	// No content, and not a message: not an answer of the Messages API.
	for _, body := range []string{`{"content":[`, `<html>hello</html>`, `{}`, `{"content":null}`, `{"type":"completion","completion":"4"}`} {
		srv := newFakeServer(t, 200, nil, body)
		p, err := newProvider(Config{BaseURL: srv.URL, Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Complete(context.Background(), &provider.Request{Messages: userMessage("Hi")})
		if err == nil {
			t.Errorf("body %q: got nil error", body)
		} else if _, ok := provider.AsHTTPError(err); ok {
			t.Errorf("body %q: err = %v is an *HTTPError, want a plain error", body, err)
		}
	}
}

func TestErrorStatuses(t *testing.T) {
	inOneMinute := time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)
	apiError := func(typ, msg string) string {
		return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q},"request_id":"req_1"}`, typ, msg)
	}
	tests := []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   *provider.HTTPError
		// wantRetryAround is checked with a tolerance instead of want.RetryAfter
		// (HTTP-dates have a one-second resolution and are measured from now).
		wantRetryAround time.Duration
	}{
		{
			name:   "400",
			status: 400,
			body:   apiError("invalid_request_error", "max_tokens: Field required"),
			want:   &provider.HTTPError{StatusCode: 400, Code: "invalid_request_error", Message: "max_tokens: Field required"},
		},
		{
			name:   "401",
			status: 401,
			body:   apiError("authentication_error", "invalid x-api-key"),
			want:   &provider.HTTPError{StatusCode: 401, Code: "authentication_error", Message: "invalid x-api-key"},
		},
		{
			name:   "429 retry-after-ms",
			status: 429,
			header: map[string]string{"retry-after-ms": "2500.5", "retry-after": "3"},
			body:   apiError("rate_limit_error", "Number of requests has exceeded your rate limit"),
			want:   &provider.HTTPError{StatusCode: 429, Code: "rate_limit_error", Message: "Number of requests has exceeded your rate limit", RetryAfter: 2500500 * time.Microsecond},
		},
		{
			name:   "429 retry-after seconds",
			status: 429,
			header: map[string]string{"retry-after": "12"},
			body:   apiError("rate_limit_error", "slow down"),
			want:   &provider.HTTPError{StatusCode: 429, Code: "rate_limit_error", Message: "slow down", RetryAfter: 12 * time.Second},
		},
		{
			name:            "429 retry-after HTTP-date",
			status:          429,
			header:          map[string]string{"retry-after": inOneMinute},
			body:            apiError("rate_limit_error", "slow down"),
			want:            &provider.HTTPError{StatusCode: 429, Code: "rate_limit_error", Message: "slow down"},
			wantRetryAround: time.Minute,
		},
		{
			name:   "500",
			status: 500,
			body:   apiError("api_error", "Internal server error"),
			want:   &provider.HTTPError{StatusCode: 500, Code: "api_error", Message: "Internal server error"},
		},
		{
			name:   "529 overloaded keeps its status",
			status: 529,
			body:   apiError("overloaded_error", "Overloaded"),
			want:   &provider.HTTPError{StatusCode: 529, Code: "overloaded_error", Message: "Overloaded"},
		},
		{
			name:   "plain text from a proxy",
			status: 503,
			body:   "  upstream unavailable\n",
			want:   &provider.HTTPError{StatusCode: 503, Message: "upstream unavailable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, tt.status, tt.header, tt.body)
			p, err := newProvider(Config{BaseURL: srv.URL, APIKey: testKey, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Complete(context.Background(), &provider.Request{Messages: userMessage("Hi")})
			var got *provider.HTTPError
			ok := errors.As(err, &got)
			if !ok {
				t.Fatalf("err = %T %v, want *provider.HTTPError", err, err)
			}
			if tt.wantRetryAround != 0 {
				if d := got.RetryAfter - tt.wantRetryAround; d < -2*time.Second || d > time.Second {
					t.Errorf("RetryAfter = %v, want about %v", got.RetryAfter, tt.wantRetryAround)
				}
				g := *got
				g.RetryAfter = 0
				got = &g
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("HTTPError mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func BenchmarkComplete(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, okBody) // a handler cannot help a client that went away
	}))
	defer srv.Close()
	p, err := newProvider(Config{BaseURL: srv.URL, APIKey: testKey, Model: "claude-test", Params: provider.Params{Temperature: ptr(0.0), MaxTokens: 64}})
	if err != nil {
		b.Fatal(err)
	}
	req := &provider.Request{System: "Answer with one word.", Messages: userMessage("What is the capital of France?")}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestErrorInA200: a proxy answering 200 with the API's error object, and an
// empty message, which is a real (empty) answer.
func TestErrorInA200(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantStatus int // 0: no error
		wantIn     string
	}{
		{"overloaded", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529, "Overloaded"},
		{"invalid request: final", `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}`, 200, "max_tokens"},
		{"empty message", `{"type":"message","content":[],"stop_reason":"end_turn"}`, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, tt.body)
			p, err := newProvider(Config{BaseURL: srv.URL, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := p.Complete(context.Background(), &provider.Request{Messages: userMessage("Hi")})
			if tt.wantStatus == 0 {
				if err != nil || resp.Text != "" {
					t.Errorf("Complete = %+v, %v; want an empty answer", resp, err)
				}
				return
			}
			he, ok := provider.AsHTTPError(err)
			if !ok || he.StatusCode != tt.wantStatus || !strings.Contains(he.Message, tt.wantIn) {
				t.Errorf("err = %#v, want an *HTTPError with status %d and message containing %q", err, tt.wantStatus, tt.wantIn)
			}
		})
	}
}

// TestConformance runs the suite every provider passes.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New: func(baseURL, key string) (provider.Provider, error) {
			return newProvider(Config{BaseURL: baseURL, APIKey: key, Model: "m"})
		},
		Key:       testKey,
		KeyHeader: "X-Api-Key",
		OK:        okBody,
		Errors:    map[int]string{529: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		KeyEchoes: map[int][]string{
			401: {`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: %s"}}`, `{"type":"error","error":{"type":"%s","message":"no"}}`},
			500: {"key was %s", strings.Repeat("x", 490) + "%s"},
		},
		PartialBody: `{"content":[{"type":`,
		Request: &provider.Request{System: "s", Messages: []provider.Message{
			{Role: "user", Content: "Hi"},
			{Role: "assistant", ToolCalls: []provider.ToolCall{{ID: "t", Name: "f"}}},
			{Role: "tool", ToolCallID: "t", Content: "r"},
		}},
	})
}

// newProvider is New with the max_tokens the compiler always passes (the
// Messages API requires one; its default, 1024, is the Evaluation's:
// api/v1alpha1.DefaultAnthropicMaxToken).
func newProvider(cfg Config) (*Provider, error) {
	if cfg.Params.MaxTokens == 0 {
		cfg.Params.MaxTokens = 1024
	}
	return New(cfg)
}

func TestMaxTokensRequired(t *testing.T) {
	if _, err := New(Config{BaseURL: "http://x", Model: "m"}); err == nil || !strings.Contains(err.Error(), "maxTokens is required") {
		t.Errorf("New without max tokens: %v, want an error saying maxTokens is required", err)
	}
}
