package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
)

// AwaitingLog is a Sink that keeps the records whose judging waits for a
// judge's batch (results.Record.JudgePending): done for their model, and
// found again after a restart, until a later record replaces them.
type AwaitingLog interface {
	Awaiting(model, dataset string) map[int]*results.Record
}

// judging is what a judge's batches judge: one scorer's verdicts on one
// model's answers.
type judging struct {
	sc      scorer
	subject *modelRun
}

// errPromptTaken ends a scorer's run once its judge's prompt is known.
var errPromptTaken = errors.New("the judge's prompt is taken for its batch")

// judgeInBatches judges the answers that await a judge in batch mode, once
// every model has answered: for each such scorer and model, the judge's
// prompts go in batches (recorded in the sink's batch log, as a model's
// do, so that a restart adopts them), and each verdict completes its
// sample's record. A scorer at a time, as a record awaits all of them.
func (e *Engine) judgeInBatches(ctx context.Context, fail context.CancelCauseFunc, order []string, byModel map[string][]Task, sink Sink) error {
	var batched []scorer
	for _, sc := range e.scorers {
		if sc.batchJudge != nil {
			batched = append(batched, sc)
		}
	}
	if len(batched) == 0 {
		return nil
	}
	aw, ok := sink.(AwaitingLog)
	log, ok2 := sink.(results.BatchLog)
	if !ok || !ok2 {
		return errors.New("judging in batches needs a record store that keeps batches and the records awaiting them")
	}
	for _, sc := range batched {
		b, ok := sc.batchJudge.Provider.(provider.Batcher)
		if !ok {
			return fmt.Errorf("judge model %s: its provider has no batch API", sc.batchJudge.Name)
		}
		for _, name := range order {
			if e.stopping(ctx) {
				return nil
			}
			subject := e.models[name]
			if subject.JudgeOnly {
				continue
			}
			r := newBatchRun(e, sc.batchJudge, b, log, sink)
			r.name = results.JudgeBatchName(sc.batchJudge.Name, sc.Name(), name)
			r.judging = &judging{sc: sc, subject: subject}
			if err := r.collectAwaiting(ctx, byModel[name], aw); err != nil {
				return err
			}
			if err := r.adopt(ctx); err != nil {
				return err
			}
			if err := r.loop(ctx, fail); err != nil {
				return err
			}
		}
	}
	return nil
}

// collectAwaiting takes the records of the judged model's tasks that await
// this scorer's verdict, and renders the judge's prompt for each: the
// scorer is run with a judge that only takes its prompt.
func (r *batchRun) collectAwaiting(ctx context.Context, tasks []Task, aw AwaitingLog) error {
	e, j := r.e, r.judging
	for _, t := range tasks {
		ds := e.plan.Dataset(t.Dataset)
		waiting := map[int]*results.Record{}
		for i, rec := range aw.Awaiting(j.subject.Name, ds.Name) {
			if i >= t.Start && i < t.End && slices.Contains(rec.JudgePending, j.sc.Name()) {
				waiting[i] = rec
			}
		}
		if len(waiting) == 0 {
			continue
		}
		dsIndex := r.datasetIndex(ds.Name)
		last := slices.Max(slices.Collect(maps.Keys(waiting)))
		err := eachSample(ds, t.Start, last+1, func(s dataset.Sample) error {
			rec := waiting[s.Index]
			if rec == nil {
				return nil
			}
			it := &batchItem{ds: ds, dsIndex: dsIndex, s: s, pending: rec}
			req, err := e.plan.Prompt.Request(&s)
			if err != nil {
				// The data changed under the run: the answer cannot be judged.
				return r.judgeFailed(it, fmt.Errorf("rendering the prompt: %w", err))
			}
			it.in = score.Input{
				Output: rec.Output, ToolCalls: rec.ToolCalls,
				Expected: s.Expected, HasExpected: s.HasExpected,
				Prompt: req.Prompt, Input: s.Input, Sample: s.Fields,
			}
			var prompt string
			in := it.in
			in.Judge = func(_ context.Context, p string) (string, error) {
				prompt = p
				return "", errPromptTaken
			}
			if _, err := j.sc.Score(ctx, in); prompt == "" {
				// The scorer failed before asking its judge.
				return r.judgeFailed(it, err)
			}
			it.req = &provider.Request{Prompt: prompt, Messages: []provider.Message{{Role: provider.RoleUser, Content: prompt}}}
			r.items[itemKey(dsIndex, s.Index)] = it
			return nil
		})
		if err != nil {
			return fmt.Errorf("dataset %s: %w", ds.Name, err)
		}
	}
	return nil
}

