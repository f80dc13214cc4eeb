package fakellm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// scrub checks and removes the fields that vary between runs (ids, timestamps),
// so that the rest of a response can be compared exactly.
func scrub(t *testing.T, body map[string]any) {
	t.Helper()
	id, _ := body["id"].(string)
	if !strings.HasPrefix(id, "chatcmpl-") && !strings.HasPrefix(id, "msg_") {
		t.Errorf("id = %q, want chatcmpl-N or msg_N", id)
	}
	delete(body, "id")
	if created, ok := body["created"].(float64); ok {
		if d := time.Since(time.Unix(int64(created), 0)); d < -time.Minute || d > time.Minute {
			t.Errorf("created = %v, not about now", created)
		}
		delete(body, "created")
	}
	scrubToolIDs(t, body)
}

// scrubToolIDs replaces generated tool call ids (call_N, toolu_N) by their prefix.
func scrubToolIDs(t *testing.T, v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "id" {
				for _, p := range []string{"call_", "toolu_"} {
					if n, ok := strings.CutPrefix(s, p); ok && n != "" && strings.Trim(n, "0123456789") == "" {
						v[k] = p
					}
				}
			}
			scrubToolIDs(t, x)
		}
	case []any:
		for _, x := range v {
			scrubToolIDs(t, x)
		}
	}
}

// unjson decodes a JSON literal for use as an expected value.
func unjson(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad expectation %s: %v", s, err)
	}
	return m
}

