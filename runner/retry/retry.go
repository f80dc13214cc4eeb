// Package retry decides whether a failed call is tried again, and after how long.
package retry

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Policy is exponential backoff with full jitter: before attempt k+1 the caller
// sleeps a uniformly random time in [0, min(Max, Initial·2^(k-1))), or longer if the
// server asked for longer with retry-after.
type Policy struct {
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
	// MaxThrottleWait is how long a model may answer only 429s before its
	// remaining calls give up; 429s never count against MaxAttempts.
	MaxThrottleWait time.Duration
}

// Backoff is the sleep after failed attempt number attempt (1-based). u is a
// uniform random number in [0, 1), injected so tests can pin it. retryAfter, when
// positive, is honoured as a minimum.
func (p Policy) Backoff(attempt int, u float64, retryAfter time.Duration) time.Duration {
	ceiling := p.Initial
	for i := 1; i < attempt && ceiling < p.Max; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, p.Max)
	d := time.Duration(u * float64(ceiling))
	return max(d, retryAfter)
}

// Class is what a failure means for retrying.
type Class int

const (
	// Final failures are not retried: the request itself is wrong (a 4xx other
	// than 408 and 429), or the process ran and failed.
	Final Class = iota
	// Transient failures are retried: connection errors, timeouts, 408 and 5xx.
	Transient
	// Throttled failures are 429s: retried, and they slow the whole model down.
	Throttled
)

func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Throttled:
		return "throttled"
	}
	return "final"
}

// Classify sorts a call's error. The caller must first rule out its own
// cancellation (the run stopping): a cancelled context here is taken as final.
// It also returns the server's retry-after, if any.
func Classify(err error) (Class, time.Duration) {
	if h, ok := provider.AsHTTPError(err); ok {
		switch {
		case h.StatusCode == 429 && h.Code == "insufficient_quota":
			// OpenAI answers 429 when the account is out of credit: waiting won't help.
			return Final, 0
		case h.StatusCode == 429:
			return Throttled, h.RetryAfter
		case h.StatusCode == 408, h.StatusCode >= 500:
			return Transient, h.RetryAfter
		}
		return Final, 0
	}
	var exit *provider.ExitError
	switch {
	case errors.As(err, &exit):
		return Final, 0
	case errors.Is(err, context.DeadlineExceeded):
		// The attempt's own timeout.
		return Transient, 0
	case errors.Is(err, context.Canceled):
		return Final, 0
	case isNetwork(err):
		return Transient, 0
	}
	return Final, 0
}

// isNetwork reports connection-level failures: refused, reset, dropped mid-answer,
// DNS, timeouts in the transport.
func isNetwork(err error) bool {
	var ue *url.Error
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.As(err, &oe) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}
