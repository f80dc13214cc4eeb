package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/openai"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// recorded is a tracer whose ended spans tests read.
func recorded(content bool) (*telemetry.Tracer, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	return telemetry.NewTracer(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)), content), sr
}

// attrs are a span's attributes by key, as strings.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// traces groups spans by trace, each trace's spans in the order they ended.
func traces(sr *tracetest.SpanRecorder) map[trace.TraceID][]sdktrace.ReadOnlySpan {
	out := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		out[s.SpanContext().TraceID()] = append(out[s.SpanContext().TraceID()], s)
	}
	return out
}

// TestTracesOneTracePerSample: against an OpenAI-compatible server that
// refuses one sample's first request (429) and rejects another's (400),
// each sample is one trace: its root span, one GenAI span per attempt with
// the conventions' attributes and the tokens the server counted, a span per
// hook and per scorer (the judge's attempt below it), the scores as
// evaluation results; prompts and answers redacted; a failed sample's span
// failed with its kind.
func TestTracesOneTracePerSample(t *testing.T) {
	const secret = "sk-trace-secret-77f1"
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		q := req.Messages[len(req.Messages)-1].Content
		mu.Lock()
		seen[q]++
		n := seen[q]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case q == "q0" && n == 1:
			w.Header().Set("Retry-After-Ms", "10")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"slow down","type":"rate_limit"}}`)
			return
		case q == "q2":
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"no","type":"invalid_request_error"}}`)
			return
		}
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":2}}`, q, 10+len(q))
	}))
	defer srv.Close()
	p, err := openai.New(openai.Config{BaseURL: srv.URL + "/v1", Model: "m-1"})
	if err != nil {
		t.Fatal(err)
	}
	judge := &fakeProvider{fn: func(context.Context, *provider.Request, int64) (*provider.Response, error) {
		return &provider.Response{Text: "VERDICT: CORRECT", Usage: provider.Usage{InputTokens: 7, OutputTokens: 1}}, nil
	}}
	plan := testPlan(t).Model("gpt", p, 2).Price(t, "1", "2").Model("judge", judge, 1).JudgeOnly().
		Items("d", json.RawMessage(`{"id":"a","input":"q0","expected":"q0"}`), json.RawMessage(`{"id":"b","input":"q1 `+secret+`","expected":"x"}`),
			json.RawMessage(`{"id":"c","input":"q2","expected":"q2"}`)).
		Scorer(score.Config{Type: score.TypeExactMatch}, "").Scorer(score.Config{Type: score.TypeJudge, Name: "graded"}, "judge").
		Retry(retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxThrottleWait: time.Minute}).Obj()
	plan.Models[0].GenAI = telemetry.GenAI{Operation: telemetry.OperationChat, Provider: "openai", RequestModel: "m-1", BaseURL: srv.URL + "/v1", MaxTokens: 64}
	plan.Models[1].GenAI = telemetry.GenAI{Operation: telemetry.OperationChat, Provider: "anthropic", RequestModel: "j-1"}
	plan.Secrets = []string{secret}
	plan.Hooks = &Hooks{BeforeSample: hookFunc("beforeSample", func(*provider.Request) error { return nil })}
	tracer, sr := recorded(true)
	sink := newMemSink()
	run(t, plan, sink, Options{Tracer: tracer})

	byTrace := traces(sr)
	if len(byTrace) != 3 {
		t.Fatalf("%d traces, want one per sample (3)", len(byTrace))
	}
	type attempt struct {
		Name, Attempt, Error, In, Out string
		Status                        codes.Code
	}
	want := map[string][]attempt{
		"a": {{"chat m-1", "1", "429", "", "", codes.Error}, {"chat m-1", "2", "", "12", "2", codes.Unset}},
		"b": {{"chat m-1", "1", "", fmt.Sprint(10 + len("q1 "+secret)), "2", codes.Unset}},
		"c": {{"chat m-1", "1", "400", "", "", codes.Error}},
	}
	for _, spans := range byTrace {
		root := spans[len(spans)-1]
		ra := attrs(root)
		id := ra["proctor.sample.id"]
		if root.Name() != "sample gpt" || root.Parent().IsValid() || ra["proctor.model"] != "gpt" || ra["proctor.dataset"] != "d" {
			t.Fatalf("trace of %q: the last span to end is %q %v, parent %v: want the sample's root span", id, root.Name(), ra, root.Parent())
		}
		var got []attempt
		names := map[string]int{}
		for _, s := range spans[:len(spans)-1] {
			names[s.Name()]++
			a := attrs(s)
			if s.Name() == "chat m-1" {
				if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
					t.Errorf("sample %s: attempt span not a client span below the sample's", id)
				}
				for k, v := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m-1",
					"server.address": "127.0.0.1", "gen_ai.request.max_tokens": "64", "proctor.model": "gpt"} {
					if a[k] != v {
						t.Errorf("sample %s: attempt %s = %q, want %q", id, k, a[k], v)
					}
				}
				got = append(got, attempt{s.Name(), a["proctor.attempt"], a["error.type"], a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"], s.Status().Code})
				if strings.Contains(fmt.Sprint(s.Attributes()), secret) {
					t.Errorf("sample %s: an attempt's span holds the secret: %v", id, s.Attributes())
				}
				if a["error.type"] == "" && !strings.Contains(a["gen_ai.output.messages"], `"role":"assistant"`) {
					t.Errorf("sample %s: output messages %q", id, a["gen_ai.output.messages"])
				}
				if id == "b" && !strings.Contains(a["gen_ai.input.messages"], "q1 "+provider.Redacted) {
					t.Errorf("sample b: input messages %q, want the prompt redacted", a["gen_ai.input.messages"])
				}
			}
			if s.Name() == "hook beforeSample" && s.Parent().SpanID() != root.SpanContext().SpanID() {
				t.Errorf("sample %s: the hook's span is not below the sample's", id)
			}
			if s.Name() == "chat j-1" {
				// The judge's attempt, below its scorer's span.
				var scorer sdktrace.ReadOnlySpan
				for _, p := range spans {
					if p.SpanContext().SpanID() == s.Parent().SpanID() {
						scorer = p
					}
				}
				if scorer == nil || scorer.Name() != "score graded" || a["gen_ai.provider.name"] != "anthropic" || a["gen_ai.usage.input_tokens"] != "7" {
					t.Errorf("sample %s: the judge's attempt %v is not below the judge scorer's span", id, a)
				}
			}
		}
		if diff := cmp.Diff(want[id], got); diff != "" {
			t.Errorf("sample %s: attempts (-want +got):\n%s", id, diff)
		}
		// Scores: a span per scorer, and the results on the sample's span.
		var results []string
		for _, ev := range root.Events() {
			if ev.Name == telemetry.EvaluationResultEvent {
				m := map[string]string{}
				for _, kv := range ev.Attributes {
					m[string(kv.Key)] = kv.Value.Emit()
				}
				results = append(results, m["gen_ai.evaluation.name"]+"="+m["gen_ai.evaluation.score.value"])
			}
		}
		slices.Sort(results)
		rec := sink.get("gpt", "d", map[string]int{"a": 0, "b": 1, "c": 2}[id])
		if id == "c" {
			if root.Status().Code != codes.Error || ra["error.type"] != "call" || len(results) != 0 || names["score graded"] != 0 {
				t.Errorf("sample c failed its call: root %v %v, results %v", root.Status(), ra, results)
			}
			continue
		}
		wantResults := []string{fmt.Sprintf("exact_match=%g", rec.Scores["exact_match"]), "graded=1"}
		slices.Sort(wantResults)
		if diff := cmp.Diff(wantResults, results); diff != "" {
			t.Errorf("sample %s: evaluation results (-want +got):\n%s", id, diff)
		}
		if names["score exact_match"] != 1 || names["score graded"] != 1 || names["hook beforeSample"] != 1 || names["chat j-1"] != 1 {
			t.Errorf("sample %s: spans %v, want one per scorer, hook and judge call", id, names)
		}
		if ra["gen_ai.usage.input_tokens"] != fmt.Sprint(rec.InputTokens) || ra["proctor.cost_usd"] != attribute.Float64Value(*rec.Cost).Emit() {
			t.Errorf("sample %s: root says %s tokens, $%s; the record %d, $%v", id, ra["gen_ai.usage.input_tokens"], ra["proctor.cost_usd"], rec.InputTokens, *rec.Cost)
		}
	}
}

