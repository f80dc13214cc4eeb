package runner

import (
	"context"
	"testing"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/score"
)

// BenchmarkEngineOverhead measures what the engine adds per sample around an
// instant provider: dataset decoding, prompt rendering, window, gate, limiter,
// scoring and the sink.
func BenchmarkEngineOverhead(b *testing.B) {
	resp := &provider.Response{Text: "q", Usage: provider.Usage{InputTokens: 10, OutputTokens: 1}}
	p := &fakeProvider{fn: func(context.Context, *provider.Request, int64) (*provider.Response, error) { return resp, nil }}
	plan := testPlan(b).Model("m", p, 32).Dataset("d", b.N).Scorer(score.Config{Type: score.TypeExactMatch}, "").Obj()
	e, err := New(plan, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := e.Run(context.Background(), plan.Tasks(), discardSink{}); err != nil {
		b.Fatal(err)
	}
}

type discardSink struct{}

func (discardSink) Done(string, string, int) bool                  { return false }
func (discardSink) Put(string, string, int, *results.Record) error { return nil }
