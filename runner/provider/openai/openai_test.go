package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/providertest"
)

const testKey = "sk-test-abcdef0123456789"

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

// rewriteClient sends every request to target whatever its URL says, so that a
// provider configured for https://api.openai.com talks to a test server.
func rewriteClient(target string) *http.Client {
	u, _ := url.Parse(target)
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r2 := r.Clone(r.Context())
		r2.URL.Scheme, r2.URL.Host, r2.Host = u.Scheme, u.Host, ""
		return http.DefaultTransport.RoundTrip(r2)
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return v
}

func ptr[T any](v T) *T { return &v }

const okBody = `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantURL string
		wantErr bool
	}{
		{name: "no base URL", cfg: Config{Model: "m"}, wantErr: true}, // the Evaluation's default is applied before (api/v1alpha1)
		{name: "trailing slash", cfg: Config{BaseURL: "http://localhost:8000/v1/", Model: "m"}, wantURL: "http://localhost:8000/v1/chat/completions"},
		{name: "no model", cfg: Config{BaseURL: "http://x"}, wantErr: true},
		{name: "relative URL", cfg: Config{BaseURL: "localhost:8000/v1", Model: "m"}, wantErr: true},
		{name: "no host", cfg: Config{BaseURL: "http:///v1", Model: "m"}, wantErr: true},
		{name: "other scheme", cfg: Config{BaseURL: "ftp://x/v1", Model: "m"}, wantErr: true},
		{name: "query", cfg: Config{BaseURL: "http://x/v1?a=b", Model: "m"}, wantErr: true},
		{name: "unparsable", cfg: Config{BaseURL: "http://[::1", Model: "m"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && p.endpoint.URL() != tt.wantURL {
				t.Errorf("url = %q, want %q", p.endpoint.URL(), tt.wantURL)
			}
		})
	}
}

func TestUsesMaxCompletionTokens(t *testing.T) {
	tests := map[string]bool{
		"https://api.openai.com/v1":     true,
		"https://API.OpenAI.com:443/v1": true,
		"http://localhost:8000/v1":      false,
		"https://openrouter.ai/api/v1":  false,
		"https://api.openai.com.evil/":  false,
	}
	for raw, want := range tests {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := usesMaxCompletionTokens(u); got != want {
			t.Errorf("usesMaxCompletionTokens(%s) = %v, want %v", raw, got, want)
		}
	}
}

func TestRequestBody(t *testing.T) {
	weather := json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)
	tests := []struct {
		name string
		// openAIHost configures https://api.openai.com/v1 (through a rewriting
		// client) instead of the test server's URL.
		openAIHost bool
		params     provider.Params
		req        provider.Request
		want       string
	}{
		{
			name: "plain prompt",
			req:  provider.Request{Messages: []provider.Message{{Role: "user", Content: "Say <hi> & bye"}}},
			want: `{"model":"gpt-test","messages":[{"role":"user","content":"Say <hi> & bye"}]}`,
		},
		{
			name: "system prompt first",
			req:  provider.Request{System: "Be brief.", Messages: []provider.Message{{Role: "user", Content: "Hi"}}},
			want: `{"model":"gpt-test","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`,
		},
		{
			name: "conversation's own system message wins",
			req: provider.Request{System: "Be brief.", Messages: []provider.Message{
				{Role: "system", Content: "Be verbose."}, {Role: "user", Content: "Hi"},
			}},
			want: `{"model":"gpt-test","messages":[{"role":"system","content":"Be verbose."},{"role":"user","content":"Hi"}]}`,
		},
		{
			name: "multi-turn with tool calls and results",
			req: provider.Request{Messages: []provider.Message{
				{Role: "user", Content: "Weather in Paris and Rome?"},
				{Role: "assistant", Content: "Checking.", ToolCalls: []provider.ToolCall{
					{ID: "call_1", Name: "weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
				}},
				{Role: "tool", ToolCallID: "call_1", Content: "18C"},
				{Role: "assistant", ToolCalls: []provider.ToolCall{
					{ID: "call_2", Name: "weather", Arguments: json.RawMessage(`{"city":"Rome"}`)},
					{ID: "call_3", Name: "now"},
					{ID: "call_4", Name: "weather", Arguments: json.RawMessage(`"{\"city\":"`)},
				}},
				{Role: "tool", ToolCallID: "call_2", Content: "25C"},
				{Role: "tool", ToolCallID: "call_3", Content: ""},
				{Role: "assistant", Content: "Paris 18C, Rome 25C."},
				{Role: "user", Content: "Thanks"},
			}},
			want: `{"model":"gpt-test","messages":[
				{"role":"user","content":"Weather in Paris and Rome?"},
				{"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},
				{"role":"tool","tool_call_id":"call_1","content":"18C"},
				{"role":"assistant","tool_calls":[
					{"id":"call_2","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Rome\"}"}},
					{"id":"call_3","type":"function","function":{"name":"now","arguments":"{}"}},
					{"id":"call_4","type":"function","function":{"name":"weather","arguments":"{\"city\":"}}
				]},
				{"role":"tool","tool_call_id":"call_2","content":"25C"},
				{"role":"tool","tool_call_id":"call_3","content":""},
				{"role":"assistant","content":"Paris 18C, Rome 25C."},
				{"role":"user","content":"Thanks"}
			]}`,
		},
		{
			name: "tools",
			req: provider.Request{
				Messages: []provider.Message{{Role: "user", Content: "Weather?"}},
				Tools: []provider.Tool{
					{Name: "weather", Description: "Current weather.", Parameters: weather},
					{Name: "now"},
				},
			},
			want: `{"model":"gpt-test","messages":[{"role":"user","content":"Weather?"}],"tools":[
				{"type":"function","function":{"name":"weather","description":"Current weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
				{"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{}}}}
			]}`,
		},
		{
			name: "all params, compatible server gets max_tokens",
			params: provider.Params{
				Temperature: ptr(0.0), TopP: ptr(0.9), MaxTokens: 256, Seed: ptr(int64(42)), Stop: []string{"\n\n", "END"},
			},
			req:  provider.Request{Messages: []provider.Message{{Role: "user", Content: "Hi"}}},
			want: `{"model":"gpt-test","messages":[{"role":"user","content":"Hi"}],"temperature":0,"top_p":0.9,"seed":42,"stop":["\n\n","END"],"max_tokens":256}`,
		},
		{
			name:       "api.openai.com gets max_completion_tokens",
			openAIHost: true,
			params:     provider.Params{MaxTokens: 256},
			req:        provider.Request{Messages: []provider.Message{{Role: "user", Content: "Hi"}}},
			want:       `{"model":"gpt-test","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":256}`,
		},
		{
			name:       "api.openai.com without params",
			openAIHost: true,
			req:        provider.Request{Messages: []provider.Message{{Role: "user", Content: "Hi"}}},
			want:       `{"model":"gpt-test","messages":[{"role":"user","content":"Hi"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, okBody)
			cfg := Config{BaseURL: srv.URL + "/v1", APIKey: testKey, Model: "gpt-test", Params: tt.params}
			if tt.openAIHost {
				cfg.BaseURL, cfg.HTTPClient = "https://api.openai.com/v1", rewriteClient(srv.URL)
			}
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Complete(context.Background(), &tt.req); err != nil {
				t.Fatal(err)
			}
			path, _, body := srv.last()
			if path != "/v1/chat/completions" {
				t.Errorf("path = %q, want /v1/chat/completions", path)
			}
			if diff := cmp.Diff(jsonValue(t, []byte(tt.want)), jsonValue(t, body)); diff != "" {
				t.Errorf("request body mismatch (-want +got):\n%s\ngot: %s", diff, body)
			}
		})
	}
}

func TestRequestHeaders(t *testing.T) {
	tests := []struct {
		name    string
		apiKey  string
		headers map[string]string
		want    map[string]string // "" means the header must be absent
	}{
		{
			name:   "api key",
			apiKey: testKey,
			want:   map[string]string{"Authorization": "Bearer " + testKey, "Content-Type": "application/json"},
		},
		{
			name:    "no key, extra headers",
			headers: map[string]string{"HTTP-Referer": "https://proctor.dev", "X-Title": "Proctor"},
			want:    map[string]string{"Authorization": "", "Http-Referer": "https://proctor.dev", "X-Title": "Proctor", "Content-Type": "application/json"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, okBody)
			p, err := New(Config{BaseURL: srv.URL, APIKey: tt.apiKey, Model: "m", Headers: tt.headers})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Complete(context.Background(), &provider.Request{Messages: []provider.Message{{Role: "user", Content: "Hi"}}}); err != nil {
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
			want: &provider.Response{Text: "hi", FinishReason: "stop", Usage: provider.Usage{InputTokens: 3, OutputTokens: 1}},
		},
		{
			name: "tool calls with null content",
			body: `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
				{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\": \"Paris\"}"}},
				{"id":"call_2","type":"function","function":{"name":"now","arguments":""}},
				{"id":"call_3","type":"function","function":{"name":"weather","arguments":"{\"city\":"}},
				{"id":"call_4","type":"function","function":{"name":"list","arguments":"[1,2]"}}
			]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":20}}`,
			want: &provider.Response{
				ToolCalls: []provider.ToolCall{
					{ID: "call_1", Name: "weather", Arguments: json.RawMessage(`{"city": "Paris"}`)},
					{ID: "call_2", Name: "now", Arguments: json.RawMessage(`{}`)},
					{ID: "call_3", Name: "weather", Arguments: json.RawMessage(`"{\"city\":"`)},
					{ID: "call_4", Name: "list", Arguments: json.RawMessage(`"[1,2]"`)},
				},
				FinishReason: "tool_calls",
				Usage:        provider.Usage{InputTokens: 50, OutputTokens: 20},
			},
		},
		{
			name: "text and tool call, no usage",
			body: `{"choices":[{"message":{"content":"Let me check.","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			want: &provider.Response{
				Text:         "Let me check.",
				ToolCalls:    []provider.ToolCall{{ID: "c", Name: "f", Arguments: json.RawMessage(`{}`)}},
				FinishReason: "tool_calls",
			},
		},
		{
			name: "length",
			body: `{"choices":[{"message":{"content":"trunc"},"finish_reason":"length"},{"message":{"content":"second"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
			want: &provider.Response{Text: "trunc", FinishReason: "length", Usage: provider.Usage{InputTokens: 1, OutputTokens: 2}},
		},
		{
			name: "cached prompt tokens",
			body: `{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2006,"completion_tokens":300,"prompt_tokens_details":{"cached_tokens":1920}}}`,
			want: &provider.Response{Text: "hi", FinishReason: "stop", Usage: provider.Usage{InputTokens: 2006, OutputTokens: 300, CachedInputTokens: 1920}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, tt.body)
			p, err := New(Config{BaseURL: srv.URL, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Complete(context.Background(), &provider.Request{Messages: []provider.Message{{Role: "user", Content: "Hi"}}})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestArgumentsRoundTrip checks that arguments the model produced are sent back
// exactly, including invalid JSON kept as a string.
func TestArgumentsRoundTrip(t *testing.T) {
	for _, args := range []string{`{"city":"Paris"}`, `{"city":`, `[1,2]`, `not json`} {
		if got := argumentsString(parseArguments(args)); got != args {
			t.Errorf("argumentsString(parseArguments(%q)) = %q", args, got)
		}
	}
}

func TestBadResponses(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{name: "no choices", body: `{"choices":[],"usage":{"prompt_tokens":1}}`},
		{name: "missing choices", body: `{}`},
		{name: "malformed JSON", body: `{"choices":[`},
		{name: "not JSON", body: `<html>hello</html>`},
		// A legacy completions endpoint: read as a chat completion, an empty answer.
		{name: "choice without message", body: `{"choices":[{"text":"4","finish_reason":"stop"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, tt.body)
			p, err := New(Config{BaseURL: srv.URL, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := p.Complete(context.Background(), &provider.Request{Messages: []provider.Message{{Role: "user", Content: "Hi"}}})
			if err == nil {
				t.Fatalf("got response %+v, want an error", resp)
			}
			if _, ok := provider.AsHTTPError(err); ok {
				t.Errorf("err = %v is an *HTTPError, want a plain error", err)
			}
		})
	}
}

func TestErrorStatuses(t *testing.T) {
	inOneMinute := time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)
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
			body:   `{"error":{"message":"Unsupported parameter: 'max_tokens'","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}`,
			want:   &provider.HTTPError{StatusCode: 400, Code: "unsupported_parameter", Message: "Unsupported parameter: 'max_tokens'"},
		},
		{
			name:   "401",
			status: 401,
			body:   `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			want:   &provider.HTTPError{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided."},
		},
		{
			name:   "429 retry-after-ms",
			status: 429,
			header: map[string]string{"retry-after-ms": "1500", "retry-after": "2"},
			body:   `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			want:   &provider.HTTPError{StatusCode: 429, Code: "rate_limit_exceeded", Message: "Rate limit reached", RetryAfter: 1500 * time.Millisecond},
		},
		{
			name:   "429 retry-after seconds",
			status: 429,
			header: map[string]string{"retry-after": "7"},
			body:   `{"error":{"message":"quota","type":"insufficient_quota","code":null}}`,
			want:   &provider.HTTPError{StatusCode: 429, Code: "insufficient_quota", Message: "quota", RetryAfter: 7 * time.Second},
		},
		{
			name:            "429 retry-after HTTP-date",
			status:          429,
			header:          map[string]string{"retry-after": inOneMinute},
			body:            `{"error":{"message":"slow down","type":"tokens","code":"rate_limit_exceeded"}}`,
			want:            &provider.HTTPError{StatusCode: 429, Code: "rate_limit_exceeded", Message: "slow down"},
			wantRetryAround: time.Minute,
		},
		{
			name:   "500 numeric code",
			status: 500,
			body:   `{"error":{"message":"The server had an error","type":"server_error","code":500}}`,
			want:   &provider.HTTPError{StatusCode: 500, Code: "500", Message: "The server had an error"},
		},
		{
			name:   "502 from a proxy",
			status: 502,
			body:   "<html><body>Bad Gateway</body></html>\n",
			want:   &provider.HTTPError{StatusCode: 502, Message: "<html><body>Bad Gateway</body></html>"},
		},
		{
			name:   "529 compatible server",
			status: 529,
			body:   `{"error":"overloaded"}`,
			want:   &provider.HTTPError{StatusCode: 529, Message: "overloaded"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, tt.status, tt.header, tt.body)
			p, err := New(Config{BaseURL: srv.URL, APIKey: testKey, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Complete(context.Background(), &provider.Request{Messages: []provider.Message{{Role: "user", Content: "Hi"}}})
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
	p, err := New(Config{BaseURL: srv.URL, APIKey: testKey, Model: "gpt-test", Params: provider.Params{Temperature: ptr(0.0), MaxTokens: 64}})
	if err != nil {
		b.Fatal(err)
	}
	req := &provider.Request{System: "Answer with one word.", Messages: []provider.Message{{Role: "user", Content: "What is the capital of France?"}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestErrorInA200: gateways answer 200 with an error object instead of choices;
// it is the sample's error, retried as its code or type says, with its message.
func TestErrorInA200(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantIn     string
	}{
		{"OpenRouter upstream failure", `{"error":{"code":502,"message":"Provider returned error"}}`, 502, "Provider returned error"},
		{"server error type", `{"error":{"message":"model overloaded, try later","type":"server_error"}}`, 500, "model overloaded"},
		{"request error: final", `{"error":{"message":"bad request","type":"invalid_request_error"},"choices":[]}`, 200, "bad request"},
		{"a string", `{"error":"no credits"}`, 200, "no credits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, 200, nil, tt.body)
			p, err := New(Config{BaseURL: srv.URL, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Complete(context.Background(), &provider.Request{Messages: []provider.Message{{Role: "user", Content: "Hi"}}})
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
			return New(Config{BaseURL: baseURL, APIKey: key, Model: "m", Params: provider.Params{Temperature: ptr(0.5)}})
		},
		Key:       testKey,
		KeyHeader: "Authorization",
		OK:        okBody,
		Errors:    map[int]string{429: `{"error":{"message":"no","type":"x"}}`, 500: `{"error":{"message":"no","type":"x"}}`},
		KeyEchoes: map[int][]string{
			401: {`{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`},
			403: {`{"error":{"message":"denied","code":"%s"}}`},
			500: {"auth header was %s", strings.Repeat("x", 480) + "%s"},
		},
		PartialBody: `{"choices":[{"message":`,
		Request:     &provider.Request{System: "s", Messages: []provider.Message{{Role: "user", Content: "Hi"}}},
	})
}
