package estimate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/spend"
)

// counter counts a request's prompt as its length, through countFn.
type counter struct {
	countFn func(n int64) (int64, error)
	calls   atomic.Int64
}

func (c *counter) Complete(context.Context, *provider.Request) (*provider.Response, error) {
	return nil, errors.New("an estimate must not call the model")
}

func (c *counter) CountTokens(_ context.Context, r *provider.Request) (int64, error) {
	c.calls.Add(1)
	return c.countFn(int64(len(r.Messages[0].Content)))
}

func testPlan(t *testing.T, p provider.Provider, n int) *runner.Plan {
	t.Helper()
	prompt, err := runner.NewPrompt("", "{{ .Input }}")
	if err != nil {
		t.Fatal(err)
	}
	items := make([]json.RawMessage, n)
	for i := range items {
		items[i] = json.RawMessage(fmt.Sprintf(`{"id":"s%d","input":"question %03d"}`, i, i))
	}
	price, _ := spend.NewPrice(spend.PerMillion{Input: "1", Output: "2"})
	return &runner.Plan{
		Prompt: prompt,
		Retry:  retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: time.Millisecond},
		Models: []*runner.Model{{Name: "m", Provider: p, Concurrency: 3, MaxTokens: 10, Price: price}},
		Datasets: []*runner.Dataset{{Name: "d", Total: n, Open: func() (dataset.Reader, io.Closer, error) {
			return dataset.Inline(items, dataset.Mapping{}), io.NopCloser(nil), nil
		}}},
	}
}

func TestCounts(t *testing.T) {
	noSleep := Options{Sleep: func(context.Context, time.Duration) error { return nil }}
	var throttled atomic.Int64
	tests := []struct {
		name      string
		count     func(n int64) (int64, error)
		wantIn    int64
		wantExact bool
		wantErr   string
	}{
		{name: "counted", count: func(n int64) (int64, error) { return n, nil }, wantIn: 20 * 12, wantExact: true},
		{name: "429s are waited out", count: func(n int64) (int64, error) {
			if throttled.Add(1)%3 == 0 {
				return 0, &provider.HTTPError{StatusCode: 429}
			}
			return n, nil
		}, wantIn: 20 * 12, wantExact: true},
		{name: "no counting endpoint: from the length", count: func(int64) (int64, error) {
			return 0, &provider.HTTPError{StatusCode: 404, Message: "not found"}
		}, wantIn: 20 * 8, wantExact: false}, // (12 characters + 16 for the message) / 4, plus 1
		{name: "a bad key fails the estimate", count: func(int64) (int64, error) {
			return 0, &provider.HTTPError{StatusCode: 401, Message: "invalid key"}
		}, wantErr: "model m: counting input tokens: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &counter{countFn: tt.count}
			rows, err := Run(context.Background(), testPlan(t, c, 20), noSleep)
			if tt.wantErr != "" {
				if err == nil || len(err.Error()) < len(tt.wantErr) || err.Error()[:len(tt.wantErr)] != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := rows[0]
			if r.InputTokens != tt.wantIn || r.Exact != tt.wantExact || r.Calls != 20 || r.OutputTokens != 200 {
				t.Errorf("row %+v, want %d input tokens (exact %v), 20 calls, 200 output tokens", r, tt.wantIn, tt.wantExact)
			}
			if r.Cost == nil || *r.Cost != spend.Amount(tt.wantIn*1_000_000+200*2_000_000) || *r.BatchCost*2 != *r.Cost {
				t.Errorf("costs %v %v", r.Cost, r.BatchCost)
			}
		})
	}
}

// blackHole is a counting endpoint that never answers: it waits until the
// request is given up on, as an HTTP call does.
type blackHole struct{ calls atomic.Int64 }

func (*blackHole) Complete(context.Context, *provider.Request) (*provider.Response, error) {
	return nil, errors.New("an estimate must not call the model")
}

func (b *blackHole) CountTokens(ctx context.Context, _ *provider.Request) (int64, error) {
	b.calls.Add(1)
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestCountsHaveADeadline: a server that never answers fails the estimate
// after the call timeout and its retries, naming it, instead of hanging.
func TestCountsHaveADeadline(t *testing.T) {
	b := &blackHole{}
	plan := testPlan(t, b, 5)
	plan.Timeout = 50 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), plan, Options{Sleep: func(context.Context, time.Duration) error { return nil }})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no answer within 50ms (the call timeout)") {
			t.Fatalf("error %v; want one naming the timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the estimate still waits for a server that never answers")
	}
	if got := b.calls.Load(); got > 3*3+3 {
		t.Errorf("%d counts; want at most maxAttempts (3) for each of the 3 in flight, and one more each", got)
	}
}
