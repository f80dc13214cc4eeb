package runner

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

const realKey = "sk-real-endpoint-key-5e1f"

// agentCall is one HTTP call an agent makes, as its environment says.
type agentCall struct {
	path, body string
	// anthropic sends the key as Anthropic's clients do.
	anthropic bool
}

// callingAgent is an agent (a provider) that makes calls through its proxy,
// with what its sample's environment holds, and answers with what it got.
func callingAgent(t *testing.T, calls ...agentCall) *fakeProvider {
	return &fakeProvider{fn: func(ctx context.Context, req *provider.Request, _ int64) (*provider.Response, error) {
		env := map[string]string{}
		for _, kv := range req.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if strings.Contains(strings.Join(req.Env, " "), realKey) {
			t.Errorf("the agent's environment holds the endpoint's key: %q", req.Env)
		}
		var answers []string
		for _, c := range calls {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, env["API_BASE"]+c.path, strings.NewReader(c.body))
			if c.anthropic {
				r.Header.Set("X-Api-Key", env["API_KEY"])
			} else {
				r.Header.Set("Authorization", "Bearer "+env["API_KEY"])
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				return nil, err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b))))
		}
		return &provider.Response{Text: strings.Join(answers, "\n")}, nil
	}}
}

// agentPlan is a plan of one agent model calling one endpoint at base.
func agentPlan(t *testing.T, agent provider.Provider, base string, anthropic bool, samples int) *Plan {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	plan := testPlan(t).Model("bot", agent, 2).Dataset("d", samples).
		Retry(retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxThrottleWait: time.Minute}).Obj()
	plan.Models[0].Agent = true
	plan.Models[0].AgentEndpoints = []*AgentEndpoint{{
		Endpoint: "shared", Caller: "bot/shared", Anthropic: anthropic, BaseURL: u, APIKey: realKey,
		Headers: map[string]string{"X-Team": "evals"}, BaseURLEnv: "API_BASE", APIKeyEnv: "API_KEY",
	}}
	return plan
}

// TestAgentProxyCallsWithTheRealKey: an agent's calls reach the endpoint
// with its key and headers, under its path; each is counted in the sample's
// record with its tokens, and as the caller's usage.
func TestAgentProxyCallsWithTheRealKey(t *testing.T) {
	var seen sync.Map
	var n atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		seen.Store(r.Header.Get("Authorization")+" "+r.Header.Get("X-Team")+" "+r.URL.Path, true)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":10,"completion_tokens":4}}`)
	}))
	defer upstream.Close()
	agent := callingAgent(t, agentCall{path: "/chat/completions", body: `{"model":"m"}`},
		agentCall{path: "/chat/completions", body: `{"model":"m"}`}, agentCall{path: "/chat/completions", body: `{"model":"m"}`})
	plan := agentPlan(t, agent, upstream.URL+"/v1", false, 4)
	sink := newMemSink()
	met := telemetry.New()
	e := run(t, plan, sink, Options{Metrics: met})
	// In metrics, the agent's calls go by its model's name and the endpoint's.
	if got := metric(t, met, "proctor_runner_requests_total", map[string]string{"model": "bot", "endpoint": "shared", "outcome": "ok"}); got != 12 {
		t.Errorf("requests of bot through shared: %v, want 12", got)
	}
	if got := metric(t, met, "proctor_runner_tokens_total", map[string]string{"model": "bot", "endpoint": "shared", "kind": "input"}); got != 120 {
		t.Errorf("input tokens of bot through shared: %v, want 120", got)
	}

	for i := range 4 {
		rec := sink.get("bot", "d", i)
		if rec.Error != "" {
			t.Fatalf("sample %d: %s", i, rec.Error)
		}
		if diff := cmp.Diff([]int64{3, 30, 12}, []int64{rec.AgentCalls, rec.InputTokens, rec.OutputTokens}); diff != "" {
			t.Errorf("sample %d: agentCalls, inputTokens, outputTokens (-want +got):\n%s", i, diff)
		}
		if !strings.HasPrefix(rec.Output, "200 ") {
			t.Errorf("sample %d: the agent got %q", i, rec.Output)
		}
		// Each call, one by one.
		want := results.ProxiedCall{Endpoint: "shared", Model: "m", Path: "/v1/chat/completions", Status: 200, Attempts: 1, InputTokens: 10, OutputTokens: 4}
		if diff := cmp.Diff([]results.ProxiedCall{want, want, want}, rec.ProxiedCalls, cmpopts.IgnoreFields(results.ProxiedCall{}, "StartedAt", "LatencyMillis")); diff != "" {
			t.Errorf("sample %d: proxied calls (-want +got):\n%s", i, diff)
		}
		for _, c := range rec.ProxiedCalls {
			if c.StartedAt.IsZero() || c.StartedAt.Location() != time.UTC {
				t.Errorf("sample %d: a call started at %v", i, c.StartedAt)
			}
		}
	}
	if got := n.Load(); got != 12 {
		t.Errorf("the endpoint got %d calls, want 12", got)
	}
	if _, ok := seen.Load("Bearer " + realKey + " evals /v1/chat/completions"); !ok {
		seen.Range(func(k, _ any) bool { t.Logf("seen: %q", k); return true })
		t.Error("the endpoint did not get the real key, the endpoint's header and the agent's path")
	}
	if u := e.Usage("bot/shared"); u.Requests != 12 || u.InputTokens != 120 {
		t.Errorf("Usage(bot/shared) = %+v, want 12 requests, 120 input tokens", u)
	}
}

