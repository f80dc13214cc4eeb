// Package ratelimit keeps a model's calls within its per-minute budgets.
//
// Each budget (requests, input tokens, output tokens per minute) is enforced by two
// mechanisms working together:
//
//   - pacing, a token bucket refilled continuously at the limit's rate that holds
//     a second of it (Burst; one request at a time for requests), as providers
//     enforce their limits: Anthropic documents a token bucket, and that a 60 RPM
//     limit may be enforced as 1 request per second. A call larger than the bucket
//     goes when it is full and leaves it in debt (a server's bucket cannot hold
//     more, so that is the only moment it can accept the call). It is the generic
//     cell rate algorithm (a theoretical time at which the bucket is full again)
//     rather than golang.org/x/time/rate, whose Limiter refuses any call larger
//     than its burst and gives back a cancelled reservation only approximately:
//     here a call's estimate settled lower, or a call cancelled, re-times exactly
//     what was reserved after it;
//   - a sliding log of what was sent makes the limit exact: no window of one period
//     (a minute plus a little slack for the time a request takes to reach the server)
//     ever holds more than the limit. A token bucket alone allows its burst on top of
//     the rate in any window, which a server counting a sliding minute would refuse.
//
// Reservations are first come, first served and may be taken for the future: a caller
// reserves, then sleeps until its turn. Token amounts are estimates when reserved and
// corrected with Settle once the server reports its usage.
//
// Limits may change while calls wait (a cluster re-dividing a model's budget among
// its shards, a user editing it): SetLimits re-times the calls still waiting under
// the new limits, and counts what was sent before the change at the limit then in
// force, so a change applies at once, with no pause and no queue left at the old pace.
package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

const (
	// Period is what limits are stated per.
	Period = time.Minute
	// DefaultSlack widens the window the limiter counts over, so that requests whose
	// arrival at the server is delayed unevenly cannot crowd into one server window.
	DefaultSlack = 500 * time.Millisecond
	// DefaultBurst is how much of a token limit the pacing bucket holds, as the
	// time the limit takes to refill it: a second, limit/60.
	DefaultBurst = time.Second
)

// Burst is how much of each limit the pacing bucket holds, as the time the
// limit takes to refill it (a bucket of capacity limit × burst / minute).
type Burst struct {
	// Requests: 0 holds one request, so that calls go one at a time, evenly.
	Requests time.Duration
	// Tokens, of input and output tokens: 0 is DefaultBurst.
	Tokens time.Duration
}

// Limits are per-minute budgets, and a bound on the calls in flight at once
// (which the Limiter leaves to InFlight); 0 means unlimited.
type Limits struct {
	RequestsPerMinute     int64 `json:"requestsPerMinute,omitempty"`
	InputTokensPerMinute  int64 `json:"inputTokensPerMinute,omitempty"`
	OutputTokensPerMinute int64 `json:"outputTokensPerMinute,omitempty"`
	MaxInFlight           int64 `json:"maxInFlight,omitempty"`
}

// IsZero reports whether no budget is limited.
func (l Limits) IsZero() bool { return l == Limits{} }

// Lesser is the lesser of l and o in each dimension, where 0 is no limit: the
// limits of a caller bound by both.
func (l Limits) Lesser(o Limits) Limits {
	pick := func(x, y int64) int64 {
		switch {
		case x == 0:
			return y
		case y == 0:
			return x
		}
		return min(x, y)
	}
	return Limits{
		RequestsPerMinute:     pick(l.RequestsPerMinute, o.RequestsPerMinute),
		InputTokensPerMinute:  pick(l.InputTokensPerMinute, o.InputTokensPerMinute),
		OutputTokensPerMinute: pick(l.OutputTokensPerMinute, o.OutputTokensPerMinute),
		MaxInFlight:           pick(l.MaxInFlight, o.MaxInFlight),
	}
}

func (l Limits) values() [numDims]int64 {
	return [numDims]int64{l.RequestsPerMinute, l.InputTokensPerMinute, l.OutputTokensPerMinute}
}