// judged completes a sample's record with the judge's answer: the scorer's
// verdict (or its failure to read one), and what judging cost.
func (r *batchRun) judged(ctx context.Context, it *batchItem, resp *provider.Response, cost spend.Amount) error {
	j, m := r.judging, r.m
	rec := awaitedRecord(it.pending, j.sc.Name())
	rec.JudgeInputTokens += resp.Usage.InputTokens
	rec.JudgeOutputTokens += resp.Usage.OutputTokens
	if m.Price == nil {
		rec.JudgeCost = nil // unknown, as a judge call without pricing makes it
	} else {
		c := cost
		if rec.JudgeCost != nil {
			c += spend.FromDollars(*rec.JudgeCost)
		}
		rec.JudgeCost = ptrDollars(c)
	}
	in := it.in
	in.Judge = func(context.Context, string) (string, error) { return resp.Text, nil }
	v, err := j.sc.Score(ctx, in)
	if resp.Text != "" {
		rec.SetReason(j.sc.Name(), r.e.redact(resp.Text))
	}
	if err != nil {
		setScorerError(r.e, rec, j.sc.Name(), err)
	} else {
		rec.Scores[j.sc.Name()] = v
	}
	r.mu.Lock()
	delete(r.items, itemKey(it.dsIndex, it.s.Index))
	r.mu.Unlock()
	return r.put(it.ds, &it.s, rec)
}

// judgeFailed gives a sample's record the scorer's failure: no verdict could
// be had (--retry-errors judges it again, without calling its model).
func (r *batchRun) judgeFailed(it *batchItem, err error) error {
	rec := awaitedRecord(it.pending, r.judging.sc.Name())
	setScorerError(r.e, rec, r.judging.sc.Name(), fmt.Errorf("judge %s: %w", r.m.Name, err))
	r.mu.Lock()
	delete(r.items, itemKey(it.dsIndex, it.s.Index))
	r.mu.Unlock()
	return r.put(it.ds, &it.s, rec)
}

// judgeAtOnce asks the judge at once, as a judge not in batch mode is asked
// (retryFailed sync, or past the batch's deadline).
func (r *batchRun) judgeAtOnce(ctx context.Context, it *batchItem) error {
	res := r.e.call(ctx, r.m, it.req)
	switch {
	case ctx.Err() != nil || errors.Is(res.err, errStopping):
		return nil //nolint:nilerr // stopping: judged next time
	case endsModel(res.err), IsBudgetExceeded(res.err):
		return res.err
	case res.err != nil:
		return r.judgeFailed(it, res.err)
	}
	return r.judged(ctx, it, res.resp, res.charge.Cost)
}

// awaitedRecord is a copy of a record awaiting verdicts, with scorer's no
// longer awaited.
func awaitedRecord(pending *results.Record, scorer string) *results.Record {
	rec := *pending
	rec.Scores = maps.Clone(pending.Scores)
	if rec.Scores == nil {
		rec.Scores = map[string]float64{}
	}
	rec.JudgePending = slices.DeleteFunc(slices.Clone(pending.JudgePending), func(s string) bool { return s == scorer })
	if len(rec.JudgePending) == 0 {
		rec.JudgePending = nil
	}
	return &rec
}
