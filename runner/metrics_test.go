package runner

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/proctor-dev/proctor/runner/provider/openai"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// metric is the sum of a gathered metric's samples whose labels include
// labels: a counter's or gauge's value, a histogram's count.
func metric(t *testing.T, m *telemetry.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				sum += s.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				sum += s.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				sum += float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// TestMetricsCountWhatTheServerSaw: against an OpenAI-compatible server
// that refuses (429), fails (500) and rejects (400) some calls, the
// runner's metrics count each request by outcome as the server saw it,
// the retries, tokens, cost, samples by outcome, throttling and the first
// byte's time.
func TestMetricsCountWhatTheServerSaw(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}      // by sample input: requests
	byStatus := map[int]float64{} // what the server answered
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		q := "?"
		for _, s := range []string{"q0", "q1", "q2", "q3", "q4"} {
			if strings.Contains(string(body), `"`+s+`"`) {
				q = s
			}
		}
		mu.Lock()
		seen[q]++
		n := seen[q]
		status := http.StatusOK
		switch {
		case q == "q0" && n == 1:
			status = http.StatusTooManyRequests
		case q == "q0" && n == 2:
			status = http.StatusInternalServerError
		case q == "q3":
			status = http.StatusBadRequest
		}
		byStatus[status]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if status != http.StatusOK {
			w.Header().Set("Retry-After-Ms", "10")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"status %d","type":"test"}}`, status)
			return
		}
		// The header first, the answer a moment later.
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(30 * time.Millisecond)
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}`, q)
	}))
	defer srv.Close()
	p, err := openai.New(openai.Config{BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	plan := testPlan(t).Model("gpt", p, 1).Price(t, "1", "2").Dataset("d", 5).
		Retry(retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxThrottleWait: time.Minute}).Obj()
	plan.Models[0].Endpoint = "team"
	met := telemetry.New()
	sink := newMemSink()
	run(t, plan, sink, Options{Metrics: met})

	model := map[string]string{"model": "gpt", "endpoint": "team"}
	with := func(k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range model {
			out[a] = b
		}
		return out
	}
	for outcome, status := range map[string]int{"ok": 200, "throttled": 429, "server_error": 500, "client_error": 400} {
		if got, want := metric(t, met, "proctor_runner_requests_total", with("outcome", outcome)), byStatus[status]; got != want {
			t.Errorf("requests %s: %v, the server answered %v with %d", outcome, got, want, status)
		}
	}
	var cost float64
	for i := range 5 {
		if rec := sink.get("gpt", "d", i); rec.Cost != nil {
			cost += *rec.Cost
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"proctor_runner_retries_total", model, 2},
		{"proctor_runner_tokens_total", with("kind", "input"), 40},
		{"proctor_runner_tokens_total", with("kind", "output"), 8},
		{"proctor_runner_tokens_total", with("kind", "cached_input"), 16},
		{"proctor_runner_request_duration_seconds", model, 7},
		{"proctor_runner_time_to_first_byte_seconds", model, 7},
		{"proctor_runner_requests_in_flight", model, 0},
		{"proctor_runner_samples_total", map[string]string{"model": "gpt", "dataset": "d", "outcome": "ok", "kind": ""}, 4},
		{"proctor_runner_samples_total", map[string]string{"model": "gpt", "dataset": "d", "outcome": "errored", "kind": "call"}, 1},
		{"proctor_runner_throttled", map[string]string{"model": "gpt"}, 0},
		{"proctor_runner_cost_dollars_total", model, cost},
	} {
		if got := metric(t, met, c.name, c.labels); fmt.Sprintf("%.9g", got) != fmt.Sprintf("%.9g", c.want) {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if cost == 0 {
		t.Error("the records cost nothing")
	}
	if held := metric(t, met, "proctor_runner_throttled_seconds_total", map[string]string{"model": "gpt"}); held <= 0 {
		t.Errorf("throttled for %vs, want the spell from the 429 to the answer", held)
	}
	// The first byte came before the whole answer, which took 30 ms more.
	families, _ := met.Registry.Gather()
	var ttfb, total float64
	for _, f := range families {
		for _, s := range f.GetMetric() {
			switch f.GetName() {
			case "proctor_runner_time_to_first_byte_seconds":
				ttfb += s.GetHistogram().GetSampleSum()
			case "proctor_runner_request_duration_seconds":
				total += s.GetHistogram().GetSampleSum()
			}
		}
	}
	if ttfb <= 0 || total-ttfb < 4*0.025 {
		t.Errorf("time to first byte %vs in all, whole answers %vs: want the 4 answers' 30 ms apart", ttfb, total)
	}
}
