package local_test

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// scrape reads a Prometheus endpoint: each metric's samples by name.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sum adds up a family's samples whose labels include labels.
func sum(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := families[name]
	if f == nil {
		return 0
	}
	total := 0.0
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// TestRunMetricsMatchTheServer: proctor run --metrics-addr serves the run's
// metrics while it runs, and they count what a server that throttles,
// fails and drops calls saw: its requests by outcome and its tokens.
func TestRunMetricsMatchTheServer(t *testing.T) {
	const n = 40
	srv := newFake(t, fakellm.Config{Latency: 10 * time.Millisecond, FailureRate: 0.15, DropRate: 0.05,
		RequestsPerMinute: 1200, Burst: 2, Seed: 7})
	w := newWorkspace(t)
	// The last sample waits, so that the others are done while it runs.
	w.write("qs.jsonl", arithmeticJSONL("q", n-1)+`{"id":"last","input":"SLEEP: 4s\nWhat is 1 + 1?","expected":"2"}`+"\n")
	w.writeEval("metrics", fmt.Sprintf(`  concurrency: 8
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: %s
  retry: {maxAttempts: 6, initialBackoff: 10ms, maxBackoff: 50ms}
  scoring: [{type: exact_match}]
`, srv.OpenAIURL()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := w.start("run", "-f", w.evalFile(), "-o", w.out, "--progress", "none", "--metrics-addr", addr)
	url := "http://" + addr + "/metrics"
	small := map[string]string{"model": "small", "endpoint": ""}
	var families map[string]*dto.MetricFamily
	waitFor(t, 60*time.Second, "every sample but the last done", func() bool {
		f, err := scrape(url)
		if err == nil {
			families = f
		}
		return err == nil && sum(f, "proctor_runner_samples_total", map[string]string{"model": "small"}) == n-1 &&
			sum(f, "proctor_runner_requests_in_flight", small) == 1 &&
			sum(f, "proctor_runner_samples_in_flight", map[string]string{"model": "small"}) == 1
	})
	st := srv.Stats()
	res := p.wait()
	if res.Code != 0 {
		t.Fatalf("proctor run: %v", res)
	}
	with := func(outcome string) map[string]string {
		return map[string]string{"model": "small", "endpoint": "", "outcome": outcome}
	}
	// The last sample's request is in flight: the server counted it, the
	// runner will when it ends.
	requests := sum(families, "proctor_runner_requests_total", small)
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"requests (+1 in flight)", requests + 1, float64(st.Requests)},
		{"answered", sum(families, "proctor_runner_requests_total", with("ok")), float64(st.Succeeded)},
		{"throttled", sum(families, "proctor_runner_requests_total", with("throttled")), float64(st.RateLimited)},
		{"failed", sum(families, "proctor_runner_requests_total", with("server_error")), float64(st.Failed)},
		{"dropped", sum(families, "proctor_runner_requests_total", with("network")), float64(st.Dropped)},
		{"input tokens", sum(families, "proctor_runner_tokens_total", map[string]string{"model": "small", "kind": "input"}), float64(st.InputTokens)},
		{"output tokens", sum(families, "proctor_runner_tokens_total", map[string]string{"model": "small", "kind": "output"}), float64(st.OutputTokens)},
		{"retries", sum(families, "proctor_runner_retries_total", small), float64(st.Requests - 1 - (n - 1))},
	} {
		if c.got != c.want {
			t.Errorf("%s: the runner's metrics say %v, the server %v", c.what, c.got, c.want)
		}
	}
	t.Logf("the server: %+v", st)
	if st.RateLimited == 0 || st.Failed == 0 || st.Dropped == 0 {
		t.Errorf("the server throttled %d, failed %d and dropped %d requests: want some of each", st.RateLimited, st.Failed, st.Dropped)
	}
	if h := sum(families, "proctor_runner_request_duration_seconds", small); h != requests {
		t.Errorf("%v request durations for %v requests", h, requests)
	}
}