// TestTracesWithoutContent: prompts and answers stay off spans unless the
// Evaluation opts in.
func TestTracesWithoutContent(t *testing.T) {
	plan := testPlan(t).Model("m", &fakeProvider{fn: echo}, 2).Dataset("d", 3).Obj()
	tracer, sr := recorded(false)
	run(t, plan, newMemSink(), Options{Tracer: tracer})
	if n := len(traces(sr)); n != 3 {
		t.Fatalf("%d traces, want 3", n)
	}
	for _, s := range sr.Ended() {
		for _, kv := range s.Attributes() {
			if strings.HasPrefix(string(kv.Key), "gen_ai.input") || strings.HasPrefix(string(kv.Key), "gen_ai.output") || strings.HasPrefix(string(kv.Key), "gen_ai.system") {
				t.Errorf("span %s holds %s without the opt-in", s.Name(), kv.Key)
			}
		}
	}
}

// TestTracesAnAgentsProxiedCalls: an agent is given its attempt's trace
// context (TRACEPARENT); each call it makes through its proxy is a span
// below that attempt, or below the agent's own span when it sends one of
// the same trace, with the endpoint's attempts below it.
func TestTracesAnAgentsProxiedCalls(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":10,"completion_tokens":4}}`)
	}))
	defer upstream.Close()
	const ownSpan = "00f067aa0ba902b7"
	var mu sync.Mutex
	given := map[string]string{} // sample: TRACEPARENT
	agent := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, _ int64) (*provider.Response, error) {
		env := map[string]string{}
		for _, kv := range req.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		mu.Lock()
		given[req.SampleID] = env["TRACEPARENT"]
		mu.Unlock()
		for i := range 2 {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, env["API_BASE"]+"/chat/completions", strings.NewReader(`{"model":"gpt-x"}`))
			r.Header.Set("Authorization", "Bearer "+env["API_KEY"])
			if i == 1 && req.SampleID == "s0" {
				// The agent traces itself: its second call is made in a
				// span of its own, in the trace it was given.
				parts := strings.Split(env["TRACEPARENT"], "-")
				r.Header.Set("Traceparent", strings.Join([]string{parts[0], parts[1], ownSpan, parts[3]}, "-"))
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				return nil, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return &provider.Response{Text: "done"}, nil
	}}
	plan := agentPlan(t, agent, upstream.URL+"/v1", false, 2)
	plan.Models[0].GenAI = telemetry.GenAI{Operation: telemetry.OperationInvokeAgent, AgentName: "bot"}
	tracer, sr := recorded(false)
	run(t, plan, newMemSink(), Options{Tracer: tracer})
	byTrace := traces(sr)
	if len(byTrace) != 2 {
		t.Fatalf("%d traces, want 2", len(byTrace))
	}
	for _, spans := range byTrace {
		byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
		var invoke sdktrace.ReadOnlySpan
		var proxied, upstreamAttempts []sdktrace.ReadOnlySpan
		for _, s := range spans {
			byID[s.SpanContext().SpanID()] = s
			switch s.Name() {
			case "invoke_agent bot":
				invoke = s
			case "proxy shared":
				proxied = append(proxied, s)
			case "chat gpt-x":
				upstreamAttempts = append(upstreamAttempts, s)
			}
		}
		root := spans[len(spans)-1]
		id := attrs(root)["proctor.sample.id"]
		if invoke == nil || invoke.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Fatalf("sample %s: no invoke_agent span below the sample's", id)
		}
		mu.Lock()
		tp := given[id]
		mu.Unlock()
		if want := fmt.Sprintf("00-%s-%s-01", invoke.SpanContext().TraceID(), invoke.SpanContext().SpanID()); tp != want {
			t.Errorf("sample %s: TRACEPARENT=%q, want the attempt's %q", id, tp, want)
		}
		if len(proxied) != 2 || len(upstreamAttempts) != 2 {
			t.Fatalf("sample %s: %d proxied spans and %d attempts of the endpoint, want 2 and 2", id, len(proxied), len(upstreamAttempts))
		}
		var parents []string
		for _, p := range proxied {
			parent := p.Parent().SpanID().String()
			if parent == invoke.SpanContext().SpanID().String() {
				parent = "invoke"
			}
			parents = append(parents, parent)
			a := attrs(p)
			if a["proctor.endpoint"] != "shared" || a["http.response.status_code"] != "200" || a["gen_ai.usage.input_tokens"] != "10" || a["gen_ai.request.model"] != "gpt-x" {
				t.Errorf("sample %s: proxied span %v", id, a)
			}
		}
		slices.Sort(parents)
		wantParents := []string{"invoke", "invoke"}
		if id == "s0" {
			wantParents = []string{ownSpan, "invoke"}
		}
		if diff := cmp.Diff(wantParents, parents); diff != "" {
			t.Errorf("sample %s: the proxied calls' parents (-want +got):\n%s", id, diff)
		}
		for _, a := range upstreamAttempts {
			p := byID[a.Parent().SpanID()]
			if p == nil || p.Name() != "proxy shared" || attrs(a)["gen_ai.provider.name"] != "openai" || attrs(a)["gen_ai.usage.output_tokens"] != "4" {
				t.Errorf("sample %s: the endpoint's attempt %v is not below a proxied call's span", id, attrs(a))
			}
		}
	}
}

