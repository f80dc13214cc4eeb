// Package providertest is the conformance suite every HTTP provider's tests
// run: what Proctor relies on from any provider, whatever its API. A provider's
// own tests keep what is particular to its API (request and response bodies,
// error mapping); a new provider passes this suite by describing itself in a
// Harness.
package providertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Harness describes a provider under test.
type Harness struct {
	// New makes the provider, talking to the API at baseURL with key ("" for none).
	New func(baseURL, key string) (provider.Provider, error)
	// Key is an API key of the provider's form.
	Key string
	// KeyHeader is the request header the key travels in (the suite echoes it
	// back in error bodies).
	KeyHeader string
	// OK is a successful answer's body.
	OK string
	// Errors are error answers that must be retried without leaving the
	// connection (status: body), e.g. a 429 and a 5xx.
	Errors map[int]string
	// KeyEchoes are error bodies (status: format) in which the server quotes
	// what it received as the key (%s); errors must not show it.
	KeyEchoes map[int][]string
	// PartialBody is the start of a successful body, cut off by the server.
	PartialBody string
	// Request is a typical request.
	Request *provider.Request
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("KeyNeverInErrors", func(t *testing.T) { keyNeverInErrors(t, h) })
	t.Run("ContextCancellation", func(t *testing.T) { contextCancellation(t, h) })
	t.Run("DroppedConnection", func(t *testing.T) { droppedConnection(t, h) })
	t.Run("ConnectionReuse", func(t *testing.T) { connectionReuse(t, h) })
	t.Run("ConcurrentUse", func(t *testing.T) { concurrentUse(t, h) })
}

func newProvider(t *testing.T, h Harness, url, key string) provider.Provider {
	t.Helper()
	p, err := h.New(url, key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// keyNeverInErrors: a server quoting the key back (in a JSON message, a JSON
// code, a raw body, past the cut of a long raw body) never gets it into an error.
func keyNeverInErrors(t *testing.T, h Harness) {
	for status, formats := range h.KeyEchoes {
		for i, format := range formats {
			t.Run(fmt.Sprintf("%d-%d", status, i), func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(status)
					fmt.Fprintf(w, format, r.Header.Get(h.KeyHeader))
				}))
				defer srv.Close()
				_, err := newProvider(t, h, srv.URL, h.Key).Complete(context.Background(), h.Request)
				if err == nil {
					t.Fatal("got nil error")
				}
				if strings.Contains(err.Error(), h.Key[:10]) {
					t.Errorf("error %q contains the API key", err)
				}
				if !strings.Contains(err.Error(), "[RE") {
					t.Errorf("error %q does not show the redaction", err)
				}
			})
		}
	}
}

// contextCancellation: a deadline or a cancel ends a call the server sits on,
// with the context's error.
func contextCancellation(t *testing.T, h Harness) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	p := newProvider(t, h, srv.URL, "")
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(30*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			if _, err := p.Complete(ctx, h.Request); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want errors.Is(err, %v)", err, tt.want)
			}
		})
	}
}

// droppedConnection: a server going away before or in the middle of its answer
// is a transport error (retried as such), not an HTTP one.
func droppedConnection(t *testing.T, h Harness) {
	tests := []struct {
		name    string
		partial string // raw bytes written before closing
	}{
		{name: "before the answer"},
		{name: "mid-body", partial: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + h.PartialBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				writeAndClose(conn, buf, tt.partial)
			}))
			defer srv.Close()
			_, err := newProvider(t, h, srv.URL, "").Complete(context.Background(), h.Request)
			if err == nil {
				t.Fatal("got nil error")
			}
			if _, ok := provider.AsHTTPError(err); ok {
				t.Errorf("err = %v is an *HTTPError, want a transport error", err)
			}
		})
	}
}

func writeAndClose(conn net.Conn, buf *bufio.ReadWriter, s string) {
	if s != "" {
		_, _ = buf.WriteString(s) // the connection is closed next anyway
		_ = buf.Flush()
	}
	_ = conn.Close()
}

// connectionReuse: sequential calls share one connection, after successes and
// after error answers alike (their bodies are read to the end).
func connectionReuse(t *testing.T, h Harness) {
	answers := map[int]string{http.StatusOK: h.OK}
	for status, body := range h.Errors {
		answers[status] = body
	}
	for status, body := range answers {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body) // a handler cannot help a client that went away
			}))
			var conns atomic.Int32
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			p := newProvider(t, h, srv.URL, h.Key)
			for range 50 {
				if _, err := p.Complete(context.Background(), h.Request); (err == nil) != (status == http.StatusOK) {
					t.Fatalf("err = %v", err)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("opened %d connections for 50 sequential calls, want 1", n)
			}
		})
	}
}

// concurrentUse: one provider serves many goroutines at once (run with -race).
func concurrentUse(t *testing.T, h Harness) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, h.OK) // a handler cannot help a client that went away
	}))
	defer srv.Close()
	p := newProvider(t, h, srv.URL, h.Key)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if _, err := p.Complete(context.Background(), h.Request); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