// TestAgentProxyRetriesThrottlingAndServerErrors: a 429 and a 500 are
// retried by the proxy; the agent sees only the answer.
func TestAgentProxyRetriesThrottlingAndServerErrors(t *testing.T) {
	var n atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.Header().Set("Retry-After-Ms", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}`)
		case 2:
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"error":{"message":"boom"}}`)
		default:
			fmt.Fprint(w, `{"usage":{"prompt_tokens":7,"completion_tokens":1}}`)
		}
	}))
	defer upstream.Close()
	plan := agentPlan(t, callingAgent(t, agentCall{path: "/chat/completions", body: "{}"}), upstream.URL+"/v1", false, 1)
	sink := newMemSink()
	e := run(t, plan, sink, Options{})
	rec := sink.get("bot", "d", 0)
	if rec.Output != `200 {"usage":{"prompt_tokens":7,"completion_tokens":1}}` || rec.AgentCalls != 1 || rec.InputTokens != 7 {
		t.Errorf("record: output %q, agentCalls %d, inputTokens %d; want the third answer, 1 call, 7 tokens", rec.Output, rec.AgentCalls, rec.InputTokens)
	}
	if u := e.Usage("bot/shared"); u.Requests != 3 || u.Throttled != 1 {
		t.Errorf("Usage(bot/shared) = %+v, want 3 requests, 1 throttled", u)
	}
	want := []results.ProxiedCall{{Endpoint: "shared", Path: "/v1/chat/completions", Status: 200, Attempts: 3, InputTokens: 7, OutputTokens: 1}}
	if diff := cmp.Diff(want, rec.ProxiedCalls, cmpopts.IgnoreFields(results.ProxiedCall{}, "StartedAt", "LatencyMillis")); diff != "" {
		t.Errorf("proxied calls (-want +got):\n%s", diff)
	}
}

