package spend

import (
	"context"
	"fmt"
	"sync"
)

// Totals is an amount of money and of tokens.
type Totals struct {
	Cost   Amount
	Tokens int64
}

// Add returns t plus u.
func (t Totals) Add(u Totals) Totals {
	return Totals{Cost: t.Cost + u.Cost, Tokens: t.Tokens + u.Tokens}
}

// Limit is a budget: 0 leaves a dimension unbounded.
type Limit struct {
	Cost   Amount
	Tokens int64
}

// IsZero says the limit bounds nothing.
func (l Limit) IsZero() bool { return l.Cost == 0 && l.Tokens == 0 }

func (l Limit) fits(t Totals) bool {
	return (l.Cost == 0 || t.Cost <= l.Cost) && (l.Tokens == 0 || t.Tokens <= l.Tokens)
}

// ExceededError says a call was not sent because its worst case did not fit
// in what was left of the budget.
type ExceededError struct {
	Limit Limit
	// Spent and Reserved are what was spent and held by calls in flight when
	// the call was refused; Needed is its worst case.
	Spent, Reserved, Needed Totals
}

func (e *ExceededError) Error() string {
	var parts []string
	if e.Limit.Cost > 0 {
		parts = append(parts, fmt.Sprintf("spent %s of %s (maxCost)", e.Spent.Cost, e.Limit.Cost))
	}
	if e.Limit.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("used %d of %d tokens (maxTokens)", e.Spent.Tokens, e.Limit.Tokens))
	}
	s := "the budget is exhausted: "
	for i, p := range parts {
		if i > 0 {
			s += ", "
		}
		s += p
	}
	return s + fmt.Sprintf("; the next call could cost up to %s and %d tokens", e.Needed.Cost, e.Needed.Tokens)
}

// Ledger keeps spending within a limit: a call reserves its worst case before
// it is sent and settles at its actual cost after, so what calls in flight
// may still spend is always counted. Once a reservation is refused the
// ledger is exhausted: every later one is refused too (no cheaper call
// slips in after a dearer one was stopped) until the limit is raised.
//
// A waiting ledger (NewWaitingLedger) makes Reserve wait instead of refusing,
// for a cluster shard whose limit is its grant of the run's budget, which the
// controller raises while budget is left.
type Ledger struct {
	mu        sync.Mutex
	limit     Limit
	spent     Totals
	reserved  Totals
	exhausted *ExceededError
	wait      bool
	// raised is closed (and replaced) when the limit changes.
	raised chan struct{}
}

// NewLedger returns a ledger that refuses what does not fit in limit.
func NewLedger(limit Limit) *Ledger {
	return &Ledger{limit: limit, raised: make(chan struct{})}
}

// NewWaitingLedger returns a ledger whose Reserve waits for the limit to be
// raised instead of refusing.
func NewWaitingLedger(limit Limit) *Ledger {
	l := NewLedger(limit)
	l.wait = true
	return l
}

// Hold is one call's reservation.
type Hold struct {
	l     *Ledger
	worst Totals
	done  bool
}

// Reserve holds worst for a call. It fails with an *ExceededError when worst
// does not fit (a waiting ledger waits, until ctx ends).
func (l *Ledger) Reserve(ctx context.Context, worst Totals) (*Hold, error) {
	for {
		l.mu.Lock()
		if l.exhausted == nil && l.limit.fits(l.spent.Add(l.reserved).Add(worst)) {
			l.reserved = l.reserved.Add(worst)
			l.mu.Unlock()
			return &Hold{l: l, worst: worst}, nil
		}
		if l.exhausted == nil {
			l.exhausted = &ExceededError{Limit: l.limit, Spent: l.spent, Reserved: l.reserved, Needed: worst}
		}
		err, raised := l.exhausted, l.raised
		l.mu.Unlock()
		if !l.wait {
			return nil, err
		}
		select {
		case <-raised:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Settle replaces the hold with what the call actually cost.
func (h *Hold) Settle(actual Totals) {
	if h == nil || h.done {
		return
	}
	h.done = true
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.reserved.Cost -= h.worst.Cost
	h.l.reserved.Tokens -= h.worst.Tokens
	h.l.spent = h.l.spent.Add(actual)
}

// Add counts spending made before (a resumed run's finished samples).
func (l *Ledger) Add(t Totals) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spent = l.spent.Add(t)
}

// SetLimit changes the limit. A higher one lifts the exhaustion and wakes
// the calls waiting.
func (l *Ledger) SetLimit(limit Limit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit == l.limit {
		return
	}
	l.limit = limit
	l.exhausted = nil
	close(l.raised)
	l.raised = make(chan struct{})
}

// State is a ledger's figures.
type State struct {
	Limit           Limit
	Spent, Reserved Totals
	// Exhausted is the refusal that exhausted the ledger, if it is.
	Exhausted *ExceededError
}

// State returns the ledger's figures.
func (l *Ledger) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return State{Limit: l.limit, Spent: l.spent, Reserved: l.reserved, Exhausted: l.exhausted}
}