// TestTracesBatchSamples: a batch model's samples are traced too, each its
// trace: the request in its batch as an attempt span from the batch's
// submission, the batch's id on both; one that failed in its batches and
// was called at once (retry: sync) has its call's attempt instead.
func TestTracesBatchSamples(t *testing.T) {
	f := newFakeBatcher(1)
	f.fail = func(id string) bool {
		_, idx, _, _, _ := parseBatchCustomID(id)
		return idx == 3
	}
	plan := batchPlan(t, f, 6, BatchConfig{Retry: "sync"})
	plan.Models[0].GenAI = telemetry.GenAI{Operation: telemetry.OperationChat, Provider: "openai", RequestModel: "b-1"}
	tracer, sr := recorded(false)
	sink := newBatchSink()
	if err := runBatch(t, plan, sink, Options{Tracer: tracer}); err != nil {
		t.Fatal(err)
	}
	byTrace := traces(sr)
	if len(byTrace) != 6 {
		t.Fatalf("%d traces, want one per sample (6)", len(byTrace))
	}
	for _, spans := range byTrace {
		var root sdktrace.ReadOnlySpan
		var attempts []sdktrace.ReadOnlySpan
		for _, s := range spans {
			switch {
			case !s.Parent().IsValid():
				root = s
			case s.Name() == "chat b-1":
				attempts = append(attempts, s)
			}
		}
		id := attrs(root)["proctor.sample.id"]
		if len(attempts) != 1 || attempts[0].Parent().SpanID() != root.SpanContext().SpanID() {
			t.Fatalf("sample %s: %d attempt spans below the sample's, want 1", id, len(attempts))
		}
		a := attrs(attempts[0])
		if id == "s3" {
			// Failed in its batch, then called at once.
			if a["proctor.batch.id"] != "" || a["gen_ai.usage.input_tokens"] != "10" {
				t.Errorf("sample s3: its call's attempt %v", a)
			}
			continue
		}
		if a["proctor.batch.id"] == "" || a["proctor.batch.id"] != attrs(root)["proctor.batch.id"] || a["gen_ai.usage.input_tokens"] != "10" ||
			attempts[0].StartTime().After(attempts[0].EndTime()) || root.StartTime() != attempts[0].StartTime() {
			t.Errorf("sample %s: its batch attempt %v (root %v)", id, a, attrs(root))
		}
	}
}
