package runner

import (
	"context"
	"errors"

	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// The limits stage: an attempt waits, in this order, for a place in its
// model's window (calls in flight, narrowed by 429s), for its gate (closed
// by a retry-after or a pause), for its places in time (the model's own
// limiter, then its endpoint's, then the pacer's), and last for its places
// in flight. Only these waits end with Stop (waitCtx).

// throughLimits takes an attempt through its model's limits: its places in
// time (res, settled once the call's cost is known), its estimated cost, and
// done, which gives back its place in the window and its places in flight.
func (e *Engine) throughLimits(ctx context.Context, m *modelRun, rawIn int64) (res reservation, cost ratelimit.Cost, done func(), err error) {
	wctx := waitCtx(ctx)
	if err := m.window.Acquire(wctx); err != nil {
		return nil, cost, nil, waitErr(ctx, err)
	}
	fail := func(err error) (reservation, ratelimit.Cost, func(), error) {
		m.window.Release()
		return nil, cost, nil, waitErr(ctx, err)
	}
	if err := m.gate.Wait(wctx); err != nil {
		return fail(err)
	}
	cost = m.est.cost(rawIn)
	res = reservation{m.limiter.Reserve(cost)}
	if err := res.wait(wctx); err != nil {
		return fail(err)
	}
	if m.shared != nil {
		// The endpoint's place is taken once the model's own has come, so
		// that the call goes at the endpoint's time: reserved together, a
		// later own time would leave the endpoint's unused and bunch this
		// call with the next caller's.
		res = append(res, m.shared.Reserve(cost))
		if err := res.wait(wctx); err != nil {
			return fail(err)
		}
	}
	if pacer := m.pacer.Load(); pacer != nil {
		// Likewise the pacer's, which spaces it with the other pods' calls.
		p, err := pacer.Pace(wctx, m.Name, cost)
		if err != nil {
			res.cancel()
			return fail(err)
		}
		res = append(res, p)
		if err := res.wait(wctx); err != nil {
			return fail(err)
		}
	}
	// The places in flight are taken last, so that waiting for the limiter
	// holds none; and given back while the gate is closed (a 429 may have
	// closed it meanwhile, or the shard paused), so that a held model holds
	// no place.
	release, err := m.takeInFlight(wctx)
	if err != nil {
		res.cancel()
		return fail(err)
	}
	return res, cost, func() { release(); m.window.Release() }, nil
}

// waitsKey holds, in a model's context, the context of its waits: the
// model's, also ended by Stop.
type waitsKey struct{}

// waitCtx is the context for the waits before a request is sent.
func waitCtx(ctx context.Context) context.Context {
	if w, ok := ctx.Value(waitsKey{}).(context.Context); ok {
		return w
	}
	return ctx
}

// waitErr is the error of a wait that wctx (from waitCtx(ctx)) cut short.
func waitErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.Canceled) {
		return errStopping
	}
	return err
}

// takeInFlight takes the model's places in flight (its own and, locally, its
// endpoint's) once its gate is open, and returns how to give them back.
func (m *modelRun) takeInFlight(ctx context.Context) (release func(), err error) {
	var taken []*ratelimit.InFlight
	release = func() {
		for _, f := range taken {
			f.Release()
		}
		taken = taken[:0]
	}
	for {
		for _, f := range []*ratelimit.InFlight{m.inFlight, m.sharedInFlight} {
			if f == nil {
				continue
			}
			if err := f.Acquire(ctx); err != nil {
				release()
				return nil, err
			}
			taken = append(taken, f)
		}
		if m.gate.Open() {
			return release, nil
		}
		release()
		if err := m.gate.Wait(ctx); err != nil {
			return nil, err
		}
	}
}

// reservation is a call's place in its model's limiter and, for a model
// calling through a shared endpoint, in the endpoint's (or the pacer's).
type reservation []ratelimit.Paced

// wait waits for every limiter; if ctx ends first, all are given back.
func (r reservation) wait(ctx context.Context) error {
	for _, x := range r {
		if err := x.Wait(ctx); err != nil {
			r.cancel()
			return err
		}
	}
	return nil
}

func (r reservation) cancel() {
	for _, x := range r {
		x.Cancel()
	}
}

// Settle replaces the estimates with what the call actually cost.
func (r reservation) Settle(c ratelimit.Cost) {
	for _, x := range r {
		x.Settle(c)
	}
}