// Tokens: "Be brief." is 3, "REPLY: hello world" is 4 + 3 for the message,
// "hello world" is 2.
func TestResponseShapes(t *testing.T) {
	_, url := start(t, fakellm.Config{})
	tests := []struct {
		name string
		path string
		req  string
		want string
	}{{
		name: "openai",
		path: openAIPath,
		req: `{"model":"fake-model","messages":[
			{"role":"system","content":"Be brief."},
			{"role":"user","content":"REPLY: hello world"}],
			"temperature":0.5,"top_p":1,"max_tokens":50,"seed":7,"stop":["\n\n"],"unknown_field":{"x":1}}`,
		want: `{"object":"chat.completion","model":"fake-model",
			"choices":[{"index":0,"message":{"role":"assistant","content":"hello world"},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`,
	}, {
		name: "openai content parts and null",
		path: openAIPath,
		req: `{"model":"fake-model","messages":[
			{"role":"system","content":[{"type":"text","text":"Be brief."}]},
			{"role":"assistant","content":null},
			{"role":"user","content":[{"type":"text","text":"REPLY: hello world"},{"type":"image_url","image_url":{"url":"x"}}]}],
			"max_completion_tokens":5}`,
		want: `{"object":"chat.completion","model":"fake-model",
			"choices":[{"index":0,"message":{"role":"assistant","content":"hello world"},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":13,"completion_tokens":2,"total_tokens":15}}`,
	}, {
		name: "anthropic",
		path: anthropicPath,
		req: `{"model":"fake-model","max_tokens":50,"system":"Be brief.",
			"messages":[{"role":"user","content":"REPLY: hello world"}],
			"temperature":0.5,"top_p":1,"stop_sequences":["x"],"metadata":{"user_id":"u"}}`,
		want: `{"type":"message","role":"assistant","model":"fake-model",
			"content":[{"type":"text","text":"hello world"}],
			"stop_reason":"end_turn","stop_sequence":null,
			"usage":{"input_tokens":10,"output_tokens":2}}`,
	}, {
		name: "anthropic blocks",
		path: anthropicPath,
		req: `{"model":"fake-model","max_tokens":50,"system":[{"type":"text","text":"Be brief."}],
			"messages":[{"role":"user","content":[{"type":"text","text":"REPLY: hello world"}]}]}`,
		want: `{"type":"message","role":"assistant","model":"fake-model",
			"content":[{"type":"text","text":"hello world"}],
			"stop_reason":"end_turn","stop_sequence":null,
			"usage":{"input_tokens":10,"output_tokens":2}}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, url+tt.path, tt.req)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %v", r.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			scrub(t, r.body)
			if diff := cmp.Diff(unjson(t, tt.want), r.body); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToolCalls(t *testing.T) {
	_, url := start(t, fakellm.Config{})
	const oaTools = `"tools":[
		{"type":"function","function":{"name":"search_docs","description":"Search","parameters":{"type":"object"}}},
		{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	const anTools = `"tools":[
		{"name":"search_docs","description":"Search","input_schema":{"type":"object"}},
		{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	tests := []struct {
		name string
		path string
		req  string
		want string // the choices (OpenAI) or the content and stop_reason (Anthropic)
	}{{
		name: "openai chooses a tool by name",
		path: openAIPath,
		req:  `{"model":"m",` + oaTools + `,"messages":[{"role":"user","content":"What is the weather in Paris?"}]}`,
		want: `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
			"tool_calls":[{"id":"call_","type":"function","function":{"name":"get_weather","arguments":"{}"}}]}}]}`,
	}, {
		name: "openai TOOL directive",
		path: openAIPath,
		req:  `{"model":"m",` + oaTools + `,"messages":[{"role":"user","content":"TOOL: lookup {\"id\": 7, \"q\": [1, 2]}"}]}`,
		want: `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
			"tool_calls":[{"id":"call_","type":"function","function":{"name":"lookup","arguments":"{\"id\":7,\"q\":[1,2]}"}}]}}]}`,
	}, {
		name: "openai answers after the tool result",
		path: openAIPath,
		req: `{"model":"m",` + oaTools + `,"messages":[
			{"role":"user","content":"TOOL: lookup {\"id\":7}"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"lookup","arguments":"{\"id\":7}"}}]},
			{"role":"tool","tool_call_id":"call_9","content":"the answer is 42"}]}`,
		want: `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"the answer is 42"}}]}`,
	}, {
		name: "anthropic chooses a tool by name",
		path: anthropicPath,
		req:  `{"model":"m","max_tokens":10,` + anTools + `,"messages":[{"role":"user","content":"What is the weather in Paris?"}]}`,
		want: `{"stop_reason":"tool_use","content":[{"type":"tool_use","id":"toolu_","name":"get_weather","input":{}}]}`,
	}, {
		name: "anthropic TOOL directive",
		path: anthropicPath,
		req:  `{"model":"m","max_tokens":10,` + anTools + `,"messages":[{"role":"user","content":"TOOL: lookup {\"id\": 7}"}]}`,
		want: `{"stop_reason":"tool_use","content":[{"type":"tool_use","id":"toolu_","name":"lookup","input":{"id":7}}]}`,
	}, {
		name: "anthropic answers after the tool result",
		path: anthropicPath,
		req: `{"model":"m","max_tokens":10,` + anTools + `,"messages":[
			{"role":"user","content":"TOOL: lookup {\"id\":7}"},
			{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_9","name":"lookup","input":{"id":7}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":[{"type":"text","text":"the answer is 42"}]}]}]}`,
		want: `{"stop_reason":"end_turn","content":[{"type":"text","text":"the answer is 42"}]}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, url+tt.path, tt.req)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %v", r.status, r.body)
			}
			scrubToolIDs(t, r.body)
			want := unjson(t, tt.want)
			got := map[string]any{}
			for k := range want {
				got[k] = r.body[k]
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

// A Responder sees both APIs' requests in the same neutral form, and both APIs
// charge the same input tokens for the same conversation.
func TestResponderSeesNeutralRequest(t *testing.T) {
	var mu sync.Mutex
	var got []fakellm.Request
	_, url := start(t, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		return fakellm.Reply{Text: "fine", ToolCalls: []fakellm.ToolCall{{Name: "f", Arguments: json.RawMessage(` { "a" : 1 } `)}}}
	}})

	temp := 0.25
	want := fakellm.Request{
		Model:  "m",
		System: "Be brief.",
		Messages: []fakellm.Message{
			{Role: "user", Content: "Weather in Paris?\nAnd Rome?"},
			{Role: "assistant", Content: "Checking.", ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}},
			{Role: "tool", ToolCallID: "c1", Content: "sunny"},
			{Role: "user", Content: "Thanks"},
		},
		Tools:       []fakellm.Tool{{Name: "get_weather", Description: "Weather now", Parameters: json.RawMessage(`{"type":"object"}`)}},
		MaxTokens:   64,
		Temperature: &temp,
	}
	oa := `{"model":"m","max_tokens":64,"temperature":0.25,
		"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object"}}}],
		"messages":[
			{"role":"system","content":"Be brief."},
			{"role":"user","content":[{"type":"text","text":"Weather in Paris?"},{"type":"text","text":"And Rome?"}]},
			{"role":"assistant","content":"Checking.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"sunny"},
			{"role":"user","content":"Thanks"}]}`
	an := `{"model":"m","max_tokens":64,"temperature":0.25,"system":"Be brief.",
		"tools":[{"name":"get_weather","description":"Weather now","input_schema":{"type":"object"}}],
		"messages":[
			{"role":"user","content":[{"type":"text","text":"Weather in Paris?"},{"type":"text","text":"And Rome?"}]},
			{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"c1","name":"get_weather","input":{"city":"Paris"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"sunny"},{"type":"text","text":"Thanks"}]}]}`

	ro := post(t, url+openAIPath, oa, "X-Trace", "1")
	ra := post(t, url+anthropicPath, an, "X-Trace", "1")
	if ro.status != http.StatusOK || ra.status != http.StatusOK {
		t.Fatalf("statuses %d, %d: %v %v", ro.status, ra.status, ro.body, ra.body)
	}
	if len(got) != 2 {
		t.Fatalf("responder called %d times, want 2", len(got))
	}
	opts := cmp.Options{cmpopts.IgnoreFields(fakellm.Request{}, "API", "Header"), cmpopts.IgnoreUnexported(fakellm.Request{})}
	for i, api := range []string{fakellm.APIOpenAI, fakellm.APIAnthropic} {
		if got[i].API != api || got[i].Header.Get("X-Trace") != "1" {
			t.Errorf("request %d: API %q, X-Trace %q", i, got[i].API, got[i].Header.Get("X-Trace"))
		}
		if diff := cmp.Diff(want, got[i], opts); diff != "" {
			t.Errorf("%s request (-want +got):\n%s", api, diff)
		}
	}

	wantIn := float64(fakellm.CountInputTokens(want))
	// "fine" is 1 token; "f" and {"a":1} are 1 + 7.
	usage := ro.body["usage"].(map[string]any)
	if diff := cmp.Diff(map[string]any{"prompt_tokens": wantIn, "completion_tokens": 9.0, "total_tokens": wantIn + 9}, usage); diff != "" {
		t.Errorf("openai usage (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"input_tokens": wantIn, "output_tokens": 9.0}, ra.body["usage"]); diff != "" {
		t.Errorf("anthropic usage (-want +got):\n%s", diff)
	}
	// Text and tool calls together: both APIs carry both.
	msg := ro.body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["content"] != "fine" || msg["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"] != `{"a":1}` {
		t.Errorf("openai message = %v", msg)
	}
	if n := len(ra.body["content"].([]any)); n != 2 {
		t.Errorf("anthropic content has %d blocks, want text and tool_use: %v", n, ra.body["content"])
	}
}

