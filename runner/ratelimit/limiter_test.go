package ratelimit

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type event struct {
	at   time.Time
	cost Cost
}

// maxInWindow returns, per budget, the largest total of events within any
// half-open window (t-w, t] — the way a server counting a sliding window sees them.
func maxInWindow(events []event, w time.Duration) [numDims]int64 {
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	var best, sum [numDims]int64
	lo := 0
	for hi := range events {
		for d, v := range events[hi].cost.values() {
			sum[d] += v
		}
		for !events[lo].at.After(events[hi].at.Add(-w)) {
			for d, v := range events[lo].cost.values() {
				sum[d] -= v
			}
			lo++
		}
		for d := range sum {
			best[d] = max(best[d], sum[d])
		}
	}
	return best
}

// bucketViolations counts the events a server's token bucket for dimension d
// would refuse: capacity c, refilled continuously at limit per Period, a call
// accepted when the bucket holds it (or is full, for a call larger than the
// bucket, which leaves it in debt), as providers document their limits.
func bucketViolations(events []event, d int, limit int64, c float64) int {
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	rate := float64(limit) / Period.Seconds()
	level, bad := c, 0
	var last time.Time
	for i, e := range events {
		if i > 0 {
			level = math.Min(c, level+rate*e.at.Sub(last).Seconds())
		}
		last = e.at
		n := float64(e.cost.values()[d])
		if n == 0 {
			continue
		}
		if level+1e-9 < math.Min(n, c) {
			bad++
			continue
		}
		level -= n
	}
	return bad
}

// simulate makes n calls as fast as the limiter allows: each caller reserves when
// the previous one was admitted, the clock jumps to each reservation's time.
func simulate(t *testing.T, l *Limiter, clock *clockwork.FakeClock, n int, cost func(i int) Cost) []event {
	t.Helper()
	events := make([]event, 0, n)
	for i := range n {
		c := cost(i)
		r := l.Reserve(c)
		if d := r.At().Sub(clock.Now()); d > 0 {
			clock.Advance(d)
		}
		if err := r.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		events = append(events, event{at: clock.Now(), cost: c})
	}
	return events
}

func TestLimiterNeverExceedsAnyWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name   string
		limits Limits
		cost   func(i int) Cost
	}{
		{
			name:   "requests",
			limits: Limits{RequestsPerMinute: 1200},
			cost:   func(int) Cost { return Cost{Requests: 1} },
		},
		{
			name:   "small request limit",
			limits: Limits{RequestsPerMinute: 7},
			cost:   func(int) Cost { return Cost{Requests: 1} },
		},
		{
			name:   "input tokens of random sizes",
			limits: Limits{InputTokensPerMinute: 30000},
			cost:   func(int) Cost { return Cost{Requests: 1, InputTokens: 1 + rng.Int64N(4000)} },
		},
		{
			name:   "all three budgets",
			limits: Limits{RequestsPerMinute: 50, InputTokensPerMinute: 30000, OutputTokensPerMinute: 8000},
			cost: func(int) Cost {
				return Cost{Requests: 1, InputTokens: 1 + rng.Int64N(2000), OutputTokens: 1 + rng.Int64N(600)}
			},
		},
		{
			name:   "bursty sizes near the budget",
			limits: Limits{InputTokensPerMinute: 10000},
			cost: func(i int) Cost {
				if i%10 == 0 {
					return Cost{Requests: 1, InputTokens: 9000}
				}
				return Cost{Requests: 1, InputTokens: 10}
			},
		},
	}
	// Twice: with the default bucket (a second of each limit, one request),
	// which providers enforcing a minute's limit over shorter periods must
	// accept, and with a minute's bucket (a provider allowing that much at
	// once), where only the sliding minute holds calls back.
	for _, minute := range []bool{false, true} {
		for _, tc := range cases {
			name := tc.name
			if minute {
				name += " with a minute's burst"
			}
			t.Run(name, func(t *testing.T) {
				clock := clockwork.NewFakeClockAt(epoch)
				l := New(tc.limits, DefaultSlack, clock)
				burst := DefaultBurst
				if minute {
					burst = Period
					l.SetBurst(Burst{Requests: Period, Tokens: Period})
				}
				events := simulate(t, l, clock, 3000, tc.cost)
				got := maxInWindow(events, Period)
				for d, limit := range tc.limits.values() {
					if limit > 0 && got[d] > limit {
						t.Errorf("budget %d: %d in one minute, limit %d", d, got[d], limit)
					}
					if limit == 0 {
						continue
					}
					capacity := float64(limit) * burst.Seconds() / Period.Seconds()
					if d == 0 && !minute {
						capacity = 1
					}
					if bad := bucketViolations(events, d, limit, capacity); bad > 0 {
						t.Errorf("budget %d: a bucket of %.1f refilled at %d a minute refuses %d of %d calls", d, capacity, limit, bad, len(events))
					}
				}
				// The limiter must not waste budget either: over the run, the binding
				// budget is used at nearly its rate. Two things cost a little: the slack
				// (under 1%), and granularity: under a strict sliding window a call of
				// size n waits until n is free, so up to the largest call's share of the
				// budget can sit idle (for requests, 1 of the limit). A call larger than
				// its bucket waits for it to be full, and while one budget's bucket holds
				// a call back another's fills up unused: with several budgets binding in
				// turn and calls larger than their buckets, a fifth of the rate is lost
				// (as it would be at a server counting that way).
				elapsed := events[len(events)-1].at.Sub(events[0].at)
				if elapsed < 2*Period {
					return
				}
				var total, largest [numDims]int64
				for _, e := range events {
					for d, v := range e.cost.values() {
						total[d] += v
						largest[d] = max(largest[d], v)
					}
				}
				best, want := 0.0, 0.0
				oversized := false
				for d, limit := range tc.limits.values() {
					if limit == 0 {
						continue
					}
					if d > 0 && float64(largest[d]) > float64(limit)*burst.Seconds()/Period.Seconds() {
						oversized = true
					}
					if used := float64(total[d]) / (float64(limit) * elapsed.Minutes()); used > best {
						best = used
						want = 0.97 * (1 - float64(largest[d]-1)/float64(limit))
						if d == 0 && limit <= smallRequests && !minute {
							want /= smallRequestsPad // spaced wider on purpose
						}
					}
				}
				if oversized && tc.limits.InputTokensPerMinute > 0 && tc.limits.OutputTokensPerMinute > 0 {
					want = min(want, 0.75)
				}
				t.Logf("binding budget used at %.4f of its rate (floor %.4f)", best, want)
				if best < want {
					t.Errorf("binding budget used at %.3f of its rate, want >= %.3f", best, want)
				}
			})
		}
	}
}

