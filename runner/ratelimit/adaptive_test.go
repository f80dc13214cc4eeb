package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestWindowShrinksOnThrottlingAndRegrows(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	w := NewWindow(16, time.Second, clock)
	w.Throttled()
	if got := w.Limit(); got != 8 {
		t.Fatalf("after a 429: %d, want 8", got)
	}
	w.Throttled() // within the cooldown: the same burst of 429s
	if got := w.Limit(); got != 8 {
		t.Fatalf("after a second 429 within the cooldown: %d, want 8", got)
	}
	clock.Advance(time.Second)
	w.Throttled()
	if got := w.Limit(); got != 4 {
		t.Fatalf("after a later 429: %d, want 4", got)
	}
	for range 4 * 3 { // a window's worth of successes grows it by one
		w.Succeeded()
	}
	if got := w.Limit(); got < 6 || got > 7 {
		t.Errorf("after 12 successes from 4: %d, want about 6-7", got)
	}
	for range 1000 {
		w.Succeeded()
	}
	if got := w.Limit(); got != 16 {
		t.Errorf("regrown to %d, want the maximum 16", got)
	}
	for range 10 {
		clock.Advance(time.Second)
		w.Throttled()
	}
	if got := w.Limit(); got != 1 {
		t.Errorf("never below 1: got %d", got)
	}
}

func TestWindowBoundsInFlight(t *testing.T) {
	w := NewWindow(2, time.Second, clockwork.NewFakeClock())
	ctx := context.Background()
	for range 2 {
		if err := w.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := w.Acquire(short); err == nil {
		t.Fatal("a third Acquire succeeded with a window of 2")
	}
	got := make(chan error, 1)
	go func() { got <- w.Acquire(ctx) }()
	w.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("Release did not hand the place to the waiter")
	}
}

func TestGateHoldsUntilRetryAfter(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	g := NewGate(clock)
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.CloseUntil(epoch.Add(5 * time.Second))
	g.CloseUntil(epoch.Add(2 * time.Second)) // never shortens
	done := make(chan error, 1)
	go func() { done <- g.Wait(context.Background()) }()
	if err := clock.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("gate opened before its time (Wait: %v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	clock.Advance(2 * time.Second)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("gate did not open at its time")
	}
}

func TestGateHold(t *testing.T) {
	g := NewGate(clockwork.NewFakeClock())
	g.Hold(true)
	done := make(chan error, 1)
	go func() { done <- g.Wait(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("a held gate let a call through (Wait: %v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.Hold(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("releasing the gate did not let the call through")
	}
}
