package fakellm_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/test/fakellm"
)

func user(text string) fakellm.Request {
	return fakellm.Request{Model: "m", Messages: []fakellm.Message{{Role: "user", Content: text}}}
}

func TestDefaultReply(t *testing.T) {
	weather := []fakellm.Tool{{Name: "search_docs"}, {Name: "get_weather"}, {Name: "get_time"}}
	call := func(name, args string) []fakellm.ToolCall {
		return []fakellm.ToolCall{{Name: name, Arguments: json.RawMessage(args)}}
	}
	withTools := func(req fakellm.Request, tools []fakellm.Tool) fakellm.Request {
		req.Tools = tools
		return req
	}
	tests := []struct {
		name string
		req  fakellm.Request
		want fakellm.Reply
	}{
		{"echo", user("hello there"), fakellm.Reply{Text: "hello there"}},
		{"empty conversation", fakellm.Request{}, fakellm.Reply{}},
		{"reply", user("Say something.\n  REPLY:  Paris  \nREPLY: London"), fakellm.Reply{Text: "Paris"}},
		{"status", user("STATUS: 503\nREPLY: x"), fakellm.Reply{Status: 503}},
		{"status 200 is ignored", user("STATUS: 200\nREPLY: x"), fakellm.Reply{Text: "x"}},
		{"bad status is ignored", user("STATUS: teapot"), fakellm.Reply{Text: "STATUS: teapot"}},
		{"sleep then reply", user("SLEEP: 1.5s\nREPLY: done"), fakellm.Reply{Text: "done", Delay: 1500 * time.Millisecond}},
		{"sleep then status", user("SLEEP: 20ms\nSTATUS: 400"), fakellm.Reply{Status: 400, Delay: 20 * time.Millisecond}},
		{"sleep then arithmetic", user("SLEEP: 1m\nWhat is 2+3?"), fakellm.Reply{Text: "5", Delay: time.Minute}},
		{"bad sleep is ignored", user("SLEEP: soon\nREPLY: ok"), fakellm.Reply{Text: "ok"}},
		{"tool", user(`TOOL: lookup {"id": 7}`), fakellm.Reply{ToolCalls: call("lookup", `{"id": 7}`)}},
		{"tool without arguments", user("TOOL: ping"), fakellm.Reply{ToolCalls: call("ping", `{}`)}},
		{"tool with bad JSON is not a directive", user("TOOL: f {oops"), fakellm.Reply{Text: "TOOL: f {oops"}},
		{"reply beats tool", user("TOOL: f {}\nREPLY: no"), fakellm.Reply{Text: "no"}},
		{"judge correct", user("Grade this.\n[Question]: Capital of France?\n[Expected answer]: Paris\n[Submitted answer]:  paris. "), fakellm.Reply{Text: fakellm.VerdictCorrect}},
		{"judge incorrect", user("[Expected answer]: 4\n[Submitted answer]: 5"), fakellm.Reply{Text: fakellm.VerdictIncorrect}},
		{"judge beats arithmetic", user("[Question]: 2+2\n[Expected answer]: 4\n[Submitted answer]: 4"), fakellm.Reply{Text: fakellm.VerdictCorrect}},
		{"add", user("What is 2 + 2?"), fakellm.Reply{Text: "4"}},
		{"subtract negatives", user("Compute -3 - -5"), fakellm.Reply{Text: "2"}},
		{"multiply x", user("3 x 4"), fakellm.Reply{Text: "12"}},
		{"multiply ×", user("2×3"), fakellm.Reply{Text: "6"}},
		{"multiply *", user("1.5*2"), fakellm.Reply{Text: "3"}},
		{"divide", user("7/2"), fakellm.Reply{Text: "3.5"}},
		{"exact decimals", user("0.1+0.2"), fakellm.Reply{Text: "0.3"}},
		{"repeating", user("1/3"), fakellm.Reply{Text: "0.3333333333333333"}},
		{"big integers", user("99999999999 * 99999999999"), fakellm.Reply{Text: "9999999999800000000001"}},
		{"divide by zero", user("1/0"), fakellm.Reply{Text: "undefined"}},
		{"first expression only", user("1+1 and 5*5"), fakellm.Reply{Text: "2"}},
		{"tool by name", withTools(user("What's the weather like?"), weather), fakellm.Reply{ToolCalls: call("get_weather", `{}`)}},
		{"tool by most words", withTools(user("get the time"), weather), fakellm.Reply{ToolCalls: call("get_time", `{}`)}},
		{"tool tie goes first", withTools(user("get it"), weather), fakellm.Reply{ToolCalls: call("get_weather", `{}`)}},
		{"no shared words goes first", withTools(user("hello"), weather), fakellm.Reply{ToolCalls: call("search_docs", `{}`)}},
		{"arithmetic beats tools", withTools(user("2+2"), weather), fakellm.Reply{Text: "4"}},
		{"last user message", fakellm.Request{Messages: []fakellm.Message{
			{Role: "user", Content: "REPLY: first"}, {Role: "assistant", Content: "first"}, {Role: "user", Content: "REPLY: second"},
		}}, fakellm.Reply{Text: "second"}},
		{"tool result turn uses the user text before it", fakellm.Request{Messages: []fakellm.Message{
			{Role: "user", Content: "What is 6*7?"},
			{Role: "assistant", ToolCalls: call("calc", `{}`)},
			{Role: "tool", ToolCallID: "1", Content: "42"},
		}}, fakellm.Reply{Text: "42"}},
		{"after tool results the tool rules stop", withTools(fakellm.Request{Messages: []fakellm.Message{
			{Role: "user", Content: "TOOL: get_weather {\"city\":\"Paris\"}"},
			{Role: "assistant", ToolCalls: call("get_weather", `{"city":"Paris"}`)},
			{Role: "tool", ToolCallID: "1", Content: "sunny"},
			{Role: "tool", ToolCallID: "2", Content: "warm"},
		}}, weather), fakellm.Reply{Text: "sunny\nwarm"}},
		{"after tool results REPLY still rules", fakellm.Request{Messages: []fakellm.Message{
			{Role: "user", Content: "TOOL: f {}\nREPLY: final"},
			{Role: "assistant", ToolCalls: call("f", `{}`)},
			{Role: "tool", ToolCallID: "1", Content: "x"},
		}}, fakellm.Reply{Text: "final"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, fakellm.DefaultReply(tt.req)); diff != "" {
				t.Errorf("DefaultReply (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRulesOverHTTP(t *testing.T) {
	t.Parallel()
	s, url := start(t, fakellm.Config{Latency: 20 * time.Millisecond, Jitter: 10 * time.Millisecond})

	t.Run("STATUS", func(t *testing.T) {
		for _, tt := range []struct {
			path    string
			body    any
			status  int
			errType string
		}{
			{openAIPath, openAIText("STATUS: 500"), 500, "server_error"},
			{openAIPath, openAIText("STATUS: 400"), 400, "invalid_request_error"},
			{openAIPath, openAIText("STATUS: 429"), 429, "requests"},
			{anthropicPath, anthropicText("STATUS: 529"), 529, "overloaded_error"},
			{anthropicPath, anthropicText("STATUS: 500"), 500, "api_error"},
			{anthropicPath, anthropicText("STATUS: 404"), 404, "not_found_error"},
		} {
			r := post(t, url+tt.path, tt.body)
			if r.status != tt.status || errorType(r) != tt.errType {
				t.Errorf("%s %v: status %d type %q, want %d %q", tt.path, tt.body, r.status, errorType(r), tt.status, tt.errType)
			}
		}
		st := s.Stats()
		if st.Failed != 3 || st.Rejected != 2 || st.RateLimited != 1 {
			t.Errorf("stats %+v: want 3 failed, 2 rejected, 1 rate limited", st)
		}
	})

	t.Run("SLEEP and latency", func(t *testing.T) {
		begin := time.Now()
		if got := answerText(t, post(t, url+anthropicPath, anthropicText("SLEEP: 50ms\nREPLY: late"))); got != "late" {
			t.Errorf("answer %q", got)
		}
		if d := time.Since(begin); d < 70*time.Millisecond { // 50ms + 20ms latency, jitter on top
			t.Errorf("answered after %v, want at least 70ms", d)
		}
	})
}

// The client going away stops the wait: the handler returns, and nothing counts
// as a success.
func TestClientGoneStopsSleep(t *testing.T) {
	t.Parallel()
	s := fakellm.New(fakellm.Config{})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close) // closing twice is harmless
	client := &http.Client{Timeout: 100 * time.Millisecond}
	if resp, err := send(client, ts.URL+openAIPath, openAIText("SLEEP: 30s")); err == nil {
		resp.Body.Close()
		t.Fatalf("got an answer (%d) to a 30s sleep within 100ms", resp.StatusCode)
	}
	begin := time.Now()
	ts.Close() // waits for the handler
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("handler kept sleeping for %v after the client left", d)
	}
	if st := s.Stats(); st.Succeeded != 0 || st.Requests != 1 {
		t.Errorf("stats %+v", st)
	}
}

// WrongRate is decided by a hash of the question, so every server (and every
// rerun) answers the same questions wrongly.
func TestWrongRate(t *testing.T) {
	t.Parallel()
	const n = 100
	answers := func(rate float64, responder func(fakellm.Request) fakellm.Reply) []int {
		_, url := start(t, fakellm.Config{WrongRate: rate, Seed: int64(rate * 1000), Responder: responder})
		var wrong []int
		for i := range n {
			got := answerText(t, post(t, url+openAIPath, openAIText(fmt.Sprintf("What is %d + %d?", i, 2*i))))
			switch got {
			case strconv.Itoa(3 * i):
			case strconv.Itoa(3*i + 1):
				wrong = append(wrong, i)
			default:
				t.Fatalf("question %d: answer %q is neither right nor off by one", i, got)
			}
		}
		return wrong
	}
	if w := answers(0, nil); len(w) != 0 {
		t.Errorf("rate 0: wrong answers to %v", w)
	}
	if w := answers(1, nil); len(w) != n {
		t.Errorf("rate 1: %d wrong answers, want all %d", len(w), n)
	}
	first := answers(0.3, nil)
	if len(first) < 15 || len(first) > 45 {
		t.Errorf("rate 0.3: %d of %d wrong", len(first), n)
	}
	// A responder falling back to DefaultReply gets the server's WrongRate too.
	again := answers(0.3, fakellm.DefaultReply)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("wrongly answered questions differ between servers (-first +again):\n%s", diff)
	}
}

// TestMaxTokensStopsTheAnswer: as the providers document, an answer stops
// where max_tokens runs out (OpenAI finish_reason "length", Anthropic
// stop_reason "max_tokens"), and a reasoning model that thought them all away
// answers nothing (OpenAI: content null), billed max_tokens of output.
func TestMaxTokensStopsTheAnswer(t *testing.T) {
	_, url := start(t, fakellm.Config{})
	oa := func(maxTokens int, text string) map[string]any {
		return post(t, url+openAIPath, map[string]any{"model": "m", "max_tokens": maxTokens,
			"messages": []any{map[string]any{"role": "user", "content": text}}}, "Authorization", "Bearer k").body
	}
	an := func(maxTokens int, text string) map[string]any {
		return post(t, url+anthropicPath, map[string]any{"model": "m", "max_tokens": maxTokens,
			"messages": []any{map[string]any{"role": "user", "content": text}}}, "x-api-key", "k", "anthropic-version", "2023-06-01").body
	}
	choice := func(b map[string]any) (content any, finish any, out any) {
		c := b["choices"].([]any)[0].(map[string]any)
		return c["message"].(map[string]any)["content"], c["finish_reason"], b["usage"].(map[string]any)["completion_tokens"]
	}
	cases := []struct {
		name                 string
		maxTokens            int
		text                 string
		content, finish, out any
	}{
		{"room enough", 16, "REPLY: one two three", "one two three", "stop", 3.0},
		{"cut", 2, "REPLY: one two three", "one two", "length", 2.0},
		{"thought it all away", 50, "THINK: 80\nWhat is 2+2?", nil, "length", 50.0},
		{"thought, then answered", 50, "THINK: 20\nWhat is 2+2?", "4", "stop", 21.0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			content, finish, out := choice(oa(c.maxTokens, c.text))
			if content != c.content || finish != c.finish || out != c.out {
				t.Errorf("OpenAI: content %v, finish_reason %v, completion_tokens %v; want %v, %v, %v", content, finish, out, c.content, c.finish, c.out)
			}
			b := an(c.maxTokens, c.text)
			wantStop := map[any]string{"stop": "end_turn", "length": "max_tokens"}[c.finish]
			if b["stop_reason"] != wantStop {
				t.Errorf("Anthropic: stop_reason %v, want %s", b["stop_reason"], wantStop)
			}
			if blocks := b["content"].([]any); c.content == nil && len(blocks) != 0 || c.content != nil && (len(blocks) != 1 || blocks[0].(map[string]any)["text"] != c.content) {
				t.Errorf("Anthropic: content %v, want %v", blocks, c.content)
			}
		})
	}
}
