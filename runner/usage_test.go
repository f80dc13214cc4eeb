package runner

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// TestSharedEndpointLimitsItsModelsTogether: two models calling through one
// endpoint share its limit, each otherwise unlimited: together they are paced
// as one.
func TestSharedEndpointLimitsItsModelsTogether(t *testing.T) {
	p, calls := timedEcho()
	// 1200/min paces one call every ~50ms: 22 calls of the two models take about a second.
	lim := ratelimit.Limits{RequestsPerMinute: 1200}
	plan := testPlan(t).Model("a", p, 10).Endpoint("key", lim).Model("b", p, 10).Endpoint("key", lim).Dataset("d", 11).Obj()
	e := run(t, plan, newMemSink(), Options{})
	times := calls()
	if d := times[len(times)-1].Sub(times[0]); d < 950*time.Millisecond {
		t.Errorf("22 calls of two models at a shared 1200/min took %v, want about 1s", d)
	}
	for _, m := range []string{"a", "b"} {
		if got := e.Usage(m).Requests; got != 11 {
			t.Errorf("Usage(%s).Requests = %d, want 11", m, got)
		}
	}
}

// TestUsageCountsTheLastMinute: requests, tokens and 429s are counted, and
// drop out a minute later.
func TestUsageCountsTheLastMinute(t *testing.T) {
	var refused atomic.Bool
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if refused.CompareAndSwap(false, true) {
			return nil, &provider.HTTPError{StatusCode: 429, Message: "Rate limit reached"}
		}
		return &provider.Response{Text: req.Prompt, Usage: provider.Usage{InputTokens: 10, OutputTokens: 3}}, nil
	}}
	clock := clockwork.NewFakeClock()
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 4).Obj()
	e, err := New(plan, Options{Clock: clock, Rand: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background(), plan.Tasks(), newMemSink()) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			want := Usage{Requests: 5, InputTokens: 40, OutputTokens: 12, Throttled: 1}
			if diff := cmp.Diff(want, e.Usage("m")); diff != "" {
				t.Errorf("Usage (-want +got):\n%s", diff)
			}
			clock.Advance(usageWindow)
			if got := e.Usage("m"); got != (Usage{}) {
				t.Errorf("a minute later Usage = %+v, want nothing", got)
			}
			return
		default:
			clock.Advance(time.Millisecond) // the backoff after the 429
			time.Sleep(time.Millisecond)
		}
	}
}

// TestSharedEndpointBoundsCallsInFlight: two models calling through one
// endpoint with maxInFlight 2 never have more than 2 calls in flight
// together, whatever their concurrency; a model's own share (SetLimits)
// bounds it alone.
func TestSharedEndpointBoundsCallsInFlight(t *testing.T) {
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		time.Sleep(5 * time.Millisecond)
		return echo(ctx, req, n)
	}}
	lim := ratelimit.Limits{MaxInFlight: 2}
	plan := testPlan(t).Model("a", p, 8).Endpoint("key", lim).Model("b", p, 8).Endpoint("key", lim).Dataset("d", 30).Obj()
	run(t, plan, newMemSink(), Options{})
	if got := p.peak.Load(); got != 2 {
		t.Errorf("peak calls in flight %d, want 2 (the endpoint's maxInFlight)", got)
	}

	own := &fakeProvider{fn: p.fn}
	plan = testPlan(t).Model("c", own, 8).Dataset("d", 30).Obj()
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetLimits("c", ratelimit.Limits{MaxInFlight: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background(), plan.Tasks(), newMemSink()); err != nil {
		t.Fatal(err)
	}
	if got := own.peak.Load(); got != 3 {
		t.Errorf("peak calls in flight %d, want 3 (the model's share)", got)
	}
}

// TestSharedEndpointDividesByWeight: in a local run, two models calling
// through one endpoint share its limit by their weights (3:1) while both run;
// once the heavier is done, the other gets the whole.
func TestSharedEndpointDividesByWeight(t *testing.T) {
	var mu sync.Mutex
	at := map[string][]time.Time{}
	counting := func(name string) *fakeProvider {
		return &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
			mu.Lock()
			at[name] = append(at[name], time.Now())
			mu.Unlock()
			return echo(ctx, req, n)
		}}
	}
	lim := ratelimit.Limits{RequestsPerMinute: 1200}
	plan := testPlan(t).Model("heavy", counting("heavy"), 8).Endpoint("key", lim).
		Model("light", counting("light"), 8).Endpoint("key", lim).Dataset("d", 30).Obj()
	plan.Models[0].EndpointWeight = 3
	start := time.Now()
	run(t, plan, newMemSink(), Options{})
	heavyDone := at["heavy"][len(at["heavy"])-1]
	light := 0
	for _, t := range at["light"] {
		if !t.After(heavyDone) {
			light++
		}
	}
	// While both ran, heavy's 30 calls beside about 10 of light's (3:1).
	if light < 7 || light > 14 {
		t.Errorf("light made %d calls while heavy made its 30, want about 10 (weights 3:1)", light)
	}
	// 60 calls at 1200/min take 3s; at its 300/min part alone light would take 5.5s.
	if d := at["light"][len(at["light"])-1].Sub(start); d > 3700*time.Millisecond {
		t.Errorf("both took %v, want about 3s at 1200/min: light did not get the whole once heavy was done", d)
	}
}