// TestAgentProxyRelaysFinalErrors: an error that is not retried (a 400)
// reaches the agent as the endpoint gave it.
func TestAgentProxyRelaysFinalErrors(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"bad model"}}`)
	}))
	defer upstream.Close()
	plan := agentPlan(t, callingAgent(t, agentCall{path: "/chat/completions", body: `{"model":"nope"}`}), upstream.URL+"/v1", false, 1)
	sink := newMemSink()
	run(t, plan, sink, Options{})
	rec := sink.get("bot", "d", 0)
	if rec.Output != `400 {"error":{"message":"bad model"}}` || rec.AgentCalls != 1 {
		t.Errorf("record: output %q, agentCalls %d; want the 400 relayed, 1 call", rec.Output, rec.AgentCalls)
	}
	if len(rec.ProxiedCalls) != 1 || rec.ProxiedCalls[0].Status != 400 || rec.ProxiedCalls[0].Model != "nope" ||
		!strings.Contains(rec.ProxiedCalls[0].Error, "bad model") {
		t.Errorf("proxied calls: %+v, want the 400 with its error", rec.ProxiedCalls)
	}
}

// TestAgentProxyListsTheFirstCalls: a record lists its first calls one by
// one, and counts them all; an error that quotes the key is redacted.
func TestAgentProxyListsTheFirstCalls(t *testing.T) {
	var n atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"message":"key %s is not allowed"}}`, realKey)
			return
		}
		fmt.Fprint(w, `{"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	defer upstream.Close()
	calls := make([]agentCall, results.MaxProxiedCalls+5)
	for i := range calls {
		calls[i] = agentCall{path: "/chat/completions", body: fmt.Sprintf(`{"model":"m%d"}`, i)}
	}
	plan := agentPlan(t, callingAgent(t, calls...), upstream.URL+"/v1", false, 1)
	sink := newMemSink()
	run(t, plan, sink, Options{})
	rec := sink.get("bot", "d", 0)
	if rec.AgentCalls != int64(len(calls)) || len(rec.ProxiedCalls) != results.MaxProxiedCalls {
		t.Fatalf("agentCalls %d, %d listed; want %d and %d", rec.AgentCalls, len(rec.ProxiedCalls), len(calls), results.MaxProxiedCalls)
	}
	for i, c := range rec.ProxiedCalls {
		if c.Model != fmt.Sprintf("m%d", i) {
			t.Errorf("call %d asked for %q: not in order", i, c.Model)
		}
	}
	if first := rec.ProxiedCalls[0]; first.Status != http.StatusUnauthorized || first.Error == "" || strings.Contains(first.Error, realKey) {
		t.Errorf("the first call: status %d, error %q; want the 401, its key redacted", first.Status, first.Error)
	}
}

// TestAgentProxyStreamsAnthropic: a streamed answer reaches the agent as it
// comes; its usage is read from the events; the key travels in x-api-key.
func TestAgentProxyStreamsAnthropic(t *testing.T) {
	events := []string{
		`{"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}`,
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":"Hi"}}`,
		`{"type":"message_delta","usage":{"output_tokens":9}}`,
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != realKey || r.Header.Get("Authorization") != "" || r.URL.Path != "/v1/messages" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			fmt.Fprintf(w, "event: x\ndata: %s\n\n", e)
			w.(http.Flusher).Flush()
		}
	}))
	defer upstream.Close()
	plan := agentPlan(t, callingAgent(t, agentCall{path: "/v1/messages", body: "{}", anthropic: true}), upstream.URL, true, 1)
	sink := newMemSink()
	run(t, plan, sink, Options{})
	rec := sink.get("bot", "d", 0)
	if !strings.HasPrefix(rec.Output, "200 event: x") || strings.Count(rec.Output, "data: ") != 3 {
		t.Errorf("the agent got %q, want the three events", rec.Output)
	}
	if rec.InputTokens != 25 || rec.OutputTokens != 9 {
		t.Errorf("tokens %d in, %d out; want 25 and 9", rec.InputTokens, rec.OutputTokens)
	}
}

