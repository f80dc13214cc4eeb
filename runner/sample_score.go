package runner

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// The scoring stage: each scorer's verdict of an answer, a judge's calls
// made through the call chain and counted on the record; one scorer's
// failure is its own.

// judgeUsage adds up the tokens a sample's judging cost; evaluate hands it to
// the judge calls through their context, as score.JudgeFunc returns text only.
type judgeUsage struct {
	in, out, cost, calls atomic.Int64
	// unpriced: a judge call's model has no pricing.
	unpriced atomic.Bool
}

// score scores a record whose call answered output (and toolCalls): its
// scores, or its scoring error, and what judging it cost. It returns a nil
// record when the run is stopping, and an error that ends the model (its
// judge's quota did not recover, the budget is exhausted).
func (e *Engine) score(ctx context.Context, rec *results.Record, s *dataset.Sample, req *provider.Request, output string, toolCalls []provider.ToolCall) (*results.Record, error) {
	in := score.Input{
		Output: output, ToolCalls: toolCalls,
		Expected: s.Expected, HasExpected: s.HasExpected,
		Prompt: req.Prompt, Input: s.Input, Sample: s.Fields,
	}
	if e.judged {
		judged := new(judgeUsage)
		defer func() {
			addJudging(rec, judged.in.Load(), judged.out.Load(), judged.calls.Load() > 0, judged.unpriced.Load(), spend.Amount(judged.cost.Load()))
		}()
		ctx = context.WithValue(ctx, judgeUsageKey{}, judged)
	}
	var waiting []string
	sample := trace.SpanFromContext(ctx)
	for _, sc := range e.scorers {
		if _, kept := rec.Scores[sc.Name()]; kept {
			continue // scored earlier by this very scorer (a carried answer's)
		}
		if sc.batchJudge != nil {
			waiting = append(waiting, sc.Name())
			continue
		}
		in.Judge = sc.judge
		var reply string
		if sc.judge != nil {
			// The judge's reply is kept as the metric's reason.
			judge := sc.judge
			in.Judge = func(ctx context.Context, prompt string) (string, error) {
				r, err := judge(ctx, prompt)
				if err == nil {
					reply = r
				}
				return r, err
			}
		}
		sctx, span := e.startScorer(ctx, sc.Name())
		v, err := sc.Score(sctx, in)
		if reply != "" {
			rec.SetReason(sc.Name(), e.redact(reply))
		}
		if err == nil {
			telemetry.Scored(sample, span, sc.Name(), v)
		} else {
			telemetry.Fail(span, "scorer", e.redact(err.Error()))
		}
		span.End()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, errStopping) {
				return nil, nil
			}
			var exhausted *LocalExhaustedError
			if isThrottledOut(err) || IsBudgetExceeded(err) || errors.As(err, &exhausted) {
				return nil, err
			}
			// This scorer's failure is its own: the others still score.
			setScorerError(e, rec, sc.Name(), err)
			continue
		}
		rec.Scores[sc.Name()] = v
	}
	// Kept with its answer until the judges' batches give their verdicts.
	rec.JudgePending = waiting
	return rec, nil
}

// zeroFailed gives a failed sample's record a 0 for every metric it has no
// score for, as the summary counts it, so that averaging results.jsonl gives
// the summary's metrics.
func (e *Engine) zeroFailed(rec *results.Record) {
	if rec.Error == "" {
		return
	}
	if rec.Scores == nil {
		rec.Scores = map[string]float64{}
	}
	for _, sc := range e.scorers {
		if _, ok := rec.Scores[sc.Name()]; !ok && !slices.Contains(rec.JudgePending, sc.Name()) {
			rec.Scores[sc.Name()] = 0
		}
	}
}