// Cost is what one call spends of each budget.
type Cost struct {
	Requests     int64 `json:"requests,omitempty"`
	InputTokens  int64 `json:"inputTokens,omitempty"`
	OutputTokens int64 `json:"outputTokens,omitempty"`
}

func (c Cost) values() [numDims]int64 {
	return [numDims]int64{c.Requests, c.InputTokens, c.OutputTokens}
}

const numDims = 3

// Limiter enforces Limits. It is safe for concurrent use.
type Limiter struct {
	clock  clockwork.Clock
	window time.Duration
	// exact turns off the wider pacing of small requests limits: the limits
	// are shares of a key that something else paces against the provider.
	exact bool

	mu    sync.Mutex
	dims  [numDims]dim
	burst Burst
	// last is the time of the latest reservation: reservations never go before it,
	// which keeps the logs sorted and service first come, first served.
	last time.Time
	// waiting holds the reservations that were due in the future when taken, in
	// order; SetLimits re-times those still waiting.
	waiting []*Reservation
}

type dim struct {
	limit int64
	// log[head:] holds what was reserved within the last window, oldest first;
	// sum is its total. Pruning advances head, and the slice is compacted only when
	// the dead prefix dominates, so a long log is not copied on every call.
	// Amounts are in units of the current limit: when the limit changes, what was
	// sent before is rescaled, so that it counts as the same share of the budget.
	log  []*entry
	head int
	sum  float64
	// base is the pacing bucket's full-again time after the entries pruned
	// from the log (each entry holds the same after itself).
	base time.Time
	// pad widens the pacing of a small requests limit (0 counts as 1): see
	// smallRequests.
	pad float64
}

// A provider enforcing a requests limit of at most smallRequests a minute as
// a bucket of one request refilled continuously (Anthropic: "a 60 RPM limit
// may be enforced as 1 request per second") refuses a call that arrives a
// moment early, and calls do not reach it as evenly as they leave (the
// network, scheduling, the pacer's grants). Calls under such a limit are
// spaced smallRequestsPad wider: at 30 rpm a call may arrive 100 ms later
// than the one after it expects, at 0.95 of the limit. Larger limits hold
// more than one request a second, which absorbs the same unevenness.
const (
	smallRequests    = 60
	smallRequestsPad = 1.05
)

type entry struct {
	at     time.Time
	n      float64
	scale  float64 // current limit / limit when reserved: n is the amount × scale
	logged bool    // still counted in its dim's sum
	// full is when the pacing bucket is full again after this entry and every
	// earlier one: max(the previous entry's full, at) + n at the limit's rate.
	full time.Time
	// paced: reserved under the limit in force, so full follows its amount.
	// A limit change re-times the bucket (dim.base) and leaves earlier
	// entries out of it.
	paced bool
}

// epsilon absorbs the rounding of rescaled amounts.
const epsilon = 1e-6

// New returns a limiter for limits, counting over Period plus slack.
func New(limits Limits, slack time.Duration, clock clockwork.Clock) *Limiter {
	l := &Limiter{clock: clock, window: Period + slack}
	l.SetLimits(limits)
	return l
}

// SetBurst sets how much of each limit the pacing bucket holds. It applies
// to calls reserved from then on.
func (l *Limiter) SetBurst(b Burst) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.burst = b
	l.setPad()
}

// SetExact says the limits are shares of a key another limiter paces
// against the provider (the pacer): a small one is not spaced wider.
func (l *Limiter) SetExact(exact bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exact = exact
	l.setPad()
}

// setPad widens the pacing of a small requests limit whose bucket holds one
// request (see smallRequests); a bucket holding two or more absorbs uneven
// arrivals itself.
func (l *Limiter) setPad() {
	d := &l.dims[0]
	d.pad = 1
	if !l.exact && d.limit > 0 && d.limit <= smallRequests && l.burst.Requests < 2*d.duration(1, l.window) {
		d.pad = smallRequestsPad
	}
}

