package cli

import (
	"sync"
	"time"
)

// paceWindow is how far back a model's pace is measured.
const paceWindow = time.Minute

// pace estimates how fast a model finishes samples, for its ETA: over the
// last minute, not since the start (the first samples, as many as its
// concurrency, finish together and would make the run look faster than its
// limits let it go), and never faster than its declared request limit.
type pace struct {
	mu      sync.Mutex
	started time.Time
	// limit is the samples a second its declared requests limit allows
	// (a sample is a call); 0 when it declares none.
	limit float64
	// counts holds completions per second of the window, by Unix second.
	counts map[int64]int64
}

func newPace(started time.Time, limit float64) *pace {
	return &pace{started: started, limit: limit, counts: map[int64]int64{}}
}

// add counts a sample finished at t.
func (p *pace) add(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[t.Unix()]++
	for s := range p.counts {
		if s <= t.Add(-paceWindow).Unix() {
			delete(p.counts, s)
		}
	}
}

// rate is the samples a second at now; 0 when nothing is known yet.
func (p *pace) rate(now time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	from := now.Add(-paceWindow)
	if p.started.After(from) {
		from = p.started
	}
	window := now.Sub(from).Seconds()
	if window < 1 {
		return 0
	}
	var n int64
	for s, c := range p.counts {
		if s >= from.Unix() && s <= now.Unix() {
			n += c
		}
	}
	r := float64(n) / window
	if p.limit > 0 && (r > p.limit || r == 0) {
		r = p.limit
	}
	return r
}