// carried is a new record of an earlier record's answer, to be scored again:
// its answer, tokens and costs (paid already: Rescored says so), and the
// scores of scorers that are to be kept (the journal keeps only those of
// scorers unchanged since, and none that failed).
func carried(answered *results.Record) *results.Record {
	rec := &results.Record{
		ID: answered.ID, Model: answered.Model, Dataset: answered.Dataset,
		Output: answered.Output, ToolCalls: answered.ToolCalls,
		Attempts: answered.Attempts, LatencyMillis: answered.LatencyMillis,
		InputTokens: answered.InputTokens, OutputTokens: answered.OutputTokens,
		JudgeInputTokens: answered.JudgeInputTokens, JudgeOutputTokens: answered.JudgeOutputTokens,
		OutputTruncated: answered.OutputTruncated, OutputBytes: answered.OutputBytes,
		MaxTokensReached: answered.MaxTokensReached, AgentCalls: answered.AgentCalls,
		Cost: answered.Cost, JudgeCost: answered.JudgeCost, Batch: answered.Batch,
		// The request that answered it, so a later run's cache finds it.
		CacheKey: answered.CacheKey,
		Rescored: true,
		Scores:   map[string]float64{},
	}
	for k, v := range answered.Scores {
		if _, failed := answered.ScoreErrors[k]; !failed {
			rec.Scores[k] = v
			if r, ok := answered.Reasons[k]; ok {
				rec.SetReason(k, r)
			}
		}
	}
	return rec
}

// addJudging adds what judging a sample cost now to what its record carries
// (a re-scored answer's earlier judging): the tokens, and the cost, unknown
// once any judge call was unpriced.
func addJudging(rec *results.Record, in, out int64, called, unpriced bool, cost spend.Amount) {
	if !called {
		return
	}
	before := rec.JudgeCost != nil || rec.JudgeInputTokens > 0 || rec.JudgeOutputTokens > 0
	rec.JudgeInputTokens += in
	rec.JudgeOutputTokens += out
	switch {
	case unpriced || (before && rec.JudgeCost == nil):
		rec.JudgeCost = nil
	case rec.JudgeCost != nil:
		rec.JudgeCost = ptrDollars(cost + spend.FromDollars(*rec.JudgeCost))
	default:
		rec.JudgeCost = ptrDollars(cost)
	}
}

// setScorerError records one scorer's failure in rec: the metric scores 0
// (as in the summary), ScoreErrors says why, and the record is a scoring
// failure, which --retry-errors scores again without calling the model. The
// other scorers' scores stay.
func setScorerError(e *Engine, rec *results.Record, scorer string, err error) {
	if rec.ScoreErrors == nil {
		rec.ScoreErrors = map[string]string{}
	}
	rec.ScoreErrors[scorer] = e.redact(err.Error())
	if rec.Scores == nil {
		rec.Scores = map[string]float64{}
	}
	rec.Scores[scorer] = 0
	names := slices.Sorted(maps.Keys(rec.ScoreErrors))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = "scorer " + n + ": " + rec.ScoreErrors[n]
	}
	rec.Error, rec.ErrorKind = strings.Join(parts, "; "), results.ErrorKindScoring
}

type judgeUsageKey struct{}

// judgeFunc lets a judge scorer call its model through the same window, limits,
// retries and cache as any other call.
func (e *Engine) judgeFunc(m *modelRun) score.JudgeFunc {
	return func(ctx context.Context, prompt string) (string, error) {
		req := &provider.Request{Prompt: prompt, Messages: []provider.Message{{Role: provider.RoleUser, Content: prompt}}}
		res := e.call(ctx, m, req)
		u, _ := ctx.Value(judgeUsageKey{}).(*judgeUsage)
		if u != nil && (res.err == nil || res.charge != (spend.Totals{})) {
			u.cost.Add(int64(res.charge.Cost))
			u.calls.Add(1)
			if m.Price == nil {
				u.unpriced.Store(true)
			}
		}
		if res.err != nil {
			return "", res.err
		}
		if u != nil {
			u.in.Add(res.resp.Usage.InputTokens)
			u.out.Add(res.resp.Usage.OutputTokens)
		}
		return res.resp.Text, nil
	}
}