func TestLimiterPacesRequestsPerSecond(t *testing.T) {
	// Servers may enforce 1,200 per minute as 20 per second: the pacing must too.
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{RequestsPerMinute: 1200}, DefaultSlack, clock)
	events := simulate(t, l, clock, 2000, func(int) Cost { return Cost{Requests: 1} })
	if got := maxInWindow(events, time.Second)[0]; got > 20 {
		t.Errorf("%d requests in one second, want <= 20", got)
	}
}

func TestLimiterConcurrentCallers(t *testing.T) {
	// Many goroutines reserving at once get distinct, FIFO, in-budget times.
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{RequestsPerMinute: 600, InputTokensPerMinute: 6000}, DefaultSlack, clock)
	var mu sync.Mutex
	var events []event
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				c := Cost{Requests: 1, InputTokens: int64(1 + (g*31+i*17)%50)}
				r := l.Reserve(c)
				mu.Lock()
				events = append(events, event{at: r.At(), cost: c})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got := maxInWindow(events, Period)
	if got[0] > 600 || got[1] > 6000 {
		t.Errorf("max in a minute = %v, limits 600 requests and 6000 tokens", got)
	}
}

func TestLimiterOversizedCostWaitsForEmptyWindow(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{InputTokensPerMinute: 1000}, DefaultSlack, clock)
	first := l.Reserve(Cost{Requests: 1, InputTokens: 10})
	big := l.Reserve(Cost{Requests: 1, InputTokens: 5000})
	if want := first.At().Add(Period + DefaultSlack); big.At().Before(want) {
		t.Errorf("oversized call at %v, want at or after %v (once the first left the window)", big.At().Sub(epoch), want.Sub(epoch))
	}
}

func TestLimiterCancelGivesBudgetBack(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{InputTokensPerMinute: 1000}, DefaultSlack, clock)
	a := l.Reserve(Cost{InputTokens: 1000})
	b := l.Reserve(Cost{InputTokens: 1000})
	if !b.At().After(a.At()) {
		t.Fatalf("second full-budget reservation not delayed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Wait(ctx); err == nil {
		t.Fatal("Wait with a cancelled context returned nil")
	}
	a.Cancel()
	c := l.Reserve(Cost{InputTokens: 900})
	// Reservations stay FIFO (c goes no earlier than b was placed), but with both
	// cancelled the sliding log no longer holds c back a whole window beyond b.
	if c.At().After(b.At().Add(2 * time.Second)) {
		t.Errorf("after cancelling, next reservation at %v, want near %v", c.At().Sub(epoch), b.At().Sub(epoch))
	}
}

