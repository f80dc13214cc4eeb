package telemetry

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// A runner pod often lives less than a scrape interval past its last
// request: what it counted since the last scrape would end with it. So the
// metrics note when they are read, and a runner that is done waits for one
// more read (AwaitScrape) before it exits, when something reads them.

// scrapeLog is when the metrics were read.
type scrapeLog struct {
	mu sync.Mutex
	// started counts the reads begun, finished the highest of them ended.
	started, finished uint64
	lastStart         time.Time
	// interval is the time between the last two reads begun.
	interval time.Duration
	// ended is closed (and replaced) as each read ends.
	ended chan struct{}
}

func (l *scrapeLog) begin(now time.Time) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started++
	if !l.lastStart.IsZero() {
		l.interval = now.Sub(l.lastStart)
	}
	l.lastStart = now
	return l.started
}

func (l *scrapeLog) end(n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finished = max(l.finished, n)
	if l.ended != nil {
		close(l.ended)
	}
	l.ended = make(chan struct{})
}

// observed wraps h, noting each read.
func (l *scrapeLog) observed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := l.begin(time.Now())
		h.ServeHTTP(w, r)
		l.end(n)
	})
}

// finalReads is how many reads begun after a runner is done it waits for.
const finalReads = 2

// AwaitScrape waits until the metrics are read twice more, each from start
// to end, so that the last counts reach the scraper: a read the scraper
// gave up on (its timeout is at most its interval, and a loaded node or
// the API server's proxy can take longer) still ends here, and the next
// one carries them again. It waits at most two and a half of the
// intervals seen between reads, and never more than most; it returns at
// once when nothing has read them, and reports whether the reads came.
func (m *Metrics) AwaitScrape(ctx context.Context, most time.Duration) bool {
	if m == nil {
		return false
	}
	l := &m.scrapes
	l.mu.Lock()
	if l.started == 0 {
		l.mu.Unlock()
		return false
	}
	target := l.started + finalReads
	wait := most
	if l.interval > 0 {
		wait = min(most, l.interval*(2*finalReads+1)/2)
	}
	l.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		l.mu.Lock()
		if l.finished >= target {
			l.mu.Unlock()
			return true
		}
		if l.ended == nil {
			l.ended = make(chan struct{})
		}
		ended := l.ended
		l.mu.Unlock()
		select {
		case <-ended:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