// TestAgentProxyRefusesOtherKeysAndPaths: only a running sample's
// placeholder, on the endpoint's path, is served; nothing reaches the
// endpoint otherwise.
func TestAgentProxyRefusesOtherKeysAndPaths(t *testing.T) {
	var n atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	defer upstream.Close()
	var previous string // the first sample's key, tried by the second
	agent := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, call int64) (*provider.Response, error) {
		env := map[string]string{}
		for _, kv := range req.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		tries := []struct{ key, path string }{{"sk-guess", "/v1/chat/completions"}, {"", "/v1/chat/completions"}, {env["API_KEY"], "/admin"}}
		if call == 1 {
			previous = env["API_KEY"]
		} else {
			tries = tries[:0]
			tries = append(tries, struct{ key, path string }{previous, "/v1/chat/completions"})
		}
		var got []string
		for _, c := range tries {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(env["API_BASE"], "/v1")+c.path, strings.NewReader("{}"))
			r.Header.Set("Authorization", "Bearer "+c.key)
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			got = append(got, fmt.Sprint(resp.StatusCode))
		}
		return &provider.Response{Text: strings.Join(got, " ")}, nil
	}}
	plan := agentPlan(t, agent, upstream.URL+"/v1", false, 2)
	plan.Models[0].Concurrency = 1 // one sample after the other
	sink := newMemSink()
	run(t, plan, sink, Options{})
	for i, want := range []string{"401 401 404", "401"} {
		if rec := sink.get("bot", "d", i); rec.Output != want || rec.AgentCalls != 0 {
			t.Errorf("sample %d: output %q, agentCalls %d; want %q and no calls", i, rec.Output, rec.AgentCalls, want)
		}
	}
	if n.Load() != 0 {
		t.Errorf("the endpoint got %d calls, want none", n.Load())
	}
}

// TestAgentProxyThrottledOutLeavesNoRecord: when the endpoint's quota does
// not recover, the agent's failure is not its own: the sample leaves no
// record (it runs again next time) and the model's part ends.
func TestAgentProxyThrottledOutLeavesNoRecord(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer upstream.Close()
	agent := callingAgent(t, agentCall{path: "/chat/completions", body: "{}"})
	failing := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		resp, err := agent.fn(ctx, req, n)
		if err == nil && !strings.HasPrefix(resp.Text, "200") {
			return nil, &provider.ExitError{ExitCode: 1, Stderr: resp.Text}
		}
		return resp, err
	}}
	plan := agentPlan(t, failing, upstream.URL+"/v1", false, 3)
	plan.Retry.MaxThrottleWait = 50 * time.Millisecond
	sink := newMemSink()
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Run(context.Background(), plan.Tasks(), sink)
	if !isThrottledOut(err) {
		t.Fatalf("Run = %v, want the model throttled out", err)
	}
	if got := sink.count(); got != 0 {
		t.Errorf("%d records, want none", got)
	}
}

// TestUsageScanner reads usage from JSON answers and from both providers'
// streams, written in pieces.
func TestUsageScanner(t *testing.T) {
	cases := []struct {
		name   string
		stream bool
		body   string
		want   provider.Usage
	}{
		{"openai json", false, `{"usage":{"prompt_tokens":3,"completion_tokens":2}}`, provider.Usage{InputTokens: 3, OutputTokens: 2}},
		{"responses json", false, `{"usage":{"input_tokens":5,"output_tokens":6}}`, provider.Usage{InputTokens: 5, OutputTokens: 6}},
		{"not json", false, `oops`, provider.Usage{}},
		{"openai stream", true, "data: {\"choices\":[]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":13}}\n\ndata: [DONE]\n\n",
			provider.Usage{InputTokens: 8, OutputTokens: 13}},
		{"responses stream", true, "event: response.completed\ndata: {\"response\":{\"usage\":{\"input_tokens\":4,\"output_tokens\":2}}}", provider.Usage{InputTokens: 4, OutputTokens: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := newUsageScanner(tc.stream)
			for i := 0; i < len(tc.body); i += 7 {
				u.write([]byte(tc.body[i:min(i+7, len(tc.body))]))
			}
			if diff := cmp.Diff(tc.want, u.usage()); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAgentProxyPacedByTheEndpoint: in a local run, an agent's calls and a
// model's calls through the same endpoint share its limit.
func TestAgentProxyPacedByTheEndpoint(t *testing.T) {
	var mu sync.Mutex
	var times []time.Time
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		fmt.Fprint(w, `{}`)
	}))
	defer upstream.Close()
	model := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return echo(ctx, req, n)
	}}
	agent := callingAgent(t, agentCall{path: "/chat/completions", body: "{}"}, agentCall{path: "/chat/completions", body: "{}"})
	plan := agentPlan(t, agent, upstream.URL+"/v1", false, 6)
	// 1200/min: one call every ~50ms; 12 agent calls and 6 model calls take about 0.85s.
	lim := ratelimit.Limits{RequestsPerMinute: 1200}
	plan.Endpoints = map[string]ratelimit.Limits{"shared": lim}
	plan.Models = append(plan.Models, &Model{Name: "m", Provider: model, Concurrency: 4, Fingerprint: "fp-m", Endpoint: "shared"})
	sink := newMemSink()
	run(t, plan, sink, Options{})
	if len(times) != 18 {
		t.Fatalf("%d calls, want 18", len(times))
	}
	if d := times[len(times)-1].Sub(times[0]); d < 750*time.Millisecond {
		t.Errorf("18 calls at a shared 1200/min took %v, want about 0.85s", d)
	}
}