func TestLimiterSettleCorrectsEstimates(t *testing.T) {
	// The sliding minute (a bucket of a minute, so that only the log counts).
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{InputTokensPerMinute: 1000}, DefaultSlack, clock)
	l.SetBurst(Burst{Tokens: Period})
	r := l.Reserve(Cost{Requests: 1, InputTokens: 900})
	r.Settle(Cost{Requests: 1, InputTokens: 100})
	clock.Advance(time.Second)
	next := l.Reserve(Cost{Requests: 1, InputTokens: 800})
	if d := next.At().Sub(clock.Now()); d > 2*time.Second {
		t.Errorf("after settling 900 down to 100, 800 more waited %v", d)
	}
	// And upward: the over-use holds later calls back.
	clock.Advance(2 * Period)
	r = l.Reserve(Cost{Requests: 1, InputTokens: 10})
	r.Settle(Cost{Requests: 1, InputTokens: 1000})
	next = l.Reserve(Cost{Requests: 1, InputTokens: 10})
	if d := next.At().Sub(r.At()); d < Period {
		t.Errorf("after settling 10 up to 1000, the next call waited only %v", d)
	}
}

func TestLimiterSettleRetimesThePacingBucket(t *testing.T) {
	// A bucket of a second of 1,000 input tokens a minute (16.5): 900 tokens
	// leave it 54 s in debt, settled at 100 only 6 s.
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{InputTokensPerMinute: 1000}, DefaultSlack, clock)
	per := func(n int64) time.Duration { return time.Duration(float64(n) / 1000 * float64(Period+DefaultSlack)) }
	r := l.Reserve(Cost{Requests: 1, InputTokens: 900})
	probe := func() time.Duration {
		p := l.Reserve(Cost{Requests: 1, InputTokens: 10})
		defer p.Cancel()
		return p.At().Sub(epoch)
	}
	// The call goes when the bucket can hold it: a second early.
	if d, want := probe(), per(900)-DefaultBurst+per(10); d < want-10*time.Millisecond || d > want+10*time.Millisecond {
		t.Fatalf("a call after 900 tokens is due in %v, want %v", d, want)
	}
	r.Settle(Cost{Requests: 1, InputTokens: 100})
	if d, want := probe(), per(100)-DefaultBurst+per(10); d < want-10*time.Millisecond || d > want+10*time.Millisecond {
		t.Errorf("after settling 900 down to 100, the next call is due in %v, want %v", d, want)
	}
	// A cancelled call owes nothing.
	r.Cancel()
	if d := probe(); d != 0 {
		t.Errorf("with every call cancelled, a call is due in %v, want at once", d)
	}
}

func TestLimiterSetLimitsCountsWhatWasSent(t *testing.T) {
	// Re-dividing a budget: a shard whose share halves counts what it sent before
	// as the share of the old limit it was. Every window ending after the change
	// holds at most its share of each limit in force during it (plus the one call
	// paced at the change), so the shards' sum stays within the model's budget.
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{RequestsPerMinute: 600}, DefaultSlack, clock)
	events := simulate(t, l, clock, 600, func(int) Cost { return Cost{Requests: 1} })
	change := clock.Now()
	l.SetLimits(Limits{RequestsPerMinute: 300})
	events = append(events, simulate(t, l, clock, 600, func(int) Cost { return Cost{Requests: 1} })...)
	tail := events[600:]
	for i := range tail {
		lo := tail[i].at.Add(-Period - DefaultSlack)
		used := 0.0
		for _, e := range events {
			if e.at.After(lo) && !e.at.After(tail[i].at) {
				if e.at.After(change) {
					used += 1.0 / 300
				} else {
					used += 1.0 / 600
				}
			}
		}
		if used > 1+1.0/300 {
			t.Fatalf("window ending %v used %.4f of the limits in force", tail[i].at.Sub(epoch), used)
		}
	}
	if got := maxInWindow(tail[300:], Period)[0]; got > 300 {
		t.Errorf("%d requests in a minute once the limit dropped to 300", got)
	}
	if got := l.Limits(); got.RequestsPerMinute != 300 {
		t.Errorf("Limits() = %+v", got)
	}
}

