package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// held reports whether every place of m's window is taken: a try to take
// one more waits past a moment.
func held(t *testing.T, m *modelRun) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := m.window.Acquire(ctx); err != nil {
		return true
	}
	m.window.Release()
	return false
}

func TestLimitsStage(t *testing.T) {
	e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{}, nil)
	m.window = ratelimit.NewWindow(1, time.Second, e.clock)
	m.inFlight = ratelimit.NewInFlight(1)

	res, cost, done, err := e.throughLimits(context.Background(), m, 40)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || cost.Requests != 1 || cost.InputTokens != 40 {
		t.Errorf("places %d, cost %+v; want the model's one place, 1 request of 40 input tokens", len(res), cost)
	}
	if !held(t, m) || m.inFlight.InUse() != 1 {
		t.Errorf("during the attempt: window held %v, places in flight %d; want held, 1", held(t, m), m.inFlight.InUse())
	}
	done()
	if held(t, m) || m.inFlight.InUse() != 0 {
		t.Errorf("after done: window held %v, places in flight %d; want both given back", held(t, m), m.inFlight.InUse())
	}
}

// TestLimitsStageGivesBackWhatAFailedWaitTook checks that an attempt whose
// wait ends (its context, or the engine's stop while only waiting) holds no
// place afterwards, and says which ended it.
func TestLimitsStageGivesBackWhatAFailedWaitTook(t *testing.T) {
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for _, tt := range []struct {
		name string
		// block makes the attempt wait at one stage.
		block func(m *modelRun)
		// ctx is the attempt's; its waits' context ends first when it carries
		// a stopped one (the engine's Stop).
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{name: "the gate, until the run ends", block: func(m *modelRun) { m.gate.Hold(true) },
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 30*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded},
		{name: "the places in flight, until the engine stops",
			block: func(m *modelRun) {
				m.inFlight = ratelimit.NewInFlight(1)
				if err := m.inFlight.Acquire(context.Background()); err != nil {
					panic(err)
				}
			},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithCancel(context.WithValue(context.Background(), waitsKey{}, stopped))
			},
			wantErr: errStopping},
		{name: "the limiter, until the run ends",
			block: func(m *modelRun) {
				m.limiter.SetLimits(ratelimit.Limits{RequestsPerMinute: 1})
				m.limiter.Reserve(ratelimit.Cost{Requests: 1}) // the minute's one request (the clock is fake: it never passes)
			},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 30*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{}, nil)
			m.window = ratelimit.NewWindow(1, time.Second, e.clock)
			tt.block(m)
			ctx, cancel := tt.ctx()
			defer cancel()
			_, _, done, err := e.throughLimits(ctx, m, 1)
			if !errors.Is(err, tt.wantErr) || done != nil {
				t.Fatalf("got %v (done %v), want %v", err, done != nil, tt.wantErr)
			}
			if held(t, m) {
				t.Error("the window's place is still held")
			}
		})
	}
}
