package cluster

import (
	"slices"

	"github.com/proctor-dev/proctor/runner/spend"
)

// SpendBudget divides an Evaluation's spec.budget among its shards. Money
// spent cannot be taken back, so each shard holds an allowance: a bound on
// all it may ever spend (what its runner's ledger reserves calls against),
// which the controller raises while the shard runs, from what the other
// allowances leave of the limit, and lowers to what the shard spent once it
// has finished. The allowances never add up to more than the limit: calls
// are made only within them, so the run never spends more than its budget
// (but for calls whose estimate fell short, and the calls in flight of pods
// that were killed, whose records were lost).
type SpendBudget struct {
	// Limit is spec.budget: 0 in a dimension bounds nothing there.
	Limit spend.Limit `json:"limit"`
	// Allowances are the shards', by shard key.
	Allowances map[string]spend.Totals `json:"allowances,omitempty"`
}

// SpendShard is what the controller knows of a shard's spending.
type SpendShard struct {
	Key string
	// Running: its runner is running (and may spend); Finished: it will
	// never spend again (its index is done for good).
	Running, Finished bool
	// Spent is what it spent; Reserved, what its calls in flight may still
	// spend; Needed, when Blocked, the worst case of the call it waits to
	// make.
	Spent, Reserved, Needed spend.Totals
	Blocked                 bool
}

// spendDims are a budget's dimensions: money, then tokens.
type spendDims = [2]int64

func spendDimsOf(t spend.Totals) spendDims { return spendDims{int64(t.Cost), t.Tokens} }
func totalsOf(d spendDims) spend.Totals    { return spend.Totals{Cost: spend.Amount(d[0]), Tokens: d[1]} }

// DivideSpend computes the next allowances from prev (nil: none yet) for a
// limit and the shards' reports. A finished shard's allowance becomes what it
// spent. Each running shard whose headroom (allowance less spent and
// reserved) is below half a chunk, or below the call it waits to make, is
// raised to a chunk (at least that call) from what is left: a chunk is the
// unspent part of the limit over twice the running shards, so that early
// shards do not take it all. It reports whether the allowances changed, and
// whether the budget is exhausted: every running shard waits, with no call of
// its own in flight, for a call that does not fit in what is left.
func DivideSpend(prev *SpendBudget, limit spend.Limit, shards []SpendShard) (next *SpendBudget, changed, exhausted bool) {
	next = &SpendBudget{Limit: limit, Allowances: map[string]spend.Totals{}}
	if prev != nil {
		for k, a := range prev.Allowances {
			next.Allowances[k] = a
		}
	}
	changed = prev == nil || prev.Limit != limit
	lim := spendDims{int64(limit.Cost), limit.Tokens}
	shards = slices.Clone(shards)
	slices.SortFunc(shards, func(a, b SpendShard) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	var spentAll spendDims
	running := 0
	for _, s := range shards {
		sp := spendDimsOf(s.Spent)
		for d := range sp {
			spentAll[d] += sp[d]
		}
		if s.Finished {
			if a := next.Allowances[s.Key]; a != s.Spent {
				next.Allowances[s.Key] = s.Spent
				changed = true
			}
		} else if s.Running {
			running++
		}
	}
	var used spendDims
	for _, a := range next.Allowances {
		ad := spendDimsOf(a)
		for d := range ad {
			used[d] += ad[d]
		}
	}
	blocked := 0
	for _, s := range shards {
		if !s.Running || s.Finished {
			continue
		}
		a := spendDimsOf(next.Allowances[s.Key])
		sp, res, need := spendDimsOf(s.Spent), spendDimsOf(s.Reserved), spendDimsOf(s.Needed)
		raised, stuck := false, false
		for d := range lim {
			if lim[d] == 0 {
				continue
			}
			// An allowance below what was spent counts what was spent.
			if a[d] < sp[d] {
				used[d] += sp[d] - a[d]
				a[d] = sp[d]
				raised = true
			}
			head := a[d] - sp[d] - res[d]
			chunk := max(1, (lim[d]-spentAll[d])/int64(2*running))
			want := chunk
			if s.Blocked {
				want = max(want, need[d])
			}
			if head < chunk/2 || (s.Blocked && head < need[d]) {
				if inc := min(want-head, lim[d]-used[d]); inc > 0 {
					a[d] += inc
					used[d] += inc
					raised = true
				}
			}
			// Stuck: nothing of its own in flight to settle, and still no room.
			if s.Blocked && s.Reserved == (spend.Totals{}) && a[d]-sp[d]-res[d] < need[d] {
				stuck = true
			}
		}
		if raised {
			next.Allowances[s.Key] = totalsOf(a)
			changed = true
		}
		if stuck {
			blocked++
		}
	}
	return next, changed, running > 0 && blocked == running
}
