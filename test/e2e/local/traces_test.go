package local_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestRunTracesReachJaeger: a run with spec.tracing sends its traces over
// OTLP to a real Jaeger: one trace per sample, its attempts as GenAI spans
// whose count, refusals and tokens are what the server saw, the scorer's
// span, and the sample's tokens as its record says; no prompt without the
// opt-in. The standard OTEL_* variables win over the spec (grpc).
func TestRunTracesReachJaeger(t *testing.T) {
	const n = 30
	jaeger := testutil.StartJaeger(t, "127.0.0.1")
	srv := newFake(t, fakellm.Config{Latency: 5 * time.Millisecond, FailureRate: 0.1, DropRate: 0.05,
		RequestsPerMinute: 1200, Burst: 2, Seed: 11})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	service := fmt.Sprintf("proctor-e2e-%d", time.Now().UnixNano())
	w.env["OTEL_SERVICE_NAME"] = service
	w.writeEval("traced", fmt.Sprintf(`  concurrency: 6
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: %s
  retry: {maxAttempts: 8, initialBackoff: 10ms, maxBackoff: 50ms}
  scoring: [{type: exact_match}]
  tracing:
    endpoint: %s
`, srv.OpenAIURL(), jaeger.OTLPHTTP))
	if res := w.run(); res.Code != 0 {
		t.Fatalf("proctor run: %v", res)
	}
	st := srv.Stats()
	t.Logf("the server: %+v", st)
	if st.RateLimited == 0 || st.Failed+st.Dropped == 0 {
		t.Fatalf("the server refused %d and failed %d requests: want some of each", st.RateLimited, st.Failed+st.Dropped)
	}
	all, _ := readRecords(t, w.out)
	recs := map[string]record{}
	for _, r := range all {
		recs[r.ID] = r
	}

	// The run flushed its spans before it exited; Jaeger's batch may take
	// a moment more to store them.
	var traces []testutil.JaegerTrace
	waitFor(t, 30*time.Second, "a trace for every sample in Jaeger", func() bool {
		var err error
		traces, err = jaeger.Traces(service, 10*n)
		return err == nil && len(traces) == n
	})
	var attempts, refused, failed, in, out int64
	seen := map[string]bool{}
	for _, tr := range traces {
		var root *testutil.JaegerSpan
		byName := map[string]int{}
		for i, s := range tr.Spans {
			byName[s.OperationName]++
			if s.Parent() == "" {
				if root != nil {
					t.Fatalf("trace %s has two roots", tr.TraceID)
				}
				root = &tr.Spans[i]
			}
			if s.Tag("gen_ai.input.messages") != "" || s.Tag("gen_ai.output.messages") != "" {
				t.Errorf("span %s holds prompts or answers without captureContent", s.OperationName)
			}
		}
		if root == nil || root.OperationName != "sample small" {
			t.Fatalf("trace %s: no root span of the sample: %v", tr.TraceID, byName)
		}
		id := root.Tag("proctor.sample.id")
		rec, ok := recs[id]
		if !ok || seen[id] {
			t.Fatalf("trace %s is of sample %q: unknown, or its second trace", tr.TraceID, id)
		}
		seen[id] = true
		for _, s := range tr.Spans {
			if s.OperationName != "chat fake-small" {
				continue
			}
			attempts++
			if s.Parent() != root.SpanID || s.Tag("gen_ai.operation.name") != "chat" || s.Tag("gen_ai.provider.name") != "openai" || s.Tag("gen_ai.request.model") != "fake-small" {
				t.Errorf("sample %s: attempt span %+v", id, s.Tags)
			}
			switch s.Tag("error.type") {
			case "":
				i, _ := strconv.ParseInt(s.Tag("gen_ai.usage.input_tokens"), 10, 64)
				o, _ := strconv.ParseInt(s.Tag("gen_ai.usage.output_tokens"), 10, 64)
				in, out = in+i, out+o
			case "429":
				refused++
			default:
				failed++
			}
		}
		if got := int64(byName["chat fake-small"]); got != int64(rec.Attempts) {
			t.Errorf("sample %s: %d attempt spans, its record %d attempts", id, got, rec.Attempts)
		}
		if byName["score exact_match"] != 1 || root.Tag("gen_ai.usage.input_tokens") != strconv.FormatInt(rec.InputTokens, 10) {
			t.Errorf("sample %s: spans %v, root's input tokens %s (the record's %d)", id, byName, root.Tag("gen_ai.usage.input_tokens"), rec.InputTokens)
		}
	}
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"attempts", attempts, st.Requests},
		{"refused (429)", refused, st.RateLimited},
		{"failed or dropped", failed, st.Failed + st.Dropped},
		{"input tokens", in, st.InputTokens},
		{"output tokens", out, st.OutputTokens},
	} {
		if c.got != c.want {
			t.Errorf("%s: Jaeger's spans say %d, the server %d", c.what, c.got, c.want)
		}
	}

	// The environment wins over the spec: the same run again, to Jaeger's
	// gRPC receiver, as another service.
	w.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = jaeger.OTLPGRPC
	w.env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
	w.env["OTEL_SERVICE_NAME"] = service + "-grpc"
	if res := w.run("--restart"); res.Code != 0 {
		t.Fatalf("proctor run --restart: %v", res)
	}
	waitFor(t, 30*time.Second, "a trace for every sample over gRPC", func() bool {
		tr, err := jaeger.Traces(service+"-grpc", 10*n)
		return err == nil && len(tr) == n
	})
}

