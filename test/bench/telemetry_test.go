package bench

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/telemetry"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// BenchmarkTelemetryOverhead: a run at about 500 requests/s against the
// fake server (10 ms a request, 6 in flight), with the runner's metrics
// and without. Goal (issue 29): with them on, at least 0.97 of the
// throughput without. Rounds alternate, each against a fresh server, and
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
			if r%2 == 1 {
				opts.Metrics = telemetry.New()
			}
			before := cpuTime(b)
			sum, wall := runEngineWith(b, evaluation(url, data, "", concurrency), opts)
			cpu := float64((cpuTime(b) - before).Microseconds()) / n
			checkAllCorrect(b, sum, n)
			rate := float64(n) / wall.Seconds()
			if opts.Metrics != nil {
				on, cpuOn = append(on, rate), append(cpuOn, cpu)
			} else {
				off, cpuOff = append(off, rate), append(cpuOff, cpu)
			}
			b.Logf("round %d: metrics %v, %.0f requests/s, %.0f µs of CPU a request", r+1, opts.Metrics != nil, rate, cpu)
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
			b.Errorf("goal: with metrics, at least 0.97 of the throughput without; got %.3f (medians of %d rounds: %.0f and %.0f requests/s)",
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
