package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/telemetry"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// BenchmarkTelemetryOverhead: a run at about 500 requests/s against the
// fake server (10 ms a request, 6 in flight), with the runner's metrics
// and traces, and without. The traces go over OTLP/HTTP to a receiver that
// decodes and counts them (every span must arrive: a tracer that drops
// spans would be cheap). Goal (issue 29): with both on, at least 0.97 of
// the throughput without. Rounds alternate, each against a fresh server, and
// the medians are compared: this machine's speed varies more than that
// between two runs. It also reports the process's CPU time per request
// (the fake server's included, alike in both), where a cost shows before
// it slows a run.
func BenchmarkTelemetryOverhead(b *testing.B) {
	const n, concurrency, rounds = 5000, 6, 3
	data := writeArithmetic(b, b.TempDir(), n)
	for range b.N {
		var off, on, cpuOff, cpuOn []float64
		for r := range 2 * rounds {
			_, url := fakeServer(b, fakellm.Config{Latency: 10 * time.Millisecond})
			opts := runner.Options{}
			var spans *otlpReceiver
			if r%2 == 1 {
				opts.Metrics = telemetry.New()
				spans = startOTLPReceiver(b)
				opts.Tracer = spans.tracer(b)
			}
			before := cpuTime(b)
			sum, wall := runEngineWith(b, evaluation(url, data, "", concurrency), opts)
			if spans != nil {
				// What is still queued goes out before the round ends.
				if err := opts.Tracer.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			cpu := float64((cpuTime(b) - before).Microseconds()) / n
			checkAllCorrect(b, sum, n)
			if spans != nil {
				// A sample, its attempt and its scorer, each sample a trace.
				if got, traces := spans.counts(); got != 3*n || traces != n {
					b.Fatalf("the receiver got %d spans in %d traces, want %d in %d", got, traces, 3*n, n)
				}
			}
			rate := float64(n) / wall.Seconds()
			if opts.Metrics != nil {
				on, cpuOn = append(on, rate), append(cpuOn, cpu)
			} else {
				off, cpuOff = append(off, rate), append(cpuOff, cpu)
			}
			b.Logf("round %d: metrics and traces %v, %.0f requests/s, %.0f µs of CPU a request", r+1, opts.Metrics != nil, rate, cpu)
		}
		for _, s := range [][]float64{off, on, cpuOff, cpuOn} {
			slices.Sort(s)
		}
		b.ReportMetric(cpuOff[rounds/2], "off-cpu-µs/req")
		b.ReportMetric(cpuOn[rounds/2], "on-cpu-µs/req")
		ratio := on[rounds/2] / off[rounds/2]
		b.ReportMetric(off[rounds/2], "off-req/s")
		b.ReportMetric(on[rounds/2], "on-req/s")
		b.ReportMetric(ratio, "on/off")
		if ratio < 0.97 {
			b.Errorf("goal: with metrics and traces, at least 0.97 of the throughput without; got %.3f (medians of %d rounds: %.0f and %.0f requests/s)",
				ratio, rounds, on[rounds/2], off[rounds/2])
		}
	}
}

// cpuTime is the CPU time this process used so far, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// otlpReceiver takes OTLP/HTTP trace exports as a collector does, and
// counts their spans and traces.
type otlpReceiver struct {
	url    string
	mu     sync.Mutex
	spans  int
	traces map[string]bool
}

func startOTLPReceiver(tb testing.TB) *otlpReceiver {
	r := &otlpReceiver{traces: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans++
					r.traces[string(s.GetTraceId())] = true
				}
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	tb.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// tracer sends to the receiver as a run configured with its endpoint does.
func (r *otlpReceiver) tracer(tb testing.TB) *telemetry.Tracer {
	t, err := telemetry.StartTracing(context.Background(), telemetry.TracingConfig{
		Endpoint: r.url, Getenv: func(string) string { return "" }, Log: logr.Discard(),
	})
	if err != nil || t == nil {
		tb.Fatalf("starting the tracer: %v", err)
	}
	return t
}

func (r *otlpReceiver) counts() (spans, traces int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spans, len(r.traces)
}
