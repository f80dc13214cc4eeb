package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

func TestBackoff(t *testing.T) {
	p := Policy{MaxAttempts: 5, Initial: time.Second, Max: 10 * time.Second}
	cases := []struct {
		attempt    int
		u          float64
		retryAfter time.Duration
		want       time.Duration
	}{
		{attempt: 1, u: 0, want: 0},
		{attempt: 1, u: 0.5, want: 500 * time.Millisecond},
		{attempt: 2, u: 0.5, want: time.Second},
		{attempt: 3, u: 0.5, want: 2 * time.Second},
		{attempt: 4, u: 0.999, want: 7992 * time.Millisecond},
		{attempt: 5, u: 0.5, want: 5 * time.Second},  // capped at Max=10s
		{attempt: 60, u: 0.5, want: 5 * time.Second}, // no overflow
		{attempt: 1, u: 0.5, retryAfter: 3 * time.Second, want: 3 * time.Second},
		{attempt: 4, u: 0.9, retryAfter: time.Second, want: 7200 * time.Millisecond},
		{attempt: 1, u: 0, retryAfter: 90 * time.Second, want: 90 * time.Second}, // honoured past Max
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("attempt%d_u%v_ra%v", tc.attempt, tc.u, tc.retryAfter), func(t *testing.T) {
			if got := p.Backoff(tc.attempt, tc.u, tc.retryAfter); got != tc.want {
				t.Errorf("Backoff = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBackoffFullJitterSpread(t *testing.T) {
	// Full jitter: sleeps spread over the whole [0, ceiling) range.
	p := Policy{Initial: time.Second, Max: time.Minute}
	lo, hi := time.Hour, time.Duration(0)
	for i := range 1000 {
		d := p.Backoff(3, float64(i)/1000, 0)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo != 0 || hi < 3990*time.Millisecond || hi >= 4*time.Second {
		t.Errorf("attempt 3 sleeps span [%v, %v], want [0, 4s)", lo, hi)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		want       Class
		retryAfter time.Duration
	}{
		{"429", &provider.HTTPError{StatusCode: 429, RetryAfter: 2 * time.Second}, Throttled, 2 * time.Second},
		{"429 out of quota", &provider.HTTPError{StatusCode: 429, Code: "insufficient_quota"}, Final, 0},
		{"408", &provider.HTTPError{StatusCode: 408}, Transient, 0},
		{"500", &provider.HTTPError{StatusCode: 500}, Transient, 0},
		{"503 with retry-after", &provider.HTTPError{StatusCode: 503, RetryAfter: time.Second}, Transient, time.Second},
		{"529 overloaded", &provider.HTTPError{StatusCode: 529}, Transient, 0},
		{"400", &provider.HTTPError{StatusCode: 400}, Final, 0},
		{"401", &provider.HTTPError{StatusCode: 401}, Final, 0},
		{"404", &provider.HTTPError{StatusCode: 404}, Final, 0},
		{"wrapped 500", fmt.Errorf("call: %w", &provider.HTTPError{StatusCode: 502}), Transient, 0},
		{"attempt timeout", fmt.Errorf("call: %w", context.DeadlineExceeded), Transient, 0},
		{"cancelled", context.Canceled, Final, 0},
		{"connection refused", &url.Error{Op: "Post", URL: "http://x", Err: syscall.ECONNREFUSED}, Transient, 0},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), Transient, 0},
		{"dropped mid-answer", io.ErrUnexpectedEOF, Transient, 0},
		{"agent exit", &provider.ExitError{ExitCode: 1}, Final, 0},
		{"answer past the cap", fmt.Errorf("decoding response: %w", provider.ErrResponseTooLarge), Final, 0},
		{"other", errors.New("template: missing key"), Final, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ra := Classify(tc.err)
			if got != tc.want || ra != tc.retryAfter {
				t.Errorf("Classify(%v) = %v, %v; want %v, %v", tc.err, got, ra, tc.want, tc.retryAfter)
			}
		})
	}
}