// SetLimits changes the budgets, for example when a cluster re-divides a model's
// budget among its shards. It applies at once:
//
//   - what was sent within the current window counts as the same share of the new
//     limits as it was of the old ones: after a raise the extra budget is usable
//     at once, and after a cut calls go on at the new pace rather than stopping
//     until the window's calls fit the new limit (any window then holds at most
//     its share of each limit in force during it);
//   - calls still waiting for their turn are re-timed, in order, under the new
//     limits: none keeps a turn the old limits gave it.
//
// Setting the limits in force changes nothing.
func (l *Limiter) SetLimits(limits Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	vals := limits.values()
	changed := false
	for i, v := range vals {
		if l.dims[i].limit != max(v, 0) {
			changed = true
		}
	}
	if !changed {
		return // leave the pacing state and the queue alone
	}
	now := l.clock.Now()

	// Take back the turns of the calls still waiting; they are given new ones below.
	var waiting []*Reservation
	for _, r := range l.waiting {
		if r.at.After(now) && !r.cancelled {
			waiting = append(waiting, r)
		}
	}
	l.waiting = nil
	for i := range l.dims {
		l.dims[i].unreserveAfter(now)
	}
	if l.last.After(now) {
		l.last = now
	}

	for i, v := range vals {
		d := &l.dims[i]
		if v <= 0 {
			for _, e := range d.log[d.head:] {
				e.logged = false
			}
			d.limit, d.log, d.head, d.sum, d.base = 0, nil, 0, 0, time.Time{}
			continue
		}
		if d.limit > 0 && d.limit != v {
			d.rescale(float64(v) / float64(d.limit))
			// What the bucket still owes is repaid at the new rate from now
			// on, as a bucket refilled at that rate would: a raise applies
			// at once, and a cut makes the debt last longer.
			if f := d.full(); f.After(now) {
				d.base = now.Add(time.Duration(float64(f.Sub(now)) * float64(d.limit) / float64(v)))
			} else {
				d.base = f
			}
			for _, e := range d.log[d.head:] {
				e.paced = false
			}
		}
		d.limit = v
	}
	l.setPad()
	for _, r := range waiting {
		l.reserve(r, now)
		close(r.moved)
		r.moved = make(chan struct{})
	}
}

// unreserveAfter removes what calls due after now reserved (the end of the log).
func (d *dim) unreserveAfter(now time.Time) {
	for n := len(d.log); n > d.head && d.log[n-1].at.After(now); n-- {
		e := d.log[n-1]
		if e.logged {
			d.sum -= e.n
			e.logged = false
		}
		d.log[n-1] = nil
		d.log = d.log[:n-1]
	}
	if d.head == len(d.log) {
		d.sum = 0 // no rounding left behind
	}
}

// rescale makes what was sent count as the same share of a limit f times larger.
func (d *dim) rescale(f float64) {
	d.sum = 0
	for _, e := range d.log[d.head:] {
		e.n *= f
		e.scale *= f
		if e.logged {
			d.sum += e.n
		}
	}
}

// Limits returns the current budgets.
func (l *Limiter) Limits() Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Limits{RequestsPerMinute: l.dims[0].limit, InputTokensPerMinute: l.dims[1].limit, OutputTokensPerMinute: l.dims[2].limit}
}

// Reservation is a place in line for one call.
type Reservation struct {
	l         *Limiter
	cost      Cost
	at        time.Time // guarded by l.mu, like the fields below
	entries   [numDims]*entry
	cancelled bool
	// moved is closed when SetLimits gives the reservation a new time.
	moved chan struct{}
}

// Reserve takes the earliest time at which cost fits every budget and returns it as
// a reservation; the caller waits for it with Wait. A cost larger than a whole
// budget waits for an empty window, since it can never fit otherwise.
func (l *Limiter) Reserve(cost Cost) *Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	r := &Reservation{l: l, cost: cost, moved: make(chan struct{})}
	l.reserve(r, now)
	// waiting is in time order: forget the calls whose turn has come, or it
	// would hold every paced call of a long run.
	done := 0
	for done < len(l.waiting) && (!l.waiting[done].at.After(now) || l.waiting[done].cancelled) {
		done++
	}
	l.waiting = l.waiting[done:]
	if r.at.After(now) {
		l.waiting = append(l.waiting, r)
	}
	return r
}

