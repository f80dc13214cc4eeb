package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
)

// The record and store stages: a sample's record says what its call came to
// (attempts, latency, cost, the answer or the error, redacted), and is kept
// in the sink once scored.

// fromCall fills rec with what the sample's call res came to, and reports
// whether it answered (else rec says why not). unpriced: an agent called a
// model that nothing prices; mark is the services' state before the sample,
// to tell a failure while a service was down.
func (e *Engine) fromCall(rec *results.Record, m *modelRun, res callResult, unpriced bool, mark uint64) bool {
	rec.Attempts = res.attempts
	rec.LatencyMillis = res.latency.Milliseconds()
	rec.CacheKey = res.key
	rec.Cost = m.cost(res.charge.Cost)
	if m.Agent && m.proxies == nil && m.AgentReportsUsage && res.err == nil {
		rec.Cost = m.reportedCost(res.resp, res.cached)
	}
	if unpriced {
		// The agent called a model that neither its endpoint nor the
		// model prices.
		rec.Cost = nil
	}
	if res.err != nil {
		rec.Error, rec.ErrorKind = e.redact(res.err.Error()), results.ErrorKindCall
		if down := e.servicesDown(mark); down != nil {
			rec.Error, rec.ErrorKind = e.redact(fmt.Sprintf("%v while the sample ran: %v", down, res.err)), results.ErrorKindService
		}
		return false
	}
	rec.Output = e.redact(res.resp.Text)
	if res.resp.Truncated {
		rec.OutputTruncated, rec.OutputBytes = true, res.resp.FullBytes
	}
	rec.ToolCalls = e.redactToolCalls(res.resp.ToolCalls)
	rec.MaxTokensReached = res.resp.MaxTokensReached()
	rec.InputTokens = res.resp.Usage.InputTokens
	rec.OutputTokens = res.resp.Usage.OutputTokens
	return true
}

// stamp gives a finished record its sample's expected answer and its
// times: started at start (none if zero), ended now.
func (e *Engine) stamp(rec *results.Record, s *dataset.Sample, start time.Time) {
	if s.HasExpected && rec.Expected == nil {
		if b, err := json.Marshal(s.Expected); err == nil {
			rec.Expected = b
		}
	}
	ms := func(t time.Time) *time.Time {
		t = t.UTC().Truncate(time.Millisecond)
		return &t
	}
	rec.StartedAt = nil
	if !start.IsZero() {
		rec.StartedAt = ms(start)
	}
	rec.EndedAt = ms(e.clock.Now())
}

// finish evaluates a sample and stores its record.
func (e *Engine) finish(ctx context.Context, fail, throttledOut context.CancelCauseFunc, m *modelRun, j job, sink Sink, s *slot) {
	start := e.clock.Now()
	ctx, span := e.startSample(ctx, m, j.ds, &j.s)
	rec, err := e.evaluate(ctx, m, j.ds, &j.s, j.answered, s)
	var kept *results.Record // the record stored, nil when none was
	defer func() { endSample(span, kept) }()
	if IsBudgetExceeded(err) {
		// Nothing new starts, for any model; the calls in flight are paid
		// for, so they finish and are kept.
		e.exhaust(err)
		return
	}
	var exhausted *LocalExhaustedError
	if errors.As(err, &exhausted) {
		fail(exhausted)
		return
	}
	if err != nil {
		// The model (or its judge) is throttled out, or its provider is
		// unavailable: stop the model's work.
		switch {
		case provider.IsUnavailable(err):
			e.log.Error(err, "Stopped a model whose provider is unavailable", "model", m.Name)
		default:
			e.log.Error(err, "Gave up on a rate-limited model", "model", m.Name)
		}
		throttledOut(err)
		return
	}
	if rec == nil {
		return
	}
	e.zeroFailed(rec)
	e.stamp(rec, &j.s, start)
	if err := sink.Put(m.Name, j.ds.Name, j.s.Index, rec); err != nil {
		fail(fmt.Errorf("saving the result of %s on %s sample %s: %w", m.Name, j.ds.Name, j.s.ID, err))
		return
	}
	kept = rec
	if e.opts.Observer != nil {
		e.opts.Observer.SampleFinished(m.Name, j.ds.Name, rec)
	}
	e.opts.Metrics.Sample(m.Name, j.ds.Name, errorKind(rec))
}

// errorKind is a record's error's kind ("error" when it names none), ""
// when it has no error.
func errorKind(rec *results.Record) string {
	if rec.Error == "" {
		return ""
	}
	if rec.ErrorKind == "" {
		return "error"
	}
	return rec.ErrorKind
}
