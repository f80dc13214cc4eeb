package runner

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/spend"
)

func TestBudgetStage(t *testing.T) {
	worst := spend.Totals{Tokens: 1000}
	t.Run("without a budget, nothing is held", func(t *testing.T) {
		e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{}, nil)
		if hold, err := e.reserveBudget(context.Background(), m, worst); hold != nil || err != nil {
			t.Errorf("got %v, %v; want nil, nil", hold, err)
		}
	})
	t.Run("the worst case is held until settled", func(t *testing.T) {
		l := spend.NewLedger(spend.Limit{Tokens: 1500})
		e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{Ledger: l}, nil)
		hold, err := e.reserveBudget(context.Background(), m, worst)
		if err != nil || hold == nil {
			t.Fatalf("got %v, %v; want a hold", hold, err)
		}
		if st := l.State(); st.Reserved != worst {
			t.Errorf("reserved %+v, want %+v", st.Reserved, worst)
		}
		// A second call's worst case does not fit beside the first's: it waits
		// for the first to settle (here, until its context ends).
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := e.reserveBudget(ctx, m, worst); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a second worst case: %v, want it to wait", err)
		}
		hold.Settle(spend.Totals{Tokens: 300})
		if st := l.State(); st.Spent.Tokens != 300 || st.Reserved != (spend.Totals{}) {
			t.Errorf("after settling: spent %+v, reserved %+v; want 300 tokens spent, nothing held", st.Spent, st.Reserved)
		}
		// One that cannot fit even alone ends the run's calls.
		if _, err := e.reserveBudget(context.Background(), m, spend.Totals{Tokens: 1300}); !IsBudgetExceeded(err) {
			t.Errorf("a worst case past the budget: %v, want the budget exceeded", err)
		}
	})
	t.Run("an agent's own run is not a call", func(t *testing.T) {
		l := spend.NewLedger(spend.Limit{Tokens: 1})
		e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{Ledger: l}, nil)
		m.Agent = true
		if hold, err := e.reserveBudget(context.Background(), m, worst); hold != nil || err != nil {
			t.Errorf("got %v, %v; want nil, nil", hold, err)
		}
	})
	t.Run("a wait for room ends with the engine's stop", func(t *testing.T) {
		l := spend.NewWaitingLedger(spend.Limit{Tokens: 1500})
		e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{Ledger: l}, nil)
		if _, err := e.reserveBudget(context.Background(), m, worst); err != nil {
			t.Fatal(err)
		}
		stopped, stop := context.WithCancel(context.Background())
		stop()
		ctx := context.WithValue(context.Background(), waitsKey{}, stopped)
		if _, err := e.reserveBudget(ctx, m, worst); !errors.Is(err, errStopping) {
			t.Errorf("got %v, want errStopping", err)
		}
	})
}

// TestAttemptCharge checks what an attempt is charged: what it reported,
// else its worst case when it may have been served, nothing when it surely
// was not.
func TestAttemptCharge(t *testing.T) {
	price, err := spend.NewPrice(spend.PerMillion{Input: "1", Output: "2"})
	if err != nil {
		t.Fatal(err)
	}
	worst := spend.Totals{Tokens: 5000, Cost: price.Worst(1000, 4000, false)}
	answer := &provider.Response{Usage: provider.Usage{InputTokens: 100, OutputTokens: 50}}
	for _, tt := range []struct {
		name  string
		agent bool
		resp  *provider.Response
		err   error
		want  spend.Totals
	}{
		{name: "an answer, at its usage", resp: answer, want: spend.Totals{Tokens: 150, Cost: price.Of(answer.Usage, false)}},
		{name: "an answer without usage, at the worst", resp: &provider.Response{Text: "x"}, want: worst},
		{name: "a refusal costs nothing", err: &provider.HTTPError{StatusCode: 400}, want: spend.Totals{}},
		{name: "a connection refused costs nothing", err: fmt.Errorf("dial: %w", syscall.ECONNREFUSED), want: spend.Totals{}},
		{name: "a timeout may have been served", err: context.DeadlineExceeded, want: worst},
		{name: "an agent's run is not a call", agent: true, resp: answer, want: spend.Totals{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &modelRun{Model: &Model{Agent: tt.agent}}
			if got := m.charge(price, tt.resp, tt.err, worst); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
