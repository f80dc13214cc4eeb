package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A cluster re-divides a model's budget among its shards while they run, and a
// user may edit a limit mid-run: a change applies within a second or so.

func TestSetLimitsRaisedMovesQueuedCallsEarlier(t *testing.T) {
	// Ten callers queue at 12 per minute (one every 5 s, up to 45 s ahead). Once
	// the limit is raised to 600, they go at 600 per minute from now on, not
	// after the queue the old limit made.
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{RequestsPerMinute: 12}, DefaultSlack, clock)
	var rs []*Reservation
	for range 10 {
		rs = append(rs, l.Reserve(Cost{Requests: 1}))
	}
	if last := rs[9].At().Sub(epoch); last < 40*time.Second {
		t.Fatalf("the 10th call is due after %v; the test needs a long queue", last)
	}
	clock.Advance(time.Second)
	l.SetLimits(Limits{RequestsPerMinute: 600})
	for i, r := range rs[1:] {
		if d := r.At().Sub(clock.Now()); d > time.Duration(i+2)*110*time.Millisecond {
			t.Errorf("queued call %d is due in %v after the raise, want within %v", i+1, d, time.Duration(i+2)*110*time.Millisecond)
		}
	}
	// A waiter learns its new time.
	done := make(chan error, 1)
	go func() { done <- rs[9].Wait(context.Background()) }()
	if err := clock.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting call still waits for its old time")
	}
}

func TestSetLimitsLoweredSlowsWithoutPausing(t *testing.T) {
	// A minute at 600 per minute, then the limit drops to 120: calls go on at
	// 120 per minute at once (one every 0.5 s), instead of stopping until the
	// last minute's calls fall under the new limit (48 s).
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{RequestsPerMinute: 600}, DefaultSlack, clock)
	one := func(int) Cost { return Cost{Requests: 1} }
	events := simulate(t, l, clock, 610, one)
	change := clock.Now()
	l.SetLimits(Limits{RequestsPerMinute: 120})
	after := simulate(t, l, clock, 240, one)
	prev := change
	for i, e := range after {
		if gap := e.at.Sub(prev); gap > 600*time.Millisecond {
			t.Fatalf("call %d after lowering waited %v, want the new pace (0.5 s)", i, gap)
		}
		prev = e.at
	}
	// Every sliding window counts each call against the limit in force when it
	// was sent: a window straddling the change holds its share of each.
	all := append(events, after...)
	window := Period + DefaultSlack
	for _, end := range all {
		if !end.at.After(change) {
			continue
		}
		used := 0.0
		for _, e := range all {
			if e.at.After(end.at.Add(-window)) && !e.at.After(end.at) {
				if e.at.After(change) {
					used += 1.0 / 120
				} else {
					used += 1.0 / 600
				}
			}
		}
		if used > 1+1.0/120 { // plus the one paced call at the change
			t.Fatalf("window ending %v used %.3f of the limits in force", end.at.Sub(change), used)
		}
	}
	// A minute after the change, every window is within the new limit.
	if got := maxInWindow(after[120:], Period)[0]; got > 120 {
		t.Errorf("%d calls in a minute at 120 per minute", got)
	}
}

// TestWaitingCallsAreForgottenOnceDue: the limiter remembers waiting calls (to
// re-time them on a change) only until their turn: a long paced run must not
// keep every call it ever made.
func TestWaitingCallsAreForgottenOnceDue(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	l := New(Limits{RequestsPerMinute: 600}, DefaultSlack, clock)
	for range 10000 {
		r := l.Reserve(Cost{Requests: 1})
		clock.Advance(r.At().Sub(clock.Now())) // the caller waits for its turn
	}
	l.mu.Lock()
	n := len(l.waiting)
	l.mu.Unlock()
	if n > 1 {
		t.Errorf("%d reservations remembered after 10000 paced calls, each waited for; want at most the last", n)
	}
}
