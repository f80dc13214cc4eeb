// Package ratelimit keeps a model's calls within its per-minute budgets.
//
// Each budget (requests, input tokens, output tokens per minute) is enforced by two
// mechanisms working together:
//
//   - pacing, a token bucket from golang.org/x/time/rate holding about one second of
//     budget, spreads calls evenly so that servers enforcing their limit over shorter
//     periods (many quantize a per-minute limit to per-second) see no bursts;
//   - a sliding log of what was sent makes the limit exact: no window of one period
//     (a minute plus a little slack for the time a request takes to reach the server)
//     ever holds more than the limit. A token bucket alone allows its burst on top of
//     the rate in any window, which a server counting a sliding minute would refuse.
//
// Reservations are first come, first served and may be taken for the future: a caller
// reserves, then sleeps until its turn. Token amounts are estimates when reserved and
// corrected with Settle once the server reports its usage.
package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"
)

const (
	// Period is what limits are stated per.
	Period = time.Minute
	// DefaultSlack widens the window the limiter counts over, so that requests whose
	// arrival at the server is delayed unevenly cannot crowd into one server window.
	DefaultSlack = 500 * time.Millisecond
)

// Limits are per-minute budgets; 0 means unlimited.
type Limits struct {
	RequestsPerMinute     int64 `json:"requestsPerMinute,omitempty"`
	InputTokensPerMinute  int64 `json:"inputTokensPerMinute,omitempty"`
	OutputTokensPerMinute int64 `json:"outputTokensPerMinute,omitempty"`
}

// IsZero reports whether no budget is limited.
func (l Limits) IsZero() bool { return l == Limits{} }

func (l Limits) values() [numDims]int64 {
	return [numDims]int64{l.RequestsPerMinute, l.InputTokensPerMinute, l.OutputTokensPerMinute}
}

// Cost is what one call spends of each budget.
type Cost struct {
	Requests     int64
	InputTokens  int64
	OutputTokens int64
}

func (c Cost) values() [numDims]int64 {
	return [numDims]int64{c.Requests, c.InputTokens, c.OutputTokens}
}

const numDims = 3

// Limiter enforces Limits. It is safe for concurrent use.
type Limiter struct {
	clock  clockwork.Clock
	window time.Duration

	mu   sync.Mutex
	dims [numDims]dim
	// last is the time of the latest reservation: reservations never go before it,
	// which keeps the logs sorted and service first come, first served.
	last time.Time
}

type dim struct {
	limit int64
	pace  *rate.Limiter // nil when unlimited
	// log[head:] holds what was reserved within the last window, oldest first;
	// sum is its total. Pruning advances head, and the slice is compacted only when
	// the dead prefix dominates, so a long log is not copied on every call.
	log  []*entry
	head int
	sum  int64
}

type entry struct {
	at     time.Time
	n      int64
	logged bool // still counted in its dim's sum
}

// New returns a limiter for limits, counting over Period plus slack.
func New(limits Limits, slack time.Duration, clock clockwork.Clock) *Limiter {
	l := &Limiter{clock: clock, window: Period + slack}
	l.SetLimits(limits)
	return l
}

// SetLimits changes the budgets, for example when a cluster re-divides a model's
// budget among its shards. What was sent within the current window still counts
// against the new limits.
func (l *Limiter) SetLimits(limits Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Reservations may reach into the future; a pacing bucket changed at an
	// earlier time would count that stretch twice and grant a burst.
	at := l.clock.Now()
	if l.last.After(at) {
		at = l.last
	}
	for i, v := range limits.values() {
		d := &l.dims[i]
		if d.limit == max(v, 0) && (v <= 0 || d.pace != nil) {
			continue // unchanged: leave the pacing state alone
		}
		d.limit = v
		if v <= 0 {
			for _, e := range d.log[d.head:] {
				e.logged = false
			}
			d.limit, d.pace, d.log, d.head, d.sum = 0, nil, nil, 0, 0
			continue
		}
		r := rate.Limit(float64(v) / l.window.Seconds())
		burst := int(max(1, v/60))
		if i == 0 {
			// Requests: pace one at a time; even a per-second quantized limit is met.
			burst = 1
		}
		if d.pace == nil {
			d.pace = rate.NewLimiter(r, burst)
		} else {
			d.pace.SetLimitAt(at, r)
			d.pace.SetBurstAt(at, burst)
		}
	}
}

// Limits returns the current budgets.
func (l *Limiter) Limits() Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Limits{l.dims[0].limit, l.dims[1].limit, l.dims[2].limit}
}

