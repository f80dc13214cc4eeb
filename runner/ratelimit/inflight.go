package ratelimit

import (
	"context"
	"sync"
)

// InFlight bounds the calls in flight at once to a declared maximum (a
// ModelEndpoint's maxInFlight, or a shard's share of it), which may change
// while calls wait; 0 means no bound. Places are granted in order. Lowering
// the maximum stops new calls until those in flight are within it (Settled).
type InFlight struct {
	mu      sync.Mutex
	max     int64
	inUse   int64
	waiters []chan struct{}
}

// NewInFlight returns a bound of n calls in flight (0: none).
func NewInFlight(n int64) *InFlight { return &InFlight{max: n} }

// SetMax changes the bound to n (0: none).
func (f *InFlight) SetMax(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.max = n
	f.wake()
}

// Acquire waits for a place.
func (f *InFlight) Acquire(ctx context.Context) error {
	f.mu.Lock()
	if f.free() && len(f.waiters) == 0 {
		f.inUse++
		f.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	f.waiters = append(f.waiters, ch)
	f.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, c := range f.waiters {
			if c == ch {
				f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
				return ctx.Err()
			}
		}
		// Granted while we were giving up: hand the place on.
		f.inUse--
		f.wake()
		return ctx.Err()
	}
}

// Release frees a place.
func (f *InFlight) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inUse--
	f.wake()
}

// Settled reports whether the calls in flight are within the bound: a
// lowered bound is in force only once they are.
func (f *InFlight) Settled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max == 0 || f.inUse <= f.max
}

// InUse is the number of places taken.
func (f *InFlight) InUse() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inUse
}

func (f *InFlight) free() bool { return f.max == 0 || f.inUse < f.max }

func (f *InFlight) wake() {
	for len(f.waiters) > 0 && f.free() {
		ch := f.waiters[0]
		f.waiters = f.waiters[1:]
		f.inUse++
		close(ch)
	}
}