// TestRunTracesAnAgent: an agent's run on a sample is an invoke_agent span;
// the agent is given it as TRACEPARENT, and each call it makes through its
// endpoint's proxy is a span below it, with the endpoint's attempt below
// that, carrying the tokens the server counted.
func TestRunTracesAnAgent(t *testing.T) {
	const n, rpm = 4, 600
	jaeger := testutil.StartJaeger(t, "127.0.0.1")
	srv, w, endpoint := teamKey(t, n, rpm)
	service := fmt.Sprintf("proctor-agent-%d", time.Now().UnixNano())
	w.env["OTEL_SERVICE_NAME"] = service
	w.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = jaeger.OTLPHTTP
	w.write("evaluation.yaml", endpoint+evaluation("agents", fmt.Sprintf(`  concurrency: 2
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: bot
    provider: agent
    agent:
      command: [%q, -calls, "2", -trace, "{{ .Prompt }}"]
      endpoints:
      - {endpointRef: {name: team-key}, baseURLEnv: OPENAI_BASE_URL, apiKeyEnv: OPENAI_API_KEY}
`, fakeAgentBin)))
	if res := w.run(); res.Code != 0 {
		t.Fatalf("proctor run: %v", res)
	}
	st := srv.Stats()
	recs, _ := readRecords(t, w.out)
	given := map[string]string{} // sample: the TRACEPARENT its agent was given
	for _, r := range recs {
		_, tp, _ := strings.Cut(r.Output, "traceparent: ")
		given[r.ID] = strings.TrimSpace(tp)
	}
	var traces []testutil.JaegerTrace
	waitFor(t, 30*time.Second, "a trace for every sample in Jaeger", func() bool {
		var err error
		traces, err = jaeger.Traces(service, 10*n)
		return err == nil && len(traces) == n
	})
	var in int64
	for _, tr := range traces {
		byID := map[string]testutil.JaegerSpan{}
		var root, invoke testutil.JaegerSpan
		for _, s := range tr.Spans {
			byID[s.SpanID] = s
			switch s.OperationName {
			case "sample bot":
				root = s
			case "invoke_agent bot":
				invoke = s
			}
		}
		id := root.Tag("proctor.sample.id")
		if invoke.SpanID == "" || invoke.Parent() != root.SpanID || invoke.Tag("gen_ai.agent.name") != "bot" {
			t.Fatalf("sample %q: no invoke_agent span below the sample's", id)
		}
		if want := fmt.Sprintf("00-%s-%s-01", tr.TraceID, invoke.SpanID); given[id] != want {
			t.Errorf("sample %s: the agent was given TRACEPARENT %q, want its span's %q", id, given[id], want)
		}
		proxied := 0
		for _, s := range tr.Spans {
			switch s.OperationName {
			case "proxy team-key":
				proxied++
				if s.Parent() != invoke.SpanID || s.Tag("http.response.status_code") != "200" {
					t.Errorf("sample %s: proxied call %+v not below the agent's span, or not answered", id, s.Tags)
				}
			case "chat fake-agent":
				if p := byID[s.Parent()]; p.OperationName != "proxy team-key" {
					t.Errorf("sample %s: the endpoint's attempt is below %q, not a proxied call", id, p.OperationName)
				}
				i, _ := strconv.ParseInt(s.Tag("gen_ai.usage.input_tokens"), 10, 64)
				in += i
			}
		}
		if proxied != 2 {
			t.Errorf("sample %s: %d proxied calls' spans, want 2", id, proxied)
		}
	}
	if in != st.InputTokens || st.Requests != 2*n {
		t.Errorf("the endpoint's attempts' spans say %d input tokens, the server %d (of %d requests, want %d)", in, st.InputTokens, st.Requests, 2*n)
	}
}
