package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestInFlightBoundsTheCallsInFlight: however many callers, never more than
// the bound at once; a raised bound lets waiters in at once; a lowered one
// lets none in until those over it have ended (Settled).
func TestInFlightBoundsTheCallsInFlight(t *testing.T) {
	f := NewInFlight(3)
	var cur, peak atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := f.Acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			cur.Add(-1)
			f.Release()
		})
	}
	wg.Wait()
	if peak.Load() != 3 {
		t.Errorf("peak in flight %d, want 3", peak.Load())
	}

	for range 3 {
		_ = f.Acquire(context.Background())
	}
	f.SetMax(1)
	if f.Settled() {
		t.Error("Settled with 3 in flight under a bound of 1")
	}
	got := make(chan struct{})
	go func() {
		_ = f.Acquire(context.Background())
		close(got)
	}()
	f.Release()
	f.Release()
	if !f.Settled() {
		t.Error("not Settled with 1 in flight under a bound of 1")
	}
	select {
	case <-got:
		t.Fatal("a place was granted while 1 was in flight under a bound of 1")
	case <-time.After(20 * time.Millisecond):
	}
	f.SetMax(2)
	<-got // the raised bound lets the waiter in
	if f.InUse() != 2 {
		t.Errorf("InUse = %d, want 2", f.InUse())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Acquire(ctx); err == nil {
		t.Error("Acquire with a full bound and a done context succeeded")
	}
	f.SetMax(0) // no bound
	if err := f.Acquire(context.Background()); err != nil || f.InUse() != 3 {
		t.Errorf("without a bound: %v, InUse %d", err, f.InUse())
	}
}