// TestAgentProxyNeverRetriesAnAnswerBegun: an answer that breaks off after it
// began reaching the agent is not sent again (the call was paid for, and the
// agent has part of it): the endpoint is called once.
func TestAgentProxyNeverRetriesAnAnswerBegun(t *testing.T) {
	var n atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-stream
	}))
	defer upstream.Close()
	plan := agentPlan(t, callingAgent(t, agentCall{path: "/chat/completions", body: "{}"}), upstream.URL+"/v1", false, 1)
	sink := newMemSink()
	run(t, plan, sink, Options{})
	if got := n.Load(); got != 1 {
		t.Errorf("the endpoint was called %d times, want once", got)
	}
	if rec := sink.get("bot", "d", 0); rec.AgentCalls != 1 {
		t.Errorf("agentCalls %d, want 1", rec.AgentCalls)
	}
}

// TestAgentGivingUpWhileHeldLeavesNoRecord: an agent that gives up (its
// timeout) while its call waits for the endpoint (held: no share, or the
// endpoint gone) failed through no fault of its own: no record, so the
// sample runs again; nothing reached the endpoint.
func TestAgentGivingUpWhileHeldLeavesNoRecord(t *testing.T) {
	var n atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	defer upstream.Close()
	agent := callingAgent(t, agentCall{path: "/chat/completions", body: "{}"})
	plan := agentPlan(t, agent, upstream.URL+"/v1", false, 2)
	plan.Models[0].Timeout = 200 * time.Millisecond
	plan.Retry.MaxAttempts = 1
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Pause("bot/shared", true); err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	if err := e.Run(context.Background(), plan.Tasks(), sink); err != nil {
		t.Fatal(err)
	}
	if sink.count() != 0 || n.Load() != 0 {
		t.Errorf("%d records and %d calls to the endpoint, want none", sink.count(), n.Load())
	}
}

