package cli

import (
	"testing"
	"time"
)

// TestETAUnderARateLimit is the case: a model limited to 10
// requests a minute whose first samples finished together. The average
// since the start said 1m50s with 11 minutes left; the pace of the last
// minute, bounded by the limit, says what is left: each remaining sample
// takes 6 s, and a later dataset of the model waits for the earlier one.
func TestETAUnderARateLimit(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	p := &progress{started: t0, paces: map[string]*pace{"m": newPace(t0, 10.0/60)}}
	first := &pairProgress{model: "m", total: 120}
	second := &pairProgress{model: "m", total: 10}
	p.pairs = []*pairProgress{first, second}
	// Ten at once (the concurrency), then one every 6 s.
	for range 10 {
		p.paces["m"].add(t0.Add(time.Second))
	}
	for i := range 10 {
		p.paces["m"].add(t0.Add(time.Duration(7+6*i) * time.Second))
	}
	first.done.Store(20)
	now := t0.Add(61 * time.Second)
	if got, ok := p.eta(first, now); !ok || got != 600*time.Second {
		t.Errorf("ETA of the first dataset = %v (%v), want 10m0s: 100 samples at 6 s each", got, ok)
	}
	if got, ok := p.eta(second, now); !ok || got != 660*time.Second {
		t.Errorf("ETA of the second dataset = %v (%v), want 11m0s: after the first's 100", got, ok)
	}
}

// TestPaceForgetsTheStart: without a declared limit, the pace is the last
// minute's, so the first samples finishing together stop counting.
func TestPaceForgetsTheStart(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	pc := newPace(t0, 0)
	for range 50 {
		pc.add(t0.Add(time.Second))
	}
	for i := range 60 {
		pc.add(t0.Add(time.Duration(2+2*i) * time.Second)) // one every 2 s
	}
	if got := pc.rate(t0.Add(121 * time.Second)); got < 0.49 || got > 0.51 {
		t.Errorf("rate = %v a second, want 0.5 (the last minute's)", got)
	}
	if got := newPace(t0, 0).rate(t0.Add(10 * time.Second)); got != 0 {
		t.Errorf("rate of nothing finished = %v, want 0 (no ETA)", got)
	}
}