// Reservation is a place in line for one call.
type Reservation struct {
	l       *Limiter
	at      time.Time
	entries [numDims]*entry
	paces   [numDims]*rate.Reservation
}

// Reserve takes the earliest time at which cost fits every budget and returns it as
// a reservation; the caller waits for it with Wait. A cost larger than a whole
// budget waits for an empty window, since it can never fit otherwise.
func (l *Limiter) Reserve(cost Cost) *Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	t := now
	if l.last.After(t) {
		t = l.last
	}
	costs := cost.values()
	// The earliest time that suits every budget: moving later never hurts a budget
	// already satisfied, so iterate until no budget moves it.
	for changed := true; changed; {
		changed = false
		for i := range l.dims {
			if e := l.dims[i].earliest(now, t, costs[i], l.window); e.After(t) {
				t, changed = e, true
			}
		}
	}
	r := &Reservation{l: l, at: t}
	for i := range l.dims {
		d := &l.dims[i]
		if d.limit == 0 {
			continue
		}
		e := &entry{at: t, n: costs[i], logged: true}
		d.log = append(d.log, e)
		d.sum += e.n
		r.entries[i] = e
		if n := d.paceCost(costs[i]); n > 0 {
			pr := d.pace.ReserveN(t, n)
			r.paces[i] = pr
		}
	}
	l.last = t
	return r
}

// paceCost is the pacing bucket's share of n: capped at the burst, since a bucket
// cannot hold more, and the exact bound is the log's job anyway.
func (d *dim) paceCost(n int64) int {
	if d.pace == nil || n <= 0 {
		return 0
	}
	return int(min(n, int64(d.pace.Burst())))
}

// earliest is the first time at or after t when n more fits this budget.
func (d *dim) earliest(now, t time.Time, n int64, window time.Duration) time.Time {
	if d.limit == 0 || n <= 0 {
		return t
	}
	d.prune(now, window)
	if pn := d.paceCost(n); pn > 0 {
		if tokens := d.pace.TokensAt(t); tokens < float64(pn) {
			wait := (float64(pn) - tokens) / float64(d.pace.Limit())
			t = t.Add(time.Duration(math.Ceil(wait * float64(time.Second))))
		}
	}
	need := min(n, d.limit)
	// Entries at or before t-window no longer count at t.
	live := d.log[d.head:]
	inWindow := d.sum
	for _, e := range live {
		if e.at.After(t.Add(-window)) {
			break
		}
		inWindow -= e.n
	}
	if inWindow+need <= d.limit {
		return t
	}
	// Drop the oldest entries still counted until n fits; t moves to when the last
	// one dropped leaves the window.
	for _, e := range live {
		if !e.at.After(t.Add(-window)) {
			continue
		}
		inWindow -= e.n
		t = e.at.Add(window)
		if inWindow+need <= d.limit {
			break
		}
	}
	return t
}

// prune forgets entries that left the window before now.
func (d *dim) prune(now time.Time, window time.Duration) {
	cut := now.Add(-window)
	for d.head < len(d.log) && !d.log[d.head].at.After(cut) {
		e := d.log[d.head]
		d.sum -= e.n
		e.logged = false
		d.log[d.head] = nil
		d.head++
	}
	if d.head > 1024 && d.head > len(d.log)/2 {
		d.log = append(d.log[:0], d.log[d.head:]...)
		d.head = 0
	}
}

// At is when the call may start.
func (r *Reservation) At() time.Time { return r.at }

// Wait sleeps until the reservation's time. If ctx ends first, the reservation is
// cancelled and ctx's error returned.
func (r *Reservation) Wait(ctx context.Context) error {
	d := r.at.Sub(r.l.clock.Now())
	if d <= 0 {
		return ctx.Err()
	}
	t := r.l.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	}
}

// Cancel gives back a reservation whose call was not made.
func (r *Reservation) Cancel() {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	now := r.l.clock.Now()
	for i, e := range r.entries {
		if e == nil {
			continue
		}
		r.l.dims[i].adjust(e, 0)
		if p := r.paces[i]; p != nil {
			p.CancelAt(now)
		}
	}
}

// Settle replaces the estimated token amounts with what the server reported; the
// request count is kept. Amounts that already left the window change nothing.
func (r *Reservation) Settle(actual Cost) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	for i, v := range actual.values() {
		if i == 0 || r.entries[i] == nil {
			continue
		}
		r.l.dims[i].adjust(r.entries[i], v)
	}
}

// adjust sets an entry's amount, keeping the sum right if it is still logged.
func (d *dim) adjust(e *entry, n int64) {
	if e.logged {
		d.sum += n - e.n
	}
	e.n = n
}
