package runner

import (
	"context"
	"errors"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/spend"
)

// A call (one request to a model: a sample's, a judge's, an agent's proxied
// one) passes through named stages, each in a file of its own with its tests:
//
//	cache    call_cache.go   an answer this request already had is used again
//	retry    call_retry.go   attempts until one answers, one fails for good, or
//	                         the model's throttle budget ends
//	each attempt (attempt):
//	  limits  call_limits.go  the window, the gate, the places in time of the
//	                          model's limiter, its endpoint's and the pacer's,
//	                          then the places in flight
//	  budget  call_budget.go  the call's worst case reserved from the ledger
//	  send    call_send.go    the request, under its timeout, in a scope the
//	                          model's end does not cancel; its charge and usage
//
// A new concern of every call (telemetry, a new admission rule) is one more
// stage here, not another branch inside one.

// callResult is what a call came to.
type callResult struct {
	resp     *provider.Response
	attempts int
	latency  time.Duration
	err      error
	// key is the request's cache key, when the cache is on.
	key string
	// cached: the answer came from the cache.
	cached bool
	// charge is what the call's attempts cost (settled with the budget).
	charge spend.Totals
}

// errStopping ends a call that was only waiting when the engine stopped.
var errStopping = errors.New("the run is stopping")

// call makes one request to a model, through the stages above.
//
// A 429 is "later", never "wrong": it does not count against retry.maxAttempts.
// It shrinks the model's window, holds every call of the model for the
// server's retry-after (which maxBackoff does not cap: calling earlier only
// meets another 429), and is retried until the model has answered only 429s for
// retry.maxThrottleWait, when a *ThrottledOutError gives up on the model.
func (e *Engine) call(ctx context.Context, m *modelRun, req *provider.Request) callResult {
	key, hit, ok := e.fromCache(m, req)
	if ok {
		return hit
	}
	if out := m.throttle.exhausted(); out != nil {
		return callResult{err: out}
	}
	timeout := e.plan.Timeout
	if m.Timeout > 0 {
		timeout = m.Timeout
	}
	rawIn, proxied := proxiedInput(ctx)
	if !proxied {
		rawIn = EstimateInput(req)
	}
	var tries retries
	var charge spend.Totals
	for {
		tries.attempts++
		if tries.attempts > 1 {
			e.opts.Metrics.Retry(m.metricName, m.Endpoint)
		}
		resp, latency, res, cost, err := e.attempt(ctx, m, req, rawIn, timeout, tries.attempts)
		charge = charge.Add(cost)
		if err == nil {
			e.answered(m, res, rawIn, resp)
			e.toCache(m, key, resp, latency)
			return callResult{charge: charge, resp: resp, attempts: tries.attempts, latency: latency, key: key}
		}
		// The run's end and the engine's stop are not the call's failures.
		if ctx.Err() != nil {
			return callResult{charge: charge, attempts: tries.attempts, err: ctx.Err()}
		}
		if errors.Is(err, errStopping) {
			return callResult{charge: charge, attempts: tries.attempts, err: err}
		}
		wait, final := e.afterFailure(m, req, &tries, res, err, timeout)
		if final != nil {
			return callResult{charge: charge, attempts: tries.attempts, latency: latency, err: final}
		}
		if err := e.sleep(ctx, wait); err != nil {
			return callResult{charge: charge, attempts: tries.attempts, err: err}
		}
	}
}

// answered notes an attempt's answer: the model's window widens, a throttle
// ends, the limiters learn what it cost and the estimator its size.
func (e *Engine) answered(m *modelRun, res reservation, rawIn int64, resp *provider.Response) {
	m.window.Succeeded()
	if ended := m.throttle.succeeded(); ended.Throttled() {
		held := e.clock.Since(ended.Since)
		e.log.Info("Model is no longer throttled", "model", m.Name,
			"throttledFor", held.Round(time.Millisecond).String(), "refusals", ended.Refusals)
		e.opts.Metrics.Throttled(m.metricName, false, held)
	}
	if res != nil {
		res.Settle(ratelimit.Cost{Requests: 1, InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens})
	}
	m.est.observe(rawIn, resp.Usage)
}

// attempt makes one call within the model's limits and budget. Only the
// waits before the request is sent end with Stop; a request sent runs to its
// end.
func (e *Engine) attempt(ctx context.Context, m *modelRun, req *provider.Request, rawIn int64, timeout time.Duration, n int) (*provider.Response, time.Duration, reservation, spend.Totals, error) {
	var none spend.Totals
	res, cost, done, err := e.throughLimits(ctx, m, rawIn)
	if err != nil {
		return nil, 0, nil, none, err
	}
	defer done()
	price := m.priceOf(ctx)
	worst := e.worst(m, price, cost.InputTokens)
	hold, err := e.reserveBudget(ctx, m, worst)
	if err != nil {
		res.cancel()
		return nil, 0, nil, none, err
	}
	resp, latency, charge, err := e.send(ctx, m, req, price, worst, hold, timeout, n)
	return resp, latency, res, charge, err
}
