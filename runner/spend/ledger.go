package spend

import (
	"context"
	"fmt"
	"sync"
)

// Totals is an amount of money and of tokens.
type Totals struct {
	Cost   Amount `json:"cost,omitempty"`
	Tokens int64  `json:"tokens,omitempty"`
}

// Add returns t plus u.
func (t Totals) Add(u Totals) Totals {
	return Totals{Cost: t.Cost + u.Cost, Tokens: t.Tokens + u.Tokens}
}

// Sub returns t minus u.
func (t Totals) Sub(u Totals) Totals {
	return Totals{Cost: t.Cost - u.Cost, Tokens: t.Tokens - u.Tokens}
}

// Limit is a budget: 0 leaves a dimension unbounded.
type Limit struct {
	Cost   Amount `json:"cost,omitempty"`
	Tokens int64  `json:"tokens,omitempty"`
}

// Nothing is the least limit, which nothing fits: a budget of $0, or 0
// tokens (a Limit's zero means no bound).
const Nothing = 1

// CostText is the cost limit as the user gave it ($0.000000 for Nothing,
// not the picodollar standing for it).
func (l Limit) CostText() string {
	if l.Cost == Nothing {
		return Amount(0).String()
	}
	return l.Cost.String()
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
		parts = append(parts, fmt.Sprintf("spent %s of %s (maxCost)", e.Spent.Cost, e.Limit.CostText()))
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
	// Of the next call, what the budget bounds.
	switch {
	case e.Limit.Cost > 0 && e.Limit.Tokens > 0:
		return s + fmt.Sprintf("; the next call could cost up to %s and %d tokens", e.Needed.Cost, e.Needed.Tokens)
	case e.Limit.Cost > 0:
		return s + fmt.Sprintf("; the next call could cost up to %s", e.Needed.Cost)
	}
	return s + fmt.Sprintf("; the next call could use up to %d tokens", e.Needed.Tokens)
}

// Ledger keeps spending within a limit: a call reserves its worst case before
// it is sent and settles at its actual cost after, so what calls in flight
// may still spend is always counted. A call whose worst case does not fit
// waits while calls in flight may settle for less than they reserved; when
// none is left in flight and it still does not fit, it is refused and the
// ledger is exhausted: every later call is refused too (no cheaper call
// slips in after a dearer one was stopped) until the limit changes.
//
// A waiting ledger (NewWaitingLedger) never refuses: a call that does not fit
// waits until it does, for a cluster shard whose limit is its allowance of
// the run's budget, which the controller raises while budget is left.
type Ledger struct {
	mu        sync.Mutex
	limit     Limit
	spent     Totals
	reserved  Totals
	exhausted *ExceededError
	wait      bool
	// waiting counts the calls waiting for room; needed is the largest of
	// their worst cases.
	waiting int
	needed  Totals
	// tried is what the last TryReserve of a waiting ledger could not fit.
	tried Totals
	// changed is closed (and replaced) when a hold settles or the limit
	// changes: waiting calls look again.
	changed chan struct{}
}

// NewLedger returns a ledger that refuses what cannot fit in limit.
func NewLedger(limit Limit) *Ledger {
	return &Ledger{limit: limit, changed: make(chan struct{})}
}

// NewWaitingLedger returns a ledger whose Reserve waits for room instead of
// refusing.
func NewWaitingLedger(limit Limit) *Ledger {
	l := NewLedger(limit)
	l.wait = true
	return l
}

// Waits reports whether the ledger waits for room instead of refusing.
func (l *Ledger) Waits() bool { return l.wait }

// Hold is one call's reservation.
type Hold struct {
	l     *Ledger
	worst Totals
	done  bool
}

// Reserve holds worst for a call. It fails with an *ExceededError when worst
// cannot fit (a waiting ledger waits instead), and with ctx's error when ctx
// ends while it waits.
func (l *Ledger) Reserve(ctx context.Context, worst Totals) (*Hold, error) {
	for {
		l.mu.Lock()
		if l.exhausted == nil && l.limit.fits(l.spent.Add(l.reserved).Add(worst)) {
			l.reserved = l.reserved.Add(worst)
			l.mu.Unlock()
			return &Hold{l: l, worst: worst}, nil
		}
		if l.exhausted != nil || (!l.wait && l.reserved == (Totals{})) {
			if l.exhausted == nil {
				l.exhausted = &ExceededError{Limit: l.limit, Spent: l.spent, Reserved: l.reserved, Needed: worst}
			}
			err := l.exhausted
			l.mu.Unlock()
			return nil, err
		}
		l.waiting++
		l.needed = Totals{Cost: max(l.needed.Cost, worst.Cost), Tokens: max(l.needed.Tokens, worst.Tokens)}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		l.mu.Lock()
		if l.waiting--; l.waiting == 0 {
			l.needed = Totals{}
		}
		l.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// TryReserve holds worst if it fits now, without waiting. When it does not,
// it fails as Reserve would (exhausting a ledger that is not waiting when
// nothing is held), and a waiting ledger counts the need as waiting until a
// TryReserve succeeds.
func (l *Ledger) TryReserve(worst Totals) (*Hold, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.exhausted == nil && l.limit.fits(l.spent.Add(l.reserved).Add(worst)) {
		l.reserved = l.reserved.Add(worst)
		l.tried = Totals{}
		return &Hold{l: l, worst: worst}, nil
	}
	err := l.exhausted
	if err == nil {
		err = &ExceededError{Limit: l.limit, Spent: l.spent, Reserved: l.reserved, Needed: worst}
		if !l.wait && l.reserved == (Totals{}) {
			l.exhausted = err
		}
	}
	if l.wait {
		l.tried = worst
	}
	return nil, err
}

// Force holds worst whether or not it fits: a call already made (a batch
// submitted by an earlier run, taken up again).
func (l *Ledger) Force(worst Totals) *Hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reserved = l.reserved.Add(worst)
	return &Hold{l: l, worst: worst}
}

// Settle replaces the hold with what the call actually cost.
func (h *Hold) Settle(actual Totals) {
	if h == nil || h.done {
		return
	}
	h.done = true
	l := h.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reserved.Cost -= h.worst.Cost
	l.reserved.Tokens -= h.worst.Tokens
	l.spent = l.spent.Add(actual)
	l.wake()
}

// wake lets the waiting calls look again; l.mu is held.
func (l *Ledger) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Add counts spending made before (a resumed run's finished samples).
func (l *Ledger) Add(t Totals) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spent = l.spent.Add(t)
}

// SetLimit changes the limit. A change lifts the exhaustion and lets the
// waiting calls look again.
func (l *Ledger) SetLimit(limit Limit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit == l.limit {
		return
	}
	l.limit = limit
	l.exhausted = nil
	l.tried = Totals{}
	l.wake()
}

// State is a ledger's figures.
type State struct {
	Limit           Limit
	Spent, Reserved Totals
	// Exhausted is the refusal that exhausted the ledger, if it is.
	Exhausted *ExceededError
	// Waiting: calls wait for room; Needed is the largest of their worst
	// cases.
	Waiting bool
	Needed  Totals
}

// State returns the ledger's figures.
func (l *Ledger) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := State{Limit: l.limit, Spent: l.spent, Reserved: l.reserved, Exhausted: l.exhausted, Waiting: l.waiting > 0, Needed: l.needed}
	if l.tried != (Totals{}) {
		st.Waiting = true
		st.Needed = Totals{Cost: max(st.Needed.Cost, l.tried.Cost), Tokens: max(st.Needed.Tokens, l.tried.Tokens)}
	}
	return st
}
