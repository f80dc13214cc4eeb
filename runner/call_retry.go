package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/retry"
)

// The retry stage: what a failed attempt means for its call. An endpoint
// that is not there, and this machine running out of files, end the call at
// once; a final answer (a 400) ends it; a 429 is retried for as long as the
// model's throttle budget (retry.maxThrottleWait) lasts, without counting
// against retry.maxAttempts; anything else is retried up to maxAttempts.

// retries counts a call's attempts, and its failures and refusals apart,
// which back off separately.
type retries struct{ attempts, failures, throttles int }

// afterFailure decides what the failed attempt of req (its error err, its
// places res) comes to: a final error, or how long to wait before the next.
func (e *Engine) afterFailure(m *modelRun, req *provider.Request, tries *retries, res reservation, err error, timeout time.Duration) (time.Duration, error) {
	if provider.IsUnavailable(err) {
		return 0, err
	}
	if localExhaustion(err) {
		return 0, &LocalExhaustedError{Err: err}
	}
	policy := e.plan.Retry
	class, retryAfter := retry.Classify(err)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v", timeout)
	}
	var k int // the backoff exponent
	switch class {
	case retry.Final:
		return 0, err
	case retry.Throttled:
		if res != nil {
			// A refused request used no tokens.
			res.Settle(ratelimit.Cost{Requests: 1})
		}
		m.window.Throttled()
		now := e.clock.Now()
		st, first, out := m.throttle.refused(m.Name, now, retryAfter, policy.MaxThrottleWait, errors.New(e.redact(err.Error())))
		if out != nil {
			e.opts.Metrics.Throttled(m.metricName, false, now.Sub(st.Since))
			return 0, out
		}
		if first {
			e.opts.Metrics.Throttled(m.metricName, true, 0)
		}
		if retryAfter > 0 {
			m.gate.CloseUntil(now.Add(retryAfter))
		}
		switch {
		case first:
			e.log.Info("Model is throttled: the server answered 429; holding its calls", "model", m.Name,
				"retryAfter", retryAfter.String(), "maxThrottleWait", policy.MaxThrottleWait.String(), "error", e.redact(err.Error()))
		case m.throttle.shouldLog(now, e.opts.ThrottleLogEvery):
			e.log.Info("Model is still throttled", "model", m.Name, "throttledFor", now.Sub(st.Since).Round(time.Second).String(),
				"refusals", st.Refusals, "retryAfter", retryAfter.String(), "maxThrottleWait", policy.MaxThrottleWait.String())
		}
		// With a retry-after the server said exactly when; without one, back off
		// exponentially in the number of refusals.
		tries.throttles++
		k = tries.throttles
		if retryAfter > 0 {
			k = 1
		}
	default:
		tries.failures++
		k = tries.failures
		if tries.failures >= policy.MaxAttempts {
			return 0, fmt.Errorf("%w (gave up after %d attempts)", err, tries.attempts)
		}
	}
	e.log.V(1).Info("Retrying a failed call", "model", m.Name, "sample", req.SampleID, "attempt", tries.attempts, "class", class.String(), "error", e.redact(err.Error()))
	d := policy.Backoff(k, e.rand(), retryAfter)
	if class == retry.Throttled && policy.MaxThrottleWait > 0 {
		// Try again no later than the model's throttle budget ends, so that a
		// quota that never recovers is given up on time.
		d = min(d, max(m.throttle.remaining(e.clock.Now(), policy.MaxThrottleWait), 0))
	}
	return d, nil
}