// TestAgentProxyPricesByRequestedModel: an agent's call costs its endpoint's
// price for the model it asked for, else the agent model's price; a call of
// a model priced by neither makes the record's cost unknown.
func TestAgentProxyPricesByRequestedModel(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1000,"completion_tokens":100}}`)
	}))
	defer upstream.Close()
	price := func(in, out string) *spend.Price {
		p, err := spend.NewPrice(spend.PerMillion{Input: in, Output: out})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Each call: 1,000 input and 100 output tokens.
	big, small, agentOwn := price("10", "30"), price("1", "2"), price("3", "6")
	cases := []struct {
		name      string
		endpoint  map[string]*spend.Price
		own       *spend.Price
		wantCost  *float64
		wantSpent spend.Amount
	}{
		{name: "both models priced by the endpoint", endpoint: map[string]*spend.Price{"big": big, "small": small},
			wantCost: new(0.013 + 0.0012), wantSpent: spend.FromDollars(0.0142)},
		{name: "the agent's price for the model the endpoint does not list", endpoint: map[string]*spend.Price{"big": big}, own: agentOwn,
			wantCost: new(0.013 + 0.0036), wantSpent: spend.FromDollars(0.0166)},
		{name: "the agent's price only", own: agentOwn, wantCost: new(0.0036 * 2), wantSpent: spend.FromDollars(0.0072)},
		{name: "a model priced by neither", endpoint: map[string]*spend.Price{"big": big}, wantSpent: spend.FromDollars(0.013)},
		{name: "no prices"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			agent := callingAgent(t, agentCall{path: "/chat/completions", body: `{"model":"big","messages":[]}`},
				agentCall{path: "/chat/completions", body: `{"messages":[],"model":"small"}`})
			plan := agentPlan(t, agent, upstream.URL+"/v1", false, 1)
			plan.Models[0].Price = tc.own
			plan.Models[0].AgentEndpoints[0].Prices = tc.endpoint
			ledger := spend.NewLedger(spend.Limit{Tokens: 1 << 40})
			sink := newMemSink()
			run(t, plan, sink, Options{Ledger: ledger})
			rec := sink.get("bot", "d", 0)
			if rec.Error != "" {
				t.Fatal(rec.Error)
			}
			if diff := cmp.Diff(tc.wantCost, rec.Cost, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("record cost (-want +got):\n%s", diff)
			}
			if got := ledger.State().Spent; got.Cost != tc.wantSpent || got.Tokens != 2200 {
				t.Errorf("ledger spent %v and %d tokens, want %v and 2200", got.Cost, got.Tokens, tc.wantSpent)
			}
		})
	}
}

// TestAgentReportedUsage: an agent without endpoints that reports its usage
// (agent.outputFormat) has it as the record's tokens, priced at the model's
// pricing, else at the cost it reported; with endpoints the proxies' counts
// are used instead, so that no call counts twice.
func TestAgentReportedUsage(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1000,"completion_tokens":100}}`)
	}))
	defer upstream.Close()
	reported := provider.Usage{InputTokens: 14000, CachedInputTokens: 11000, OutputTokens: 250}
	// The agent provider reads usage only from a report (agent.outputFormat).
	reporting := func(call agentCall, reports bool) *fakeProvider {
		inner := callingAgent(t, call)
		return &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
			if call.path != "" {
				if _, err := inner.Complete(ctx, req); err != nil {
					return nil, err
				}
			}
			if !reports {
				return &provider.Response{Text: "42"}, nil
			}
			return &provider.Response{Text: "42", Usage: reported, ReportedCost: new(0.0217)}, nil
		}}
	}
	// $3 input, $0.30 cached input, $15 output per million.
	price, err := spend.NewPrice(spend.PerMillion{Input: "3", CachedInput: "0.3", Output: "15"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name            string
		price           *spend.Price
		endpoints       bool
		reports         bool
		wantIn, wantOut int64
		wantCost        *float64
	}{
		{name: "priced", price: price, reports: true, wantIn: 14000, wantOut: 250, wantCost: new(0.009 + 0.0033 + 0.00375)},
		{name: "its own reported cost", reports: true, wantIn: 14000, wantOut: 250, wantCost: new(0.0217)},
		{name: "text output reports nothing", price: price, wantCost: nil},
		{name: "the proxies count instead", price: price, endpoints: true, reports: true, wantIn: 1000, wantOut: 100, wantCost: new(0.003 + 0.0015)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			call := agentCall{}
			if tc.endpoints {
				call = agentCall{path: "/chat/completions", body: `{"model":"m"}`}
			}
			plan := agentPlan(t, reporting(call, tc.reports), upstream.URL+"/v1", false, 1)
			if !tc.endpoints {
				plan.Models[0].AgentEndpoints = nil
			}
			plan.Models[0].Price, plan.Models[0].AgentReportsUsage = tc.price, tc.reports
			sink := newMemSink()
			run(t, plan, sink, Options{})
			rec := sink.get("bot", "d", 0)
			if rec.Error != "" {
				t.Fatal(rec.Error)
			}
			if rec.InputTokens != tc.wantIn || rec.OutputTokens != tc.wantOut {
				t.Errorf("tokens %d/%d, want %d/%d", rec.InputTokens, rec.OutputTokens, tc.wantIn, tc.wantOut)
			}
			if diff := cmp.Diff(tc.wantCost, rec.Cost, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("record cost (-want +got):\n%s", diff)
			}
		})
	}
}