// reserve gives r the earliest time at or after l.last when its cost fits every
// budget, and takes that budget.
func (l *Limiter) reserve(r *Reservation, now time.Time) {
	t := now
	if l.last.After(t) {
		t = l.last
	}
	costs := r.cost.values()
	// The earliest time that suits every budget: moving later never hurts a budget
	// already satisfied, so iterate until no budget moves it.
	for changed := true; changed; {
		changed = false
		for i := range l.dims {
			if e := l.dims[i].earliest(now, t, costs[i], l.window, l.tolerance(i)); e.After(t) {
				t, changed = e, true
			}
		}
	}
	r.at = t
	r.entries = [numDims]*entry{}
	for i := range l.dims {
		d := &l.dims[i]
		if d.limit == 0 {
			continue
		}
		e := &entry{at: t, n: float64(costs[i]), scale: 1, logged: true, paced: true}
		e.full = later(d.full(), t).Add(d.duration(e.n, l.window))
		d.log = append(d.log, e)
		d.sum += e.n
		r.entries[i] = e
	}
	l.last = t
}

// tolerance is how far ahead of the pacing bucket's rate dimension i may go:
// the time its limit takes to refill the bucket.
func (l *Limiter) tolerance(i int) time.Duration {
	if i == 0 {
		return l.burst.Requests // at least one request: see earliest
	}
	if l.burst.Tokens > 0 {
		return l.burst.Tokens
	}
	return DefaultBurst
}

// duration is how long the limit takes to refill n.
func (d *dim) duration(n float64, window time.Duration) time.Duration {
	if d.limit <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(n / float64(d.limit) * float64(window) * max(d.pad, 1)))
}

