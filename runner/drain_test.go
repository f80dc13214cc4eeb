package runner

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/runner/provider"
)

// TestRunDraining: draining takes no new sample, lets the one in flight finish
// within the grace period and cancels it after (or at once on Hurry).
func TestRunDraining(t *testing.T) {
	cases := []struct {
		name string
		// act happens once draining began, with the sample in flight.
		act         func(clock *clockwork.FakeClock, release, hurry chan struct{})
		wantRecords int
	}{
		{"finishes within the grace period", func(clock *clockwork.FakeClock, release, _ chan struct{}) {
			clock.Advance(59 * time.Second)
			close(release)
		}, 1},
		{"cancelled when the grace period ends", func(clock *clockwork.FakeClock, _, _ chan struct{}) {
			clock.Advance(60 * time.Second)
		}, 0},
		{"cancelled at once on hurry", func(_ *clockwork.FakeClock, _, hurry chan struct{}) {
			close(hurry)
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			started, release := make(chan struct{}, 10), make(chan struct{})
			p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
				started <- struct{}{}
				select {
				case <-release:
					return echo(ctx, req, n)
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}}
			plan := testPlan(t).Model("m", p, 1).Dataset("d", 5).Obj()
			e, err := New(plan, Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			begin, hurry, began := make(chan struct{}), make(chan struct{}), make(chan struct{})
			sink := newMemSink()
			done := make(chan error, 1)
			go func() {
				done <- e.RunDraining(context.Background(), plan.Tasks(), sink, Drain{Begin: begin, Grace: time.Minute, Hurry: hurry, OnBegin: func() { close(began) }})
			}()
			<-started
			close(begin)
			<-began
			if err := clock.BlockUntilContext(context.Background(), 1); err != nil { // the grace timer
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Fatalf("Run returned (%v) as draining began, with a sample in flight", err)
			case <-time.After(50 * time.Millisecond):
			}
			tc.act(clock, release, hurry)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("RunDraining: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("RunDraining still running")
			}
			if got := sink.count(); got != tc.wantRecords {
				t.Errorf("records = %d, want %d", got, tc.wantRecords)
			}
			if n := p.calls.Load(); n != 1 {
				t.Errorf("%d samples started, want 1 (none after draining began)", n)
			}
		})
	}
}
