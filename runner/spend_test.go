package runner

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
)

// answers replies to every request with usage u.
func answers(u provider.Usage) *fakeProvider {
	return &fakeProvider{fn: func(_ context.Context, req *provider.Request, _ int64) (*provider.Response, error) {
		return &provider.Response{Text: req.Prompt, Usage: u}, nil
	}}
}

func dollars(p *float64) string {
	if p == nil {
		return "unknown"
	}
	return spend.FromDollars(*p).String()
}

func TestRecordsCarryTheirCost(t *testing.T) {
	verdict := &fakeProvider{fn: func(context.Context, *provider.Request, int64) (*provider.Response, error) {
		return &provider.Response{Text: "VERDICT: CORRECT", Usage: provider.Usage{InputTokens: 100, OutputTokens: 10}}, nil
	}}
	tests := []struct {
		name          string
		plan          *Plan
		wantCost      string
		wantJudgeCost string
	}{
		{
			name:     "priced",
			plan:     testPlan(t).Model("m", answers(provider.Usage{InputTokens: 1000, OutputTokens: 200}), 1).Price(t, "2.50", "10").Dataset("d", 1).Obj(),
			wantCost: "$0.004500", wantJudgeCost: "unknown",
		},
		{
			name: "cached input at its own price",
			plan: func() *Plan {
				p := testPlan(t).Model("m", answers(provider.Usage{InputTokens: 1000, CachedInputTokens: 800, OutputTokens: 200}), 1).Dataset("d", 1).Obj()
				p.Models[0].Price, _ = spend.NewPrice(spend.PerMillion{Input: "2.50", Output: "10", CachedInput: "0.25"})
				return p
			}(),
			// 200 × 2.50 + 800 × 0.25 + 200 × 10, per million.
			wantCost: "$0.002700", wantJudgeCost: "unknown",
		},
		{
			name:     "unpriced is unknown, never 0",
			plan:     testPlan(t).Model("m", answers(provider.Usage{InputTokens: 1000, OutputTokens: 200}), 1).Dataset("d", 1).Obj(),
			wantCost: "unknown", wantJudgeCost: "unknown",
		},
		{
			name: "the judge's cost apart",
			plan: testPlan(t).Model("m", answers(provider.Usage{InputTokens: 1000, OutputTokens: 200}), 1).Price(t, "1", "1").
				Model("j", verdict, 1).JudgeOnly().Price(t, "3", "15").Dataset("d", 1).
				Scorer(score.Config{Type: score.TypeJudge, Name: "graded"}, "j").Obj(),
			wantCost: "$0.001200", wantJudgeCost: "$0.000450",
		},
		{
			name: "an unpriced judge",
			plan: testPlan(t).Model("m", answers(provider.Usage{InputTokens: 1000, OutputTokens: 200}), 1).Price(t, "1", "1").
				Model("j", verdict, 1).JudgeOnly().Dataset("d", 1).
				Scorer(score.Config{Type: score.TypeJudge, Name: "graded"}, "j").Obj(),
			wantCost: "$0.001200", wantJudgeCost: "unknown",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := newMemSink()
			run(t, tt.plan, sink, Options{})
			rec := sink.get("m", "d", 0)
			if got := dollars(rec.Cost); got != tt.wantCost {
				t.Errorf("cost %s, want %s", got, tt.wantCost)
			}
			if got := dollars(rec.JudgeCost); got != tt.wantJudgeCost {
				t.Errorf("judge cost %s, want %s", got, tt.wantJudgeCost)
			}
		})
	}
}

