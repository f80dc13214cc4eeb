package runner

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/retry"
)

// stageEngine is an engine of one model "m" calling p, for tests of one stage
// of a call; edit changes its plan first.
func stageEngine(t *testing.T, p provider.Provider, opts Options, edit func(*Plan)) (*Engine, *modelRun) {
	t.Helper()
	plan := testPlan(t).Model("m", p, 2).Dataset("d", 1).
		Retry(retry.Policy{MaxAttempts: 3, Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond, MaxThrottleWait: 60 * time.Second}).Obj()
	if edit != nil {
		edit(plan)
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewFakeClock()
	}
	if opts.Rand == nil {
		opts.Rand = func() float64 { return 0.5 }
	}
	e, err := New(plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e, e.models["m"]
}
