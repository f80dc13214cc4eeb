package runner

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ThrottleStatus is what a progress display or a cluster shard reports of a
// model that the server is rate limiting (answering 429).
type ThrottleStatus struct {
	// Since is the first 429 after the model's last successful call; zero when
	// the model is not throttled.
	Since time.Time
	// Until is when the latest retry-after ends (zero when none was sent).
	Until time.Time
	// Refusals counts the 429s since Since.
	Refusals int
}

// Throttled reports whether the model is being throttled.
func (s ThrottleStatus) Throttled() bool { return !s.Since.IsZero() }

// ThrottledOutError ends a model's part of a run: the server answered only 429
// for longer than retry.maxThrottleWait, or asked (retry-after) to wait longer
// than what was left of it. The model's remaining samples get no record, so a
// resumed run takes them up again.
type ThrottledOutError struct {
	Model string
	// For is how long the model had been throttled without a success.
	For time.Duration
	// RetryAfter is the server's last retry-after, if it was what gave up.
	RetryAfter time.Duration
	// Limit is retry.maxThrottleWait.
	Limit time.Duration
	// Last is the last 429's error.
	Last error
}

func (e *ThrottledOutError) Error() string {
	reason := fmt.Sprintf("answered only 429 (rate limited) for %v", e.For.Round(time.Second))
	if e.RetryAfter > 0 && e.For < e.Limit {
		reason = fmt.Sprintf("asked to wait %v (retry-after) after %v of 429s", e.RetryAfter.Round(time.Second), e.For.Round(time.Second))
	}
	return fmt.Sprintf("model %s %s, longer than retry.maxThrottleWait (%v): its remaining samples were not run and run again when the Evaluation is resumed; last answer: %v",
		e.Model, reason, e.Limit, e.Last)
}

func (e *ThrottledOutError) Unwrap() error { return e.Last }

// isThrottledOut reports whether err ended a model's part of the run.
func isThrottledOut(err error) bool {
	var t *ThrottledOutError
	return errors.As(err, &t)
}

// throttle tracks a model's run of 429s: since when it has had no successful
// call. It is shared by the model's calls and by every sample judged by it.
type throttle struct {
	// active says status.Since is set: a successful call checks it without the
	// lock, as every call of every sample succeeds through here.
	active atomic.Bool
	mu     sync.Mutex
	status ThrottleStatus
	// out, once set, fails every later call at once: the quota did not recover.
	out *ThrottledOutError
	// logged is when "still throttled" was last logged.
	logged time.Time
}

// refused records a 429 at now with the server's retry-after. It returns the
// status after it, whether this 429 started a throttled period, and a non-nil
// error when the model has now been throttled out by limit.
func (t *throttle) refused(model string, now time.Time, retryAfter, limit time.Duration, last error) (st ThrottleStatus, first bool, out *ThrottledOutError) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.out != nil {
		return t.status, false, t.out
	}
	if t.status.Since.IsZero() {
		t.status.Since, first = now, true
		t.logged = now // the first 429 is logged as the start
		t.active.Store(true)
	}
	t.status.Refusals++
	if retryAfter > 0 && now.Add(retryAfter).After(t.status.Until) {
		t.status.Until = now.Add(retryAfter)
	}
	throttledFor := now.Sub(t.status.Since)
	if limit > 0 && (throttledFor >= limit || throttledFor+retryAfter > limit) {
		t.out = &ThrottledOutError{Model: model, For: throttledFor, RetryAfter: retryAfter, Limit: limit, Last: last}
		return t.status, first, t.out
	}
	return t.status, first, nil
}

// succeeded records a successful call and returns the throttled period it ended,
// if any.
func (t *throttle) succeeded() (ended ThrottleStatus) {
	if !t.active.Load() {
		return ThrottleStatus{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.status.Since.IsZero() {
		return ThrottleStatus{}
	}
	ended, t.status = t.status, ThrottleStatus{}
	t.active.Store(false)
	return ended
}

// exhausted returns the error that throttled the model out, if one did.
func (t *throttle) exhausted() *ThrottledOutError {
	if !t.active.Load() {
		return nil // out is only ever set while throttled, and never cleared
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out
}

// remaining is how much of limit is left at now, or limit when not throttled.
func (t *throttle) remaining(now time.Time, limit time.Duration) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.status.Since.IsZero() {
		return limit
	}
	return limit - now.Sub(t.status.Since)
}

// shouldLog reports whether a "still throttled" line is due (at most one per every).
func (t *throttle) shouldLog(now time.Time, every time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.logged) < every {
		return false
	}
	t.logged = now
	return true
}

func (t *throttle) snapshot() ThrottleStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status
}
