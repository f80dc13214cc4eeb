package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestAwaitScrape: a runner that is done waits for two more reads of its
// metrics begun after it asked, not one already under way (the first of
// them may be one the scraper gave up on); it does not wait when nothing
// reads them, nor much longer than the reads' interval when the reader
// went away.
func TestAwaitScrape(t *testing.T) {
	m := New()
	if m.AwaitScrape(context.Background(), time.Minute) {
		t.Fatal("a read was awaited although nothing ever read the metrics")
	}
	var slow atomic.Bool
	release := make(chan struct{})
	inner := promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
	// The read is noted from its start: one held here is under way.
	srv := httptest.NewServer(m.scrapes.observed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			<-release
		}
		inner.ServeHTTP(w, r)
	})))
	defer srv.Close()
	get := func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	}
	get()
	time.Sleep(200 * time.Millisecond)
	get() // reads 200 ms apart

	// The reader went away: the wait ends after about 2.5 intervals.
	start := time.Now()
	if m.AwaitScrape(context.Background(), time.Minute) {
		t.Fatal("a read came although none was made")
	}
	if took := time.Since(start); took < 450*time.Millisecond || took > 10*time.Second {
		t.Errorf("waited %v for a reader that went away, want about 500 ms", took)
	}

	// A read under way when the runner is done does not count (it may
	// have gathered before the last counts); the next one does.
	slow.Store(true)
	under := make(chan struct{})
	go func() { get(); close(under) }()
	time.Sleep(50 * time.Millisecond)
	done := make(chan bool)
	go func() { done <- m.AwaitScrape(context.Background(), time.Minute) }()
	time.Sleep(20 * time.Millisecond)
	slow.Store(false)
	close(release)
	<-under
	select {
	case <-done:
		t.Fatal("the read under way when the runner was done ended its wait")
	case <-time.After(30 * time.Millisecond):
	}
	get()
	select {
	case <-done:
		t.Fatal("one read after the runner was done ended its wait: the scraper may have given up on it")
	case <-time.After(30 * time.Millisecond):
	}
	get()
	if !<-done {
		t.Error("the second read did not end the wait")
	}
}
