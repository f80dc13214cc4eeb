package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
)

// A sample passes through named stages, each in a file of its own with its
// tests:
//
//	slot      hooks.go          a worker's slot is ready: repaired if broken,
//	                            its services up (ready, in runModel)
//	prompt    prompt.go         the request rendered from the sample
//	hooks     hooks.go          the slot's beforeSample hook, then afterSample
//	                            whatever the outcome (runHook)
//	agent     agentproxy.go     an agent model's session of proxied calls,
//	                            opened before its run and counted after it
//	                            (settleAgent)
//	call      call.go           the request through the call's stages
//	record    sample_record.go  the record of what the call came to (fromCall)
//	scoring   sample_score.go   each scorer's verdict, a judge's calls counted
//	store     sample_record.go  the record kept in the sink (finish)
//
// An earlier answer to score again (a re-scoring, a judge that failed)
// skips from the prompt to scoring.

// evaluate runs one sample: render, call, score. It returns a nil record when
// the run is stopping and the sample did not finish (it must run again next
// time), and a *ThrottledOutError, with no record, when the model or its judge
// gave up on a quota that did not recover.
//
// answered, when set, is an earlier record of this sample whose call succeeded
// and whose scoring failed: its answer is scored again without a call.
func (e *Engine) evaluate(ctx context.Context, m *modelRun, ds *Dataset, s *dataset.Sample, answered *results.Record, sl *slot) (*results.Record, error) {
	rec := &results.Record{ID: s.ID, Model: m.Name, Dataset: ds.Name, Scores: map[string]float64{}, Cost: m.cost(0)}
	if s.Err != nil {
		rec.Error, rec.ErrorKind = e.redact(s.Err.Error()), results.ErrorKindData
		return rec, nil // the sample's error is its record, not the run's
	}
	req, err := e.plan.Prompt.Request(s)
	if err != nil {
		rec.Error, rec.ErrorKind = e.redact(fmt.Sprintf("rendering the prompt: %v", err)), results.ErrorKindPrompt
		return rec, nil
	}
	rec.Input = e.inputOf(req)
	if answered != nil && answered.ID != s.ID {
		answered = nil // not this sample's answer: the data moved under it
	}
	if answered != nil {
		// The model answered in an earlier run (its judge failed, or the
		// scoring changed since): score that answer, paying for judges only.
		rec = carried(answered)
		rec.Model, rec.Dataset, rec.Input = m.Name, ds.Name, e.inputOf(req)
		return e.score(ctx, rec, s, req, answered.Output, answered.ToolCalls)
	}
	a, failed, err := e.answer(ctx, m, ds, s, req, rec, sl)
	if a == nil {
		return failed, err
	}
	defer a.done()
	return e.score(a.ctx, rec, s, req, a.output, a.toolCalls)
}

// answer is what a sample's call answered.
type answer struct {
	// ctx is the context of what follows: the model's, or, when the model
	// ended while its call was answered, one its end does not cancel, so that
	// an answer paid for is scored and recorded. done ends it.
	ctx  context.Context
	done func()
	// output and toolCalls are what scorers see: the whole answer, before
	// redaction.
	output    string
	toolCalls []provider.ToolCall
}

// answer runs a sample's hooks, its agent's session and its call, and fills
// rec with what the call came to. It returns the answer; or else the
// sample's record of why there is none (a hook or the call failed); or else
// neither, with the error that ends the model, or none when the run is
// stopping (the sample runs again next time).
func (e *Engine) answer(ctx context.Context, m *modelRun, ds *Dataset, s *dataset.Sample, req *provider.Request, rec *results.Record, sl *slot) (*answer, *results.Record, error) {
	hc := HookContext{Slot: sl.n, Slots: sl.of, Model: m.Name, Dataset: ds.Name, Sample: s}
	var mark uint64
	if e.opts.Services != nil {
		mark = e.opts.Services.Mark()
	}
	if err := e.runHook(ctx, e.plan.beforeSample(), hc, sl); err != nil {
		if !isHookError(err) {
			return nil, nil, nil // the run is stopping
		}
		rec.Error, rec.ErrorKind = e.redact(err.Error()), results.ErrorKindHook
		if down := e.servicesDown(mark); down != nil {
			rec.Error, rec.ErrorKind = e.redact(fmt.Sprintf("%v: %v", down, err)), results.ErrorKindService
		}
		return nil, rec, nil
	}
	req.Slot, req.Slots, req.Model, req.Dataset = hc.Slot, hc.Slots, hc.Model, hc.Dataset
	req.Env = SlotEnv(hc.Slot, hc.Slots)
	var sess *agentSession
	if m.proxies != nil {
		sess = m.proxies.open()
		req.Env = append(req.Env, sess.env...)
		ctx = context.WithValue(ctx, sessionKey{}, sess)
	}
	res := e.call(ctx, m, req)
	done, answered := func() {}, false
	defer func() {
		if !answered {
			done()
		}
	}()
	if res.err == nil && ctx.Err() != nil {
		// The model ended while its call was answered: the answer is
		// paid for, so it is scored and recorded.
		ctx, done = accepted(ctx)
	}
	if ctx.Err() == nil {
		// Whatever the outcome; a failure only takes the slot out of use.
		_ = e.runHook(ctx, e.plan.afterSample(), hc, sl)
	}
	var unpriced bool
	if sess != nil {
		var lost error
		if unpriced, lost = settleAgent(sess, &res, rec); lost != nil {
			if endsModel(lost) {
				return nil, nil, lost
			}
			return nil, nil, nil
		}
	}
	if ctx.Err() != nil || errors.Is(res.err, errStopping) {
		return nil, nil, nil // stopping: the sample leaves no record
	}
	if endsModel(res.err) {
		return nil, nil, res.err
	}
	var exhausted *LocalExhaustedError
	if errors.As(res.err, &exhausted) {
		return nil, nil, exhausted
	}
	if !e.fromCall(rec, m, res, unpriced, mark) {
		return nil, rec, nil
	}
	answered = true
	return &answer{ctx: ctx, done: done, output: res.resp.Text, toolCalls: res.resp.ToolCalls}, nil, nil
}

// inputOf is what a record says its model was sent: the system prompt,
// then the messages (redacted, as outputs are).
func (e *Engine) inputOf(req *provider.Request) []provider.Message {
	out := make([]provider.Message, 0, len(req.Messages)+1)
	if req.System != "" {
		out = append(out, provider.Message{Role: provider.RoleSystem, Content: e.redact(req.System)})
	}
	for _, m := range req.Messages {
		m.Content = e.redact(m.Content)
		out = append(out, m)
	}
	return out
}