// full is when the pacing bucket is full again after every call reserved.
func (d *dim) full() time.Time {
	if n := len(d.log); n > d.head && d.log[n-1].paced {
		return d.log[n-1].full
	}
	return d.base
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earliest is the first time at or after t when n more fits this budget, with
// a pacing bucket holding tol of it (at least one unit of the requests budget).
func (d *dim) earliest(now, t time.Time, n int64, window, tol time.Duration) time.Time {
	if d.limit == 0 || n <= 0 {
		return t
	}
	d.prune(now, window)
	// Pacing: the bucket holds tol; n takes need of it, all of it when n is more
	// than it holds (the call goes when it is full, and leaves it in debt).
	need := d.duration(float64(n), window)
	if tol <= 0 {
		tol = d.duration(1, window) // one request at a time
	}
	if at := d.full().Add(min(need, tol) - tol); at.After(t) {
		t = at
	}
	want := float64(min(n, d.limit))
	limit := float64(d.limit) + epsilon
	// Entries at or before t-window no longer count at t.
	live := d.log[d.head:]
	inWindow := d.sum
	for _, e := range live {
		if e.at.After(t.Add(-window)) {
			break
		}
		inWindow -= e.n
	}
	if inWindow+want <= limit {
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
		if inWindow+want <= limit {
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
		if e.paced {
			d.base = e.full
		}
		d.log[d.head] = nil
		d.head++
	}
	if d.head == len(d.log) {
		d.sum = 0 // no rounding left behind
	}
	if d.head > 1024 && d.head > len(d.log)/2 {
		d.log = append(d.log[:0], d.log[d.head:]...)
		d.head = 0
	}
}

// At is when the call may start (SetLimits may move it).
func (r *Reservation) At() time.Time {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.at
}

// Wait sleeps until the reservation's time, following it if SetLimits moves it. If
// ctx ends first, the reservation is cancelled and ctx's error returned.
func (r *Reservation) Wait(ctx context.Context) error {
	for {
		r.l.mu.Lock()
		at, moved := r.at, r.moved
		r.l.mu.Unlock()
		d := at.Sub(r.l.clock.Now())
		if d <= 0 {
			return ctx.Err()
		}
		t := r.l.clock.NewTimer(d)
		select {
		case <-t.Chan():
		case <-moved:
		case <-ctx.Done():
			t.Stop()
			r.Cancel()
			return ctx.Err()
		}
		t.Stop()
	}
}

// Cancel gives back a reservation whose call was not made.
func (r *Reservation) Cancel() {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.cancelled {
		return
	}
	r.cancelled = true
	for i, e := range r.entries {
		if e != nil {
			d := &r.l.dims[i]
			d.adjust(e, 0, r.l.window)
			if n := len(d.log); n > d.head && d.log[n-1] == e {
				// The latest call gives its turn back too.
				e.logged = false
				d.log[n-1] = nil
				d.log = d.log[:n-1]
			}
		}
	}
	if r.at.Equal(r.l.last) {
		var last time.Time
		for i := range r.l.dims {
			if d := &r.l.dims[i]; len(d.log) > d.head {
				last = later(last, d.log[len(d.log)-1].at)
			}
		}
		r.l.last = last
	}
}

// Settle replaces the estimated token amounts with what the server reported; the
// request count is kept. Amounts that already left the window change nothing.
func (r *Reservation) Settle(actual Cost) {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.cancelled {
		return
	}
	for i, v := range actual.values() {
		if i == 0 || r.entries[i] == nil {
			continue
		}
		r.l.dims[i].adjust(r.entries[i], v, r.l.window)
	}
}

// adjust sets an entry's amount, keeping the sum right if it is still logged,
// and re-times the pacing bucket from the entry on: as if the call had cost
// that much when it was sent (which, the bucket refilling up to its capacity
// since, never promises more than a server adjusting its count at the end of
// the call, as Anthropic does for output tokens, would have).
func (d *dim) adjust(e *entry, n int64, window time.Duration) {
	v := float64(n) * e.scale
	if e.logged {
		d.sum += v - e.n
	}
	e.n = v
	if !e.logged || !e.paced {
		return
	}
	i := len(d.log) - 1
	for i >= d.head && d.log[i] != e {
		i--
	}
	if i < d.head {
		return
	}
	prev := d.base
	if i > d.head && d.log[i-1].paced {
		prev = d.log[i-1].full
	}
	for _, x := range d.log[i:] {
		x.full = later(prev, x.at).Add(d.duration(x.n, window))
		prev = x.full
	}
}

// Drain empties the pacing buckets at at: calls reserved from then on go as
// if the bucket had just been emptied then. A limiter that cannot know what
// was sent before it (a new leader's) starts so.
func (l *Limiter) Drain(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.dims {
		d := &l.dims[i]
		if d.limit == 0 {
			continue
		}
		tol := l.tolerance(i)
		if tol <= 0 {
			tol = d.duration(1, l.window)
		}
		if f := at.Add(tol); f.After(d.full()) {
			d.base = f
			for _, e := range d.log[d.head:] {
				e.paced = false
			}
		}
	}
}

// A Pacer paces calls that several processes make through one key (a
// cluster's runner pods): it says when each may go, so that together they
// stay within the key's buckets. The engine waits for it after its own
// limiter.
type Pacer interface {
	// Pace takes a place for a call of caller costing cost. It fails only
	// when ctx ends; a pacer that cannot be reached lets the call go.
	Pace(ctx context.Context, caller string, cost Cost) (Paced, error)
}

// Paced is a call's place with a Pacer (or a Limiter's Reservation).
type Paced interface {
	// Wait waits for the call's time; if ctx ends first the place is given
	// back and ctx's error returned.
	Wait(ctx context.Context) error
	// Settle replaces the estimated token amounts with what the call cost.
	Settle(actual Cost)
	// Cancel gives the place back: the call was not made.
	Cancel()
}
