package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Window bounds the calls in flight to a model, and adapts when the server says it
// is overloaded: each throttling answer (429) halves the window, at most once per
// cooldown so that one burst of 429s counts once, and every window's worth of
// successes grows it by one again, up to its maximum (additive increase,
// multiplicative decrease). Without a declared limit this is how Proctor finds the
// rate a server accepts instead of failing samples.
type Window struct {
	clock    clockwork.Clock
	max      int
	cooldown time.Duration

	mu           sync.Mutex
	limit        float64
	inUse        int
	waiters      []chan struct{}
	lastDecrease time.Time
}

// NewWindow returns a window of at most size calls in flight.
func NewWindow(size int, cooldown time.Duration, clock clockwork.Clock) *Window {
	size = max(size, 1)
	return &Window{clock: clock, max: size, cooldown: cooldown, limit: float64(size)}
}

// Acquire waits for a free place.
func (w *Window) Acquire(ctx context.Context) error {
	w.mu.Lock()
	if w.inUse < int(w.limit) && len(w.waiters) == 0 {
		w.inUse++
		w.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	w.waiters = append(w.waiters, ch)
	w.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		for i, c := range w.waiters {
			if c == ch {
				w.waiters = append(w.waiters[:i], w.waiters[i+1:]...)
				return ctx.Err()
			}
		}
		// Granted while we were giving up: hand the place on.
		w.inUse--
		w.wake()
		return ctx.Err()
	}
}

// Release frees a place.
func (w *Window) Release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inUse--
	w.wake()
}

// wake grants places to waiters, in order, while the limit allows.
func (w *Window) wake() {
	for len(w.waiters) > 0 && w.inUse < int(w.limit) {
		ch := w.waiters[0]
		w.waiters = w.waiters[1:]
		w.inUse++
		close(ch)
	}
}

// Throttled records a 429: halve the window, unless it was halved within the cooldown.
func (w *Window) Throttled() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	if !w.lastDecrease.IsZero() && now.Sub(w.lastDecrease) < w.cooldown {
		return
	}
	w.lastDecrease = now
	w.limit = max(1, w.limit/2)
}

// Succeeded records a successful call: grow by one per window's worth of successes.
func (w *Window) Succeeded() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.limit >= float64(w.max) {
		return
	}
	w.limit = min(float64(w.max), w.limit+1/w.limit)
	w.wake()
}

// Limit is the current size of the window.
func (w *Window) Limit() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.limit)
}

// Gate holds back every call to a model until the time a server's retry-after
// names, or while it is held (a shard with no share of the budget yet).
type Gate struct {
	clock clockwork.Clock

	mu      sync.Mutex
	until   time.Time
	held    bool
	changed chan struct{} // closed and replaced whenever held changes
}

// NewGate returns an open gate.
func NewGate(clock clockwork.Clock) *Gate { return &Gate{clock: clock, changed: make(chan struct{})} }

// Hold closes the gate until Hold(false).
func (g *Gate) Hold(held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != held {
		g.held = held
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

// CloseUntil keeps the gate closed until t (or later, if already closed longer).
func (g *Gate) CloseUntil(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.After(g.until) {
		g.until = t
	}
}

// Open reports whether the gate is open now.
func (g *Gate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.held && !g.clock.Now().Before(g.until)
}

// Wait returns once the gate is open.
func (g *Gate) Wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		d := g.until.Sub(g.clock.Now())
		held, changed := g.held, g.changed
		g.mu.Unlock()
		if held {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if d <= 0 {
			return ctx.Err()
		}
		t := g.clock.NewTimer(d)
		select {
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