func TestCountInputTokens(t *testing.T) {
	req := fakellm.Request{
		System: "You are helpful.", // 4
		Messages: []fakellm.Message{
			{Role: "user", Content: "What's 2+2?"}, // What ' s 2 + 2 ? = 7, +3
			{Role: "assistant", ToolCalls: []fakellm.ToolCall{{Name: "calc", Arguments: json.RawMessage(`{"x":1}`)}}}, // 1 + 7, +3
		},
		Tools: []fakellm.Tool{{Name: "calc_v2", Description: "Adds.", Parameters: json.RawMessage(`{}`)}}, // 3 + 2 + 2
	}
	if got, want := fakellm.CountInputTokens(req), int64(4+7+3+8+3+7); got != want {
		t.Errorf("CountInputTokens = %d, want %d", got, want)
	}
}

func TestAuth(t *testing.T) {
	_, url := start(t, fakellm.Config{APIKey: "sk-test"})
	tests := []struct {
		name    string
		path    string
		headers []string
		want    int
		errType string
	}{
		{"openai bearer", openAIPath, []string{"Authorization", "Bearer sk-test"}, 200, ""},
		{"openai x-api-key", openAIPath, []string{"x-api-key", "sk-test"}, 200, ""},
		{"openai missing", openAIPath, nil, 401, "invalid_request_error"},
		{"openai wrong", openAIPath, []string{"Authorization", "Bearer sk-nope"}, 401, "invalid_request_error"},
		{"openai key without bearer", openAIPath, []string{"Authorization", "sk-test"}, 401, "invalid_request_error"},
		{"anthropic x-api-key", anthropicPath, []string{"x-api-key", "sk-test"}, 200, ""},
		{"anthropic bearer", anthropicPath, []string{"Authorization", "Bearer sk-test"}, 200, ""},
		{"anthropic missing", anthropicPath, nil, 401, "authentication_error"},
		{"anthropic wrong", anthropicPath, []string{"x-api-key", "sk-test2"}, 401, "authentication_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := any(openAIText("hi"))
			if tt.path == anthropicPath {
				body = anthropicText("hi")
			}
			r := post(t, url+tt.path, body, tt.headers...)
			if r.status != tt.want || errorType(r) != tt.errType {
				t.Errorf("status %d, error type %q; want %d, %q (body %v)", r.status, errorType(r), tt.want, tt.errType, r.body)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	s, url := start(t, fakellm.Config{})
	tests := []struct {
		name, path, body string
		want             int
	}{
		{"openai malformed JSON", openAIPath, `{"model":`, 400},
		{"openai empty body", openAIPath, ``, 400},
		{"openai not an object", openAIPath, `[1]`, 400},
		{"openai missing model", openAIPath, `{"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"openai no messages", openAIPath, `{"model":"m","messages":[]}`, 400},
		{"openai bad role", openAIPath, `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, 400},
		{"openai bad content", openAIPath, `{"model":"m","messages":[{"role":"user","content":42}]}`, 400},
		{"openai tool without id", openAIPath, `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, 400},
		{"openai object arguments", openAIPath, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":{"a":1}}}]}]}`, 400},
		{"openai temperature", openAIPath, `{"model":"m","temperature":3,"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"openai max_tokens", openAIPath, `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"openai stream", openAIPath, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"openai nameless tool", openAIPath, `{"model":"m","tools":[{"type":"function","function":{}}],"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"anthropic malformed JSON", anthropicPath, `{"model":"m",`, 400},
		{"anthropic missing model", anthropicPath, `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"anthropic missing max_tokens", anthropicPath, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 400},
		{"anthropic system role", anthropicPath, `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`, 400},
		{"anthropic temperature", anthropicPath, `{"model":"m","max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"anthropic tool_result without id", anthropicPath, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, 400},
		{"anthropic bad content", anthropicPath, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":{"text":"hi"}}]}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, url+tt.path, tt.body)
			if r.status != tt.want || errorType(r) != "invalid_request_error" {
				t.Errorf("status %d, error type %q; want %d invalid_request_error (body %v)", r.status, errorType(r), tt.want, r.body)
			}
			if tt.path == anthropicPath && r.body["type"] != "error" {
				t.Errorf("anthropic error body lacks type error: %v", r.body)
			}
			if msg, _ := r.body["error"].(map[string]any)["message"].(string); msg == "" {
				t.Errorf("no error message: %v", r.body)
			}
		})
	}
	if st := s.Stats(); st.Rejected != int64(len(tests)) || st.Requests != int64(len(tests)) || st.Succeeded != 0 {
		t.Errorf("stats = %+v, want %d requests, all rejected", st, len(tests))
	}
}

func TestOtherEndpoints(t *testing.T) {
	s, url := start(t, fakellm.Config{})
	get := func(path string) (int, string) {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := get("/healthz"); code != 200 || body != "ok" {
		t.Errorf("healthz: %d %q", code, body)
	}

	code, body := get("/v1/models")
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, Type string
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &models); code != 200 || err != nil || models.Object != "list" || len(models.Data) == 0 ||
		models.Data[0].ID == "" || models.Data[0].Object != "model" || models.Data[0].Type != "model" {
		t.Errorf("models: %d %s", code, body)
	}

	post(t, url+openAIPath, openAIText("REPLY: a b c"))
	code, body = get("/stats")
	var stats map[string]any
	if err := json.Unmarshal([]byte(body), &stats); code != 200 || err != nil {
		t.Fatalf("stats: %d %s", code, body)
	}
	want := map[string]any{
		"requests": 1.0, "succeeded": 1.0, "rateLimited": 0.0, "failed": 0.0, "dropped": 0.0, "rejected": 0.0,
		"inputTokens": 8.0, "outputTokens": 3.0, "maxRequestsInWindow": 1.0, "maxInputTokensInWindow": 8.0, "maxInFlight": 1.0, "counted": 0.0,
		"batches": 0.0, "batchRequests": 0.0, "duplicateBatchRequests": 0.0, "batchInputTokens": 0.0, "batchOutputTokens": 0.0, "batchesCancelled": 0.0, "batchCancelRequests": 0.0, "maxBatchesInProgress": 0.0,
	}
	if diff := cmp.Diff(want, stats); diff != "" {
		t.Errorf("GET /stats (-want +got):\n%s", diff)
	}

	resp, err := http.Post(url+"/stats/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || s.Stats() != (fakellm.Stats{}) {
		t.Errorf("reset: %d, stats %+v", resp.StatusCode, s.Stats())
	}

	// The mux rejects wrong methods; they are not model requests.
	if code, _ := get(openAIPath); code != http.StatusMethodNotAllowed {
		t.Errorf("GET %s = %d", openAIPath, code)
	}
	if s.Stats().Requests != 0 {
		t.Errorf("a GET counted as a model request")
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []fakellm.Config{
		{LimitMode: "leaky"},
		{FailureRate: 1.5},
		{DropRate: -0.1},
		{RequestsPerMinute: -1},
		{Latency: -time.Second},
	}
	for _, cfg := range bad {
		if cfg.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", cfg)
		}
	}
	if err := (fakellm.Config{LimitMode: fakellm.LimitBucket, FailureRate: 1}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("New with an invalid config did not panic")
		}
	}()
	fakellm.New(bad[0])
}

func TestServesArithmeticDataset(t *testing.T) {
	srv := httptest.NewServer(fakellm.New(fakellm.Config{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/datasets/arithmetic.jsonl?n=3&prefix=web")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	want := `{"id":"web-0","input":"What is 0+1?","expected":"1"}` + "\n" +
		`{"id":"web-1","input":"What is 1+1?","expected":"2"}` + "\n" +
		`{"id":"web-2","input":"What is 2+1?","expected":"3"}` + "\n"
	if resp.StatusCode != 200 || string(b) != want {
		t.Errorf("GET: %s\n%s", resp.Status, b)
	}
}