func TestBudgetStopsNewCalls(t *testing.T) {
	// Each call costs $0.001 exactly; its worst case (maxTokens 100 of
	// output) is about $0.0011. A $0.0100 budget fits 9 calls while one more
	// may be in flight.
	p := answers(provider.Usage{InputTokens: 500, OutputTokens: 50})
	plan := testPlan(t).Model("m", p, 2).Price(t, "1", "10").MaxTokens(100).Dataset("d", 40).Obj()
	ledger := spend.NewLedger(spend.Limit{Cost: spend.Dollar / 100})
	e, err := New(plan, Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	err = e.Run(context.Background(), plan.Tasks(), sink)
	var exceeded *spend.ExceededError
	if !errors.As(err, &exceeded) {
		t.Fatalf("Run: %v, want the budget exhausted", err)
	}
	st := ledger.State()
	if st.Spent.Cost > st.Limit.Cost || st.Reserved != (spend.Totals{}) {
		t.Errorf("spent %s (reserved %+v) of %s", st.Spent.Cost, st.Reserved, st.Limit.Cost)
	}
	// What was spent is exactly what the records say.
	var total spend.Amount
	for i := range 40 {
		if r := sink.get("m", "d", i); r != nil {
			total += spend.FromDollars(*r.Cost)
		}
	}
	if total != st.Spent.Cost || p.calls.Load() != int64(sink.count()) || sink.count() < 8 || sink.count() > 9 {
		t.Errorf("%d calls, %d records costing %s; the ledger spent %s", p.calls.Load(), sink.count(), total, st.Spent.Cost)
	}
	if !strings.Contains(err.Error(), "spent $0.00") || !strings.Contains(err.Error(), "of $0.010000 (maxCost)") {
		t.Errorf("error %q", err)
	}

	// Raised, the run goes on where it stopped.
	ledger.SetLimit(spend.Limit{Cost: spend.Dollar})
	e, err = New(plan, Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background(), plan.Tasks(), sink); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	if sink.count() != 40 || p.calls.Load() != 40 {
		t.Errorf("after the raise: %d records, %d calls; want 40 of each", sink.count(), p.calls.Load())
	}
}

func TestBudgetCountsTokensAndChargesMissingUsage(t *testing.T) {
	// No usage in the answers: each is charged its worst case (the input
	// estimate and maxTokens), so a token budget still stops the run.
	p := answers(provider.Usage{})
	plan := testPlan(t).Model("m", p, 1).MaxTokens(50).Dataset("d", 100).Obj()
	ledger := spend.NewLedger(spend.Limit{Tokens: 500})
	e, err := New(plan, Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	if err := e.Run(context.Background(), plan.Tasks(), sink); !IsBudgetExceeded(err) {
		t.Fatalf("Run: %v", err)
	}
	st := ledger.State()
	if n := sink.count(); n < 8 || n > 9 || st.Spent.Tokens > 500 || st.Spent.Tokens < int64(n)*50 {
		t.Errorf("%d records, %d tokens spent of 500", n, st.Spent.Tokens)
	}
	if rec := sink.get("m", "d", 0); rec.Cost != nil {
		t.Errorf("an unpriced model's record has cost %v", *rec.Cost)
	}
}

func TestRefusedCallsCostNothing(t *testing.T) {
	p := &fakeProvider{fn: func(context.Context, *provider.Request, int64) (*provider.Response, error) {
		return nil, &provider.HTTPError{StatusCode: 400, Message: "bad request"}
	}}
	plan := testPlan(t).Model("m", p, 1).Price(t, "1", "1").Dataset("d", 3).Obj()
	ledger := spend.NewLedger(spend.Limit{Cost: spend.Dollar})
	sink := newMemSink()
	run(t, plan, sink, Options{Ledger: ledger})
	if st := ledger.State(); st.Spent != (spend.Totals{}) {
		t.Errorf("refused calls spent %+v", st.Spent)
	}
	if diff := cmp.Diff("$0.000000", dollars(sink.get("m", "d", 2).Cost)); diff != "" {
		t.Errorf("cost (-want +got):\n%s", diff)
	}
}

func TestSummaryCosts(t *testing.T) {
	c := func(d float64) *float64 { return &d }
	agg := results.NewAggregate("m", "d", 3, nil)
	agg.Add(&results.Record{Cost: c(0.1), JudgeCost: c(0.01), JudgeInputTokens: 5})
	agg.Add(&results.Record{Cost: c(0.2), JudgeCost: c(0.02), JudgeInputTokens: 5})
	s := agg.Summary()
	if dollars(s.Cost.Model) != "$0.300000" || dollars(s.Cost.Judge) != "$0.030000" || !s.Cost.Judged {
		t.Errorf("costs %+v", s.Cost)
	}
	agg.Add(&results.Record{JudgeInputTokens: 5})
	s = agg.Summary()
	if s.Cost.Model != nil || s.Cost.Judge != nil {
		t.Errorf("with an unpriced record: %+v, want both unknown", s.Cost)
	}
}
