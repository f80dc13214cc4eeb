package runner

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
)

// judgePlan is a model answering n samples at once, judged by a judge model
// in batch mode (the fake batcher f) and scored by exact match too.
func judgePlan(t *testing.T, f *fakeBatcher, n int, cfg BatchConfig) *Plan {
	t.Helper()
	plan := testPlan(t).Model("m", &fakeProvider{fn: echo}, 4).Price(t, "1", "1").
		Model("judge", f, 2).JudgeOnly().Price(t, "2", "8").Dataset("d", n).
		Scorer(score.Config{Type: score.TypeExactMatch}, "").
		Scorer(score.Config{Type: score.TypeJudge, Name: "graded"}, "judge").Obj()
	plan.Models[1].Batch = testBatchConfig(cfg)
	return plan
}

// verdicts answers a judge prompt: correct for even samples' answers.
func verdicts(prompt string) string {
	for i := 0; i < 1000; i += 2 {
		if strings.Contains(prompt, fmt.Sprintf("q%d\n", i)) {
			return "VERDICT: CORRECT"
		}
	}
	return "VERDICT: INCORRECT"
}

// TestJudgeInBatches: every answer is judged once, through the judge's
// batches at the batch price, after the model answered; the records keep
// both scores and what judging cost, and await nothing.
func TestJudgeInBatches(t *testing.T) {
	f := newFakeBatcher(2)
	f.answer = verdicts
	sink := newBatchSink()
	plan := judgePlan(t, f, 30, BatchConfig{MaxRequests: 8})
	if err := runBatch(t, plan, sink, Options{}); err != nil {
		t.Fatal(err)
	}
	if len(f.order) != 4 || f.submitted != 30 || f.duplicates != 0 || f.calls != 0 {
		t.Errorf("%d judge batches, %d requests submitted (%d twice), %d judge calls", len(f.order), f.submitted, f.duplicates, f.calls)
	}
	for i := range 30 {
		r := sink.get("m", "d", i)
		want := float64((i + 1) % 2)
		if r == nil || r.Error != "" || len(r.JudgePending) != 0 || r.Scores["graded"] != want || r.Scores["exact_match"] != 1 {
			t.Fatalf("sample %d: %+v, want graded %v", i, r, want)
		}
		// The judge's batch price: half of 10 × $2 + 2 × $8 per million.
		if got := dollars(r.JudgeCost); got != spend.Amount(18_000_000).String() || r.JudgeInputTokens != 10 || r.Batch != "" {
			t.Fatalf("sample %d: judge cost %s, %d judge input tokens, batch %q", i, got, r.JudgeInputTokens, r.Batch)
		}
	}
	recs, _ := sink.Batches("judge/graded/m")
	if len(recs) != 4 {
		t.Errorf("judge batch records %+v", recs)
	}
}

// TestJudgeInBatchesTakenUpAfterAStop: a run stopped while the judge's
// batches are in flight keeps the answers (awaiting the verdicts); the next
// run calls no model again and submits no judge request again.
func TestJudgeInBatchesTakenUpAfterAStop(t *testing.T) {
	f := newFakeBatcher(-1) // batches never end while the first run lasts
	f.answer = verdicts
	sink := newBatchSink()
	plan := judgePlan(t, f, 12, BatchConfig{MaxRequests: 5, MaxInFlight: 3})
	subject := plan.Models[0].Provider.(*fakeProvider)
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background(), plan.Tasks(), sink) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		n := f.submitted
		f.mu.Unlock()
		if n == 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d judge requests submitted", n)
		}
		time.Sleep(time.Millisecond)
	}
	e.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if r := sink.get("m", "d", i); r == nil || len(r.JudgePending) != 1 || r.Output == "" {
			t.Fatalf("sample %d after the stop: %+v, want its answer awaiting the judge", i, r)
		}
	}
	calls := subject.calls.Load()

	f.mu.Lock()
	f.polls = 1
	f.mu.Unlock()
	if err := runBatch(t, plan, sink, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := subject.calls.Load(); got != calls {
		t.Errorf("the model was called %d more times", got-calls)
	}
	if f.submitted != 12 || f.duplicates != 0 {
		t.Errorf("%d judge requests submitted (%d twice), want 12 once", f.submitted, f.duplicates)
	}
	for i := range 12 {
		if r := sink.get("m", "d", i); r == nil || len(r.JudgePending) != 0 || r.Scores["graded"] != float64((i+1)%2) {
			t.Fatalf("sample %d: %+v", i, r)
		}
	}
}

// TestJudgeInBatchesFailures: a judge request the batch failed is judged
// again as configured; with none, the sample is a scoring error that keeps
// its answer.
func TestJudgeInBatchesFailures(t *testing.T) {
	tests := []struct {
		retry               string
		wantCalls, wantErrs int
	}{
		{retry: "batch"},
		{retry: "sync", wantCalls: 5},
		{retry: "none", wantErrs: 5},
	}
	for _, tc := range tests {
		t.Run(tc.retry, func(t *testing.T) {
			f := newFakeBatcher(1)
			f.answer = verdicts
			f.fail = func(id string) bool {
				_, idx, attempt, _, _ := parseBatchCustomID(id)
				return idx%2 == 1 && attempt == 0
			}
			sink := newBatchSink()
			if err := runBatch(t, judgePlan(t, f, 10, BatchConfig{Retry: tc.retry}), sink, Options{}); err != nil {
				t.Fatal(err)
			}
			errs := 0
			for i := range 10 {
				r := sink.get("m", "d", i)
				switch {
				case r.Error != "":
					errs++
					if r.ErrorKind != "scoring" || r.Output == "" || !strings.Contains(r.Error, "scorer graded: judge judge: batch") {
						t.Errorf("sample %d: %+v", i, r)
					}
				case r.Scores["graded"] != float64((i+1)%2) || len(r.JudgePending) != 0:
					t.Errorf("sample %d: %+v", i, r)
				}
			}
			if f.calls != tc.wantCalls || errs != tc.wantErrs {
				t.Errorf("%d judge calls, %d errors; want %d and %d", f.calls, errs, tc.wantCalls, tc.wantErrs)
			}
		})
	}
}
