package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/retry"
)

// TestRetryStage checks what each kind of failed attempt comes to: the
// backoff before the next (policy: 3 attempts, 100ms doubling to 400ms; the
// jitter draws 0.5, so half of that) or the call's final error.
func TestRetryStage(t *testing.T) {
	http := func(status int, retryAfter time.Duration) error {
		return &provider.HTTPError{StatusCode: status, Message: "m", RetryAfter: retryAfter}
	}
	for _, tt := range []struct {
		name  string
		tries retries // before the failure
		err   error
		// wantWait, or else wantFinal (a substring of the final error).
		wantWait      time.Duration
		wantFinal     string
		wantTries     retries
		wantGateShut  bool
		wantThrottled bool
	}{
		{name: "a 500 is retried", tries: retries{attempts: 1}, err: http(500, 0),
			wantWait: 50 * time.Millisecond, wantTries: retries{attempts: 1, failures: 1}},
		{name: "the second 500 waits longer", tries: retries{attempts: 2, failures: 1}, err: http(503, 0),
			wantWait: 100 * time.Millisecond, wantTries: retries{attempts: 2, failures: 2}},
		{name: "maxAttempts ends it", tries: retries{attempts: 3, failures: 2}, err: http(500, 0),
			wantFinal: "HTTP 500: m (gave up after 3 attempts)", wantTries: retries{attempts: 3, failures: 3}},
		{name: "a 400 is final", tries: retries{attempts: 1}, err: http(400, 0),
			wantFinal: "HTTP 400", wantTries: retries{attempts: 1}},
		{name: "a timeout is retried and said as one", tries: retries{attempts: 3, failures: 2}, err: context.DeadlineExceeded,
			wantFinal: "timed out after 5s (gave up after 3 attempts)", wantTries: retries{attempts: 3, failures: 3}},
		{name: "a 429 is retried without counting against maxAttempts", tries: retries{attempts: 5, failures: 2}, err: http(429, 0),
			wantWait: 50 * time.Millisecond, wantTries: retries{attempts: 5, failures: 2, throttles: 1}, wantThrottled: true},
		{name: "a 429's retry-after is waited, uncapped, and shuts the gate", tries: retries{attempts: 1}, err: http(429, 2*time.Second),
			wantWait: 2 * time.Second, wantTries: retries{attempts: 1, throttles: 1}, wantGateShut: true, wantThrottled: true},
		{name: "an endpoint that is gone ends it", tries: retries{attempts: 1}, err: &provider.UnavailableError{Err: errors.New("executor gone")},
			wantFinal: "provider unavailable: executor gone", wantTries: retries{attempts: 1}},
		{name: "running out of files is this machine's, not the model's", tries: retries{attempts: 1}, err: fmt.Errorf("dial: %w", syscall.EMFILE),
			wantFinal: "too many open files", wantTries: retries{attempts: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{Clock: clock}, nil)
			tries := tt.tries
			wait, final := e.afterFailure(m, &provider.Request{SampleID: "s"}, &tries, nil, tt.err, 5*time.Second)
			switch {
			case tt.wantFinal == "" && final != nil:
				t.Fatalf("final error %v, want a wait of %v", final, tt.wantWait)
			case tt.wantFinal == "" && wait != tt.wantWait:
				t.Errorf("wait %v, want %v", wait, tt.wantWait)
			case tt.wantFinal != "" && (final == nil || !strings.Contains(final.Error(), tt.wantFinal)):
				t.Errorf("final error %v (wait %v), want one containing %q", final, wait, tt.wantFinal)
			}
			if tries != tt.wantTries {
				t.Errorf("tries %+v, want %+v", tries, tt.wantTries)
			}
			if shut := !m.gate.Open(); shut != tt.wantGateShut {
				t.Errorf("gate shut %v, want %v", shut, tt.wantGateShut)
			}
			if throttled := m.throttle.snapshot().Throttled(); throttled != tt.wantThrottled {
				t.Errorf("throttled %v, want %v", throttled, tt.wantThrottled)
			}
			var local *LocalExhaustedError
			if errors.Is(tt.err, syscall.EMFILE) && !errors.As(final, &local) {
				t.Errorf("final error %T, want a *LocalExhaustedError", final)
			}
		})
	}
}

// TestRetryStageGivesUpOnAQuotaThatNeverRecovers checks that 429s are
// retried no later than the model's throttle budget ends (15s here; backoff
// 10s doubling, the jitter drawing 0.9), and then end the call with a
// *ThrottledOutError.
func TestRetryStageGivesUpOnAQuotaThatNeverRecovers(t *testing.T) {
	clock := clockwork.NewFakeClock()
	e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{Clock: clock, Rand: func() float64 { return 0.9 }}, func(p *Plan) {
		p.Retry = retry.Policy{MaxAttempts: 3, Initial: 10 * time.Second, Max: 40 * time.Second, MaxThrottleWait: 15 * time.Second}
	})
	refused := &provider.HTTPError{StatusCode: 429}
	var tries retries
	wait, final := e.afterFailure(m, &provider.Request{}, &tries, nil, refused, time.Second)
	if final != nil || wait != 9*time.Second {
		t.Fatalf("the first 429: wait %v, error %v; want 9s", wait, final)
	}
	clock.Advance(9 * time.Second)
	// The backoff would be 18s; 6s of the budget are left.
	if wait, final = e.afterFailure(m, &provider.Request{}, &tries, nil, refused, time.Second); final != nil || wait != 6*time.Second {
		t.Fatalf("the second 429: wait %v, error %v; want the budget's 6s left", wait, final)
	}
	clock.Advance(6 * time.Second)
	_, final = e.afterFailure(m, &provider.Request{}, &tries, nil, refused, time.Second)
	var out *ThrottledOutError
	if !errors.As(final, &out) {
		t.Fatalf("after the budget: %v, want a *ThrottledOutError", final)
	}
	// A 429 whose retry-after outlasts the budget gives up at once.
	e, m = stageEngine(t, &fakeProvider{fn: echo}, Options{Clock: clock}, nil)
	if _, final = e.afterFailure(m, &provider.Request{}, &retries{}, nil, &provider.HTTPError{StatusCode: 429, RetryAfter: 2 * time.Minute}, time.Second); !errors.As(final, &out) {
		t.Errorf("a retry-after past the budget: %v, want a *ThrottledOutError", final)
	}
}
