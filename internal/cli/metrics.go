package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/proctor-dev/proctor/runner/telemetry"
)

// finalScrapeWait bounds how long a runner that is done waits for its
// metrics to be read once more (Metrics.AwaitScrape).
const finalScrapeWait = 30 * time.Second

// serveMetrics serves a runner's metrics at addr (http://ADDR/metrics)
// until stop is called, which first waits (when something reads them) for
// one more read, so that the last counts are not lost with the process. The
// metrics hold no secret and no sample: names of models, datasets and
// endpoints, and counts.
func serveMetrics(addr string) (m *telemetry.Metrics, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, invalid(fmt.Errorf("--metrics-addr: %w", err))
	}
	m = telemetry.New()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return m, func() {
		m.AwaitScrape(context.Background(), finalScrapeWait)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
