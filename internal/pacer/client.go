package pacer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// URL is the pacer's (cluster.EnvPacerURL).
	URL string
	// Namespace and Evaluation are the runner pod's.
	Namespace, Evaluation string
	// Token returns the bearer token to present (the projected token of
	// audience cluster.PacerAudience); FileToken reads one.
	Token func() (string, error)
	// HTTP is the client to use; nil makes one speaking HTTP/2 without TLS.
	HTTP  *http.Client
	Clock clockwork.Clock
	Log   logr.Logger
	// Timeout bounds one request to the pacer (default 2s).
	Timeout time.Duration
	// Backoff is how long the pod paces on its own after the pacer failed to
	// answer, before asking it again (default 5s).
	Backoff time.Duration
}

// Client is a runner pod's side of the pacer: a ratelimit.Pacer. A call the
// pacer cannot place (it is unreachable, or refuses) goes at the pod's own
// pace, and is counted (Unpaced).
type Client struct {
	o ClientOptions

	mu        sync.Mutex
	downUntil time.Time
	lastLog   time.Time
	pending   []cluster.SettledCall
	kick      chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	done      chan struct{}

	unpaced atomic.Int64
	paced   atomic.Int64
}

// NewClient returns a client; Close it to send the last settlements.
func NewClient(o ClientOptions) *Client {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Backoff == 0 {
		o.Backoff = 5 * time.Second
	}
	if o.HTTP == nil {
		var protocols http.Protocols
		protocols.SetUnencryptedHTTP2(true)
		o.HTTP = &http.Client{Transport: &http.Transport{Protocols: &protocols, ForceAttemptHTTP2: true}}
	}
	o.URL = strings.TrimSuffix(o.URL, "/")
	c := &Client{o: o, kick: make(chan struct{}, 1), closed: make(chan struct{}), done: make(chan struct{})}
	go c.sendSettlements()
	return c
}

// FileToken reads a projected token file, again once a minute (the kubelet
// refreshes it before it expires).
func FileToken(path string) func() (string, error) {
	var mu sync.Mutex
	var token string
	var read time.Time
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if token != "" && time.Since(read) < time.Minute {
			return token, nil
		}
		b, err := os.ReadFile(filepath.Clean(path))
		if err != nil {
			return "", fmt.Errorf("reading the pacer's token: %w", err)
		}
		token, read = strings.TrimSpace(string(b)), time.Now()
		return token, nil
	}
}

// Unpaced counts the calls that went without the pacer; Paced those it placed.
func (c *Client) Unpaced() int64 { return c.unpaced.Load() }

// Paced counts the calls the pacer placed.
func (c *Client) Paced() int64 { return c.paced.Load() }

// Pace asks the pacer for a place for a call of caller. It waits while the
// pacer says to ask again later; it fails only when ctx ends.
func (c *Client) Pace(ctx context.Context, caller string, cost ratelimit.Cost) (ratelimit.Paced, error) {
	for {
		if c.down() {
			c.unpaced.Add(1)
			return free{}, nil
		}
		resp, err := c.reserve(ctx, caller, cost)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			c.failed(err)
			c.unpaced.Add(1)
			return free{}, nil
		}
		received := c.o.Clock.Now()
		switch {
		case resp.ID != "":
			c.paced.Add(1)
			return &place{c: c, id: resp.ID, at: received.Add(time.Duration(resp.WaitNanos))}, nil
		case resp.RetryNanos > 0:
			if err := c.sleep(ctx, time.Duration(resp.RetryNanos)); err != nil {
				return nil, err
			}
		default:
			return free{}, nil // the key has no limit
		}
	}
}

func (c *Client) down() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.o.Clock.Now().Before(c.downUntil)
}

// failed notes that the pacer did not answer: the pod paces on its own for
// Backoff, and says so (once a minute at most).
func (c *Client) failed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.o.Clock.Now()
	c.downUntil = now.Add(c.o.Backoff)
	if now.Sub(c.lastLog) >= time.Minute {
		c.lastLog = now
		c.o.Log.Info("Pacing calls without the pacer: it did not answer", "error", err.Error(), "retryIn", c.o.Backoff.String())
	}
}

func (c *Client) reserve(ctx context.Context, caller string, cost ratelimit.Cost) (*cluster.PaceResponse, error) {
	body, err := json.Marshal(cluster.PaceRequest{Namespace: c.o.Namespace, Evaluation: c.o.Evaluation, Caller: caller, Cost: cost})
	if err != nil {
		return nil, err
	}
	var resp cluster.PaceResponse
	if err := c.post(ctx, cluster.PacerReservePath, body, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

func (c *Client) post(ctx context.Context, path string, body []byte, into any) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.o.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.o.Token != nil {
		token, err := c.o.Token()
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.o.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("pacer answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if into == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(into)
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := c.o.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settle queues a call's settlement; they go out in batches.
func (c *Client) settle(s cluster.SettledCall) {
	c.mu.Lock()
	c.pending = append(c.pending, s)
	n := len(c.pending)
	c.mu.Unlock()
	if n == 1 || n >= 256 {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// sendSettlements sends what is queued, a batch every 100ms at most, until
// Close.
func (c *Client) sendSettlements() {
	defer close(c.done)
	for {
		select {
		case <-c.kick:
		case <-c.closed:
			c.flush()
			return
		}
		c.flush()
		t := c.o.Clock.NewTimer(100 * time.Millisecond)
		select {
		case <-t.Chan():
		case <-c.closed:
		}
		t.Stop()
	}
}

func (c *Client) flush() {
	c.mu.Lock()
	calls := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(calls) == 0 {
		return
	}
	body, err := json.Marshal(cluster.PaceSettlement{Calls: calls})
	if err != nil {
		return
	}
	// A settlement lost only leaves the pacer's estimate in place for the
	// call (the bucket's debt of it lasts until it refilled).
	if err := c.post(context.Background(), cluster.PacerSettlePath, body, nil); err != nil {
		c.o.Log.V(1).Info("Failed to settle calls with the pacer", "calls", len(calls), "error", err.Error())
	}
}

// Close sends the settlements still queued.
func (c *Client) Close() {
	c.closeOnce.Do(func() { close(c.closed) })
	<-c.done
}

// place is a call's place with the pacer.
type place struct {
	c    *Client
	id   string
	at   time.Time
	once sync.Once
}

func (p *place) Wait(ctx context.Context) error {
	if err := p.c.sleep(ctx, p.at.Sub(p.c.o.Clock.Now())); err != nil {
		p.Cancel()
		return err
	}
	return ctx.Err()
}

func (p *place) Settle(actual ratelimit.Cost) {
	p.once.Do(func() { p.c.settle(cluster.SettledCall{ID: p.id, Cost: actual}) })
}

func (p *place) Cancel() {
	p.once.Do(func() { p.c.settle(cluster.SettledCall{ID: p.id, Cancel: true}) })
}

// free is a call that need not wait: its key has no limit, or the pacer
// could not be asked.
type free struct{}

func (free) Wait(ctx context.Context) error { return ctx.Err() }
func (free) Settle(ratelimit.Cost)          {}
func (free) Cancel()                        {}
