package runner

import (
	"context"
	"errors"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/spend"
)

// The send stage: the request itself, under the call's timeout, in a scope
// the model's end does not cancel (accepted): once sent, the provider may
// have accepted it, and an answer being paid for is recorded. Its charge
// settles the budget's hold; its usage is counted for the model.

// send sends req to m's provider and returns its answer, how long it took,
// and what it cost (settling hold, from reserveBudget); n counts the call's
// attempts.
func (e *Engine) send(ctx context.Context, m *modelRun, req *provider.Request, price *spend.Price, worst spend.Totals, hold *spend.Hold, timeout time.Duration, n int) (resp *provider.Response, latency time.Duration, charge spend.Totals, err error) {
	sent, done := accepted(ctx)
	defer done()
	sent, span := e.startAttempt(sent, m, n)
	defer func() { e.endAttempt(span, m, req, resp, err, charge.Cost.Dollars(), price != nil) }()
	req = withTraceParent(sent, m, req)
	actx, cancel := context.WithTimeout(provider.WithRateLimitObserver(sent, m.observe(e.clock)), timeout)
	defer cancel()
	met := e.opts.Metrics
	var firstByte atomic.Int64 // since start, in nanoseconds; 0: none
	start := e.clock.Now()
	if met != nil {
		// An HTTP provider's answer's first byte (once: a provider that
		// makes more than one request is timed by its first).
		actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{GotFirstResponseByte: func() {
			firstByte.CompareAndSwap(0, int64(max(e.clock.Since(start), 1)))
		}})
		met.Sending(m.metricName, m.Endpoint, 1)
	}
	resp, err = m.Provider.Complete(actx, req)
	latency = e.clock.Since(start)
	if err == nil && resp == nil {
		err = errors.New("provider returned no response")
	}
	charge = m.charge(price, resp, err, worst)
	hold.Settle(charge)
	if met != nil {
		met.Sending(m.metricName, m.Endpoint, -1)
		var u provider.Usage
		if err == nil {
			u = resp.Usage
		}
		met.Attempt(m.metricName, m.Endpoint, err, latency, time.Duration(firstByte.Load()), u, charge.Cost.Dollars())
	}
	used := Usage{Requests: 1}
	if err == nil {
		used.InputTokens, used.OutputTokens = resp.Usage.InputTokens, resp.Usage.OutputTokens
	} else if class, _ := retry.Classify(err); class == retry.Throttled {
		used.Throttled = 1
	}
	m.usage.add(used)
	return resp, latency, charge, err
}

// runKey holds, in a model's context, its runScope.
type runKey struct{}

// runScope is what a model's end does not cancel: run ends with the run
// (the second interrupt, a failure), waits with Stop as well.
type runScope struct{ run, waits context.Context }

// accepted returns a context with ctx's values for a call the provider may
// have accepted and for what follows it, its scoring: the model's end (its
// quota did not recover, its budget ran out) leaves it running, so that an
// answer already being paid for is recorded; the run's end stops it.
func accepted(ctx context.Context) (context.Context, context.CancelFunc) {
	scope, ok := ctx.Value(runKey{}).(runScope)
	if !ok {
		return ctx, func() {}
	}
	c, cancel := context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), waitsKey{}, scope.waits))
	stop := context.AfterFunc(scope.run, func() { cancel(context.Cause(scope.run)) })
	return c, func() { stop(); cancel(nil) }
}
