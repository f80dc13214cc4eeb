package runner

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
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

// TestScorerFailureIsItsOwn: a judge that answers garbage fails its own metric
// only; exact_match keeps its score (a garbage judge showed EXACT_MATCH 0
// while every answer was right), the record says which scorer failed and
// why, and averaging the records gives the summary's metrics.
func TestScorerFailureIsItsOwn(t *testing.T) {
	judge := &fakeProvider{fn: func(context.Context, *provider.Request, int64) (*provider.Response, error) {
		return &provider.Response{Text: "I would rather not say."}, nil
	}}
	plan := testPlan(t).Model("subject", &fakeProvider{fn: echo}, 2).Model("judge", judge, 1).JudgeOnly().Dataset("d", 3).
		Scorer(score.Config{Type: score.TypeExactMatch}, "").
		Scorer(score.Config{Type: score.TypeJudge, Name: "graded"}, "judge").Obj()
	sink := newMemSink()
	run(t, plan, sink, Options{})
	agg := results.NewAggregate("subject", "d", 3, plan.MetricNames())
	for i := range 3 {
		rec := sink.get("subject", "d", i)
		if rec == nil {
			t.Fatalf("sample %d has no record", i)
		}
		if diff := cmp.Diff(map[string]float64{"exact_match": 1, "graded": 0}, rec.Scores); diff != "" {
			t.Errorf("sample %d scores (-want +got):\n%s", i, diff)
		}
		if rec.ErrorKind != results.ErrorKindScoring || !strings.HasPrefix(rec.Error, "scorer graded: ") ||
			len(rec.ScoreErrors) != 1 || rec.ScoreErrors["graded"] == "" {
			t.Errorf("sample %d: error %q (%s), scoreErrors %v; want graded's failure alone", i, rec.Error, rec.ErrorKind, rec.ScoreErrors)
		}
		// What the judge said is kept, to see why it could not be read.
		if diff := cmp.Diff(map[string]string{"graded": "I would rather not say."}, rec.Reasons); diff != "" {
			t.Errorf("sample %d reasons (-want +got):\n%s", i, diff)
		}
		agg.Add(rec)
	}
	s := agg.Summary()
	if s.Metrics["exact_match"] != 1 || s.Metrics["graded"] != 0 || s.Errored != 3 {
		t.Errorf("summary metrics %v, errored %d; want exact_match 1, graded 0, 3 errored", s.Metrics, s.Errored)
	}
}

// answers is a sink that holds earlier records to score again (as a journal
// does for --retry-errors or a changed scoring).
type answeredSink struct {
	*memSink
	earlier map[int]*results.Record
}

func (a *answeredSink) Answered(_, _ string, i int) *results.Record { return a.earlier[i] }

// TestCarriedAnswerScoresOnlyWhatIsMissing: an earlier answer is scored
// again without calling the model; the scores it carries (a scorer unchanged
// since) are kept without scoring again, the failed or new ones are scored,
// and its costs add this judging to what it carried.
func TestCarriedAnswerScoresOnlyWhatIsMissing(t *testing.T) {
	subject := &fakeProvider{fn: echo}
	judge := &fakeProvider{fn: func(context.Context, *provider.Request, int64) (*provider.Response, error) {
		return &provider.Response{Text: "VERDICT: CORRECT", Usage: provider.Usage{InputTokens: 100, OutputTokens: 10}}, nil
	}}
	exact := &countingScorer{Scorer: mustScorer(t, score.Config{Type: score.TypeExactMatch})}
	plan := testPlan(t).Model("subject", subject, 1).Model("judge", judge, 1).JudgeOnly().Price(t, "1", "1").Dataset("d", 2).Obj()
	plan.Scorers = []Scorer{
		{Config: score.Config{Type: score.TypeExactMatch}, Built: exact},
		{Config: score.Config{Type: score.TypeJudge, Name: "graded"}, JudgeModel: "judge"},
	}
	cost, judgeCost := 0.5, 0.25
	sink := &answeredSink{memSink: newMemSink(), earlier: map[int]*results.Record{
		// Its judge failed: only the judge scores again.
		0: {ID: "s0", Output: "q0", CacheKey: "k0", Scores: map[string]float64{"exact_match": 1, "graded": 0}, ScoreErrors: map[string]string{"graded": "no verdict"},
			Error: "scorer graded: no verdict", ErrorKind: results.ErrorKindScoring, InputTokens: 7, OutputTokens: 3, Cost: &cost,
			JudgeInputTokens: 50, JudgeCost: &judgeCost},
		// A wrong answer whose scores were all dropped (the scoring changed).
		1: {ID: "s1", Output: "wrong", InputTokens: 7, OutputTokens: 3, Cost: &cost},
	}}
	run(t, plan, sink, Options{})
	if n := subject.calls.Load(); n != 0 {
		t.Errorf("the model was called %d times, want 0: its answers were kept", n)
	}
	if n := judge.calls.Load(); n != 2 {
		t.Errorf("the judge was called %d times, want 2", n)
	}
	if n := exact.calls.Load(); n != 1 {
		t.Errorf("exact_match scored %d answers, want 1 (sample 0 carries its score)", n)
	}
	judged := 110e-6 // 110 tokens at $1 a million
	want := []*results.Record{
		// The request that answered it stays its key, for a later run's cache.
		{ID: "s0", Model: "subject", Dataset: "d", Output: "q0", CacheKey: "k0", Scores: map[string]float64{"exact_match": 1, "graded": 1}, Rescored: true,
			InputTokens: 7, OutputTokens: 3, Cost: &cost, JudgeInputTokens: 150, JudgeOutputTokens: 10, JudgeCost: ptr(judgeCost + judged),
			Expected: json.RawMessage(`"q0"`), Input: []provider.Message{{Role: provider.RoleUser, Content: "q0"}},
			// The judge's reply is its reason.
			Reasons: map[string]string{"graded": "VERDICT: CORRECT"}},
		{ID: "s1", Model: "subject", Dataset: "d", Output: "wrong", Scores: map[string]float64{"exact_match": 0, "graded": 1}, Rescored: true,
			InputTokens: 7, OutputTokens: 3, Cost: &cost, JudgeInputTokens: 100, JudgeOutputTokens: 10, JudgeCost: ptr(judged),
			Expected: json.RawMessage(`"q1"`), Input: []provider.Message{{Role: provider.RoleUser, Content: "q1"}},
			Reasons: map[string]string{"graded": "VERDICT: CORRECT"}},
	}
	for i, w := range want {
		if diff := cmp.Diff(w, sink.get("subject", "d", i), cmpopts.EquateApprox(0, 1e-12), cmpIgnoreLatency); diff != "" {
			t.Errorf("sample %d (-want +got):\n%s", i, diff)
		}
	}
}

func ptr[T any](v T) *T { return &v }