func TestLimiterUnlimitedIsImmediate(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{}, DefaultSlack, clock)
	for range 10000 {
		if r := l.Reserve(Cost{Requests: 1, InputTokens: 1e6}); !r.At().Equal(epoch) {
			t.Fatalf("unlimited reservation delayed to %v", r.At())
		}
	}
}

func TestSetLimitsRepeatedDoesNotGrantBursts(t *testing.T) {
	// Runners re-apply their share every time they read the budget; doing so must
	// not change the pace, even with reservations queued into the future.
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{RequestsPerMinute: 600}, DefaultSlack, clock)
	var events []event
	for i := range 300 {
		if i%3 == 0 {
			l.SetLimits(Limits{RequestsPerMinute: 600})
		}
		r := l.Reserve(Cost{Requests: 1})
		events = append(events, event{at: r.At(), cost: Cost{Requests: 1}})
		clock.Advance(10 * time.Millisecond) // callers reserve faster than the pace
	}
	if got := maxInWindow(events, time.Second)[0]; got > 10 {
		t.Errorf("%d requests in one second at 600/min with repeated SetLimits, want <= 10", got)
	}
}

func TestLesser(t *testing.T) {
	for _, tc := range []struct{ a, b, want Limits }{
		{Limits{RequestsPerMinute: 100, OutputTokensPerMinute: 50}, Limits{RequestsPerMinute: 60, InputTokensPerMinute: 9000}, Limits{RequestsPerMinute: 60, InputTokensPerMinute: 9000, OutputTokensPerMinute: 50}},
		{Limits{}, Limits{}, Limits{}},
		{Limits{RequestsPerMinute: 5}, Limits{}, Limits{RequestsPerMinute: 5}},
	} {
		if got := tc.a.Lesser(tc.b); got != tc.want {
			t.Errorf("%+v.Lesser(%+v) = %+v, want %+v", tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.Lesser(tc.a); got != tc.want {
			t.Errorf("%+v.Lesser(%+v) = %+v, want %+v (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

// TestSmallLimitsTolerateUnevenArrivals: a provider enforcing 30 rpm as a
// bucket of one request refilled every 2 s refuses a call that arrives a
// moment early; calls paced by the limiter and reaching the server up to
// 90 ms (at 60 rpm 45 ms) late, unevenly, are never refused, and the limit is
// still used at 0.9 or more.
func TestSmallLimitsTolerateUnevenArrivals(t *testing.T) {
	for rpm, late := range map[int64]time.Duration{30: 90 * time.Millisecond, 60: 45 * time.Millisecond} {
		clock := clockwork.NewFakeClockAt(epoch)
		l := New(Limits{RequestsPerMinute: rpm}, DefaultSlack, clock)
		events := simulate(t, l, clock, 300, func(int) Cost { return Cost{Requests: 1} })
		rng := rand.New(rand.NewPCG(7, uint64(rpm)))
		for i := range events {
			events[i].at = events[i].at.Add(time.Duration(rng.Int64N(int64(late))))
		}
		if bad := bucketViolations(events, 0, rpm, 1); bad > 0 {
			t.Errorf("%d rpm: %d of %d calls refused by a bucket of one request", rpm, bad, len(events))
		}
		elapsed := events[len(events)-1].at.Sub(events[0].at)
		if used := float64(len(events)-1) / (float64(rpm) * elapsed.Minutes()); used < 0.9 {
			t.Errorf("%d rpm: used at %.3f of the limit, want >= 0.9", rpm, used)
		}
	}
}

// TestSharesAreKeptExactly: a limiter of shares (SetExact) spaces a small
// limit's calls exactly; the pacer pads the key's.
func TestSharesAreKeptExactly(t *testing.T) {
	for _, exact := range []bool{false, true} {
		clock := clockwork.NewFakeClockAt(epoch)
		l := New(Limits{RequestsPerMinute: 30}, DefaultSlack, clock)
		l.SetExact(exact)
		events := simulate(t, l, clock, 61, func(int) Cost { return Cost{Requests: 1} })
		gap := events[60].at.Sub(events[0].at) / 60
		want := (Period + DefaultSlack) / 30
		if !exact {
			want = time.Duration(float64(want) * smallRequestsPad)
		}
		if d := gap - want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("exact %v: calls %v apart, want %v", exact, gap, want)
		}
	}
}
