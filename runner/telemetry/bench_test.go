package telemetry

import (
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

// BenchmarkAttempt: what counting one request costs the runner.
func BenchmarkAttempt(b *testing.B) {
	m := New()
	u := provider.Usage{InputTokens: 20, OutputTokens: 3}
	b.ReportAllocs()
	for b.Loop() {
		m.Sending("gpt", "team", 1)
		m.Sending("gpt", "team", -1)
		m.Attempt("gpt", "team", nil, 12*time.Millisecond, 8*time.Millisecond, u, 0.0001)
		m.Sample("gpt", "qs", "")
	}
}
