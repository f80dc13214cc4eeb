package runner

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/score"
)

// TestBuiltScorers: a scorer the plan's maker built is the one the engine
// scores with (it is built once), and a judge scorer built with a stand-in
// judge asks the engine's judge model.
func TestBuiltScorers(t *testing.T) {
	judge := &fakeProvider{fn: func(context.Context, *provider.Request, int64) (*provider.Response, error) {
		return &provider.Response{Text: "VERDICT: CORRECT"}, nil
	}}
	never := func(context.Context, string) (string, error) {
		t.Error("the judge scorer asked the judge it was built with")
		return "", nil
	}
	graded, err := score.New(score.Config{Type: score.TypeJudge, Name: "graded"}, never)
	if err != nil {
		t.Fatal(err)
	}
	exact := &countingScorer{Scorer: mustScorer(t, score.Config{Type: score.TypeExactMatch})}
	plan := testPlan(t).Model("subject", &fakeProvider{fn: echo}, 2).Model("judge", judge, 1).JudgeOnly().Dataset("d", 3).Obj()
	plan.Scorers = []Scorer{
		{Config: score.Config{Type: score.TypeExactMatch}, Built: exact},
		{Config: score.Config{Type: score.TypeJudge, Name: "graded"}, JudgeModel: "judge", Built: graded},
	}
	sink := newMemSink()
	run(t, plan, sink, Options{})
	if n := exact.calls.Load(); n != 3 {
		t.Errorf("the built scorer scored %d samples, want 3", n)
	}
	if n := judge.calls.Load(); n != 3 {
		t.Errorf("judge model called %d times, want 3", n)
	}
	for i := range 3 {
		if rec := sink.get("subject", "d", i); rec == nil || rec.Scores["graded"] != 1 || !strings.Contains(rec.Output, "q") {
			t.Errorf("record %d = %+v, want graded 1", i, rec)
		}
	}
}

// countingScorer counts its calls (the subject runs two samples at a time).
type countingScorer struct {
	score.Scorer
	calls atomic.Int64
}

func (s *countingScorer) Score(ctx context.Context, in score.Input) (float64, error) {
	s.calls.Add(1)
	return s.Scorer.Score(ctx, in)
}

func mustScorer(t *testing.T, cfg score.Config) score.Scorer {
	t.Helper()
	s, err := score.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
