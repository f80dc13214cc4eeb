// Package estimate says what a run will cost before it starts, making no
// model call: every prompt is rendered as the run would send it and its
// input tokens are counted by the provider's own token counting endpoint
// (free: OpenAI's /v1/responses/input_tokens, Anthropic's
// /v1/messages/count_tokens); answers are bounded by parameters.maxTokens,
// or spec.budget.assumedOutputTokens where a model sets none.
package estimate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
)

// Row is the estimate of one model's calls on one dataset: its own, or a
// judge's calls judging another model's answers (Judge names that model).
type Row struct {
	Model, Dataset string
	// Judge, on a judge's row, is the model whose answers it judges.
	Judge string
	// Calls is the number of calls: one per sample, or per sample judged.
	Calls int
	// InputTokens are the calls' input tokens; Exact says the provider
	// counted every one (else some were estimated from their length). A
	// judge's input holds the answer it judges, counted at its bound (the
	// rest is counted).
	InputTokens int64
	Exact       bool
	// OutputTokens bounds the calls' output: OutputPerCall each, from
	// OutputFrom.
	OutputTokens, OutputPerCall int64
	OutputFrom                  string
	// InputCost is what the input costs; Cost and BatchCost bound the whole
	// calls, synchronously and through the batch API. Nil when the model
	// has no pricing.
	InputCost, Cost, BatchCost *spend.Amount
	// Agent: an agent model, whose calls depend on what it does; not
	// estimated.
	Agent bool
	// Batch: the model runs in batch mode, so BatchCost is what it costs.
	Batch bool
	// Skipped counts samples that cannot be run (a data or prompt error):
	// they make no call.
	Skipped int
}

// Options tune an estimate.
type Options struct {
	// Log hears of counting endpoints that are missing.
	Log func(msg string)
	// Sleep waits between retries; nil sleeps.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Run estimates every model on every dataset of plan.
func Run(ctx context.Context, plan *runner.Plan, o Options) ([]Row, error) {
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	var rows []Row
	for _, t := range plan.Tasks() {
		m, ds := plan.Model(t.Model), plan.Dataset(t.Dataset)
		if m.Agent {
			rows = append(rows, Row{Model: m.Name, Dataset: ds.Name, Calls: ds.Total, Agent: true})
			continue
		}
		row, answers, err := estimateModel(ctx, plan, m, ds, o)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
		for _, sc := range plan.Scorers {
			if sc.JudgeModel == "" {
				continue
			}
			jr, err := estimateJudge(ctx, plan, plan.Model(sc.JudgeModel), sc, m, ds, answers, row.OutputPerCall, o)
			if err != nil {
				return nil, err
			}
			rows = append(rows, jr)
		}
	}
	return rows, nil
}

// Total is the whole of an estimate.
type Total struct {
	Calls                     int
	InputTokens, OutputTokens int64
	// InputCost, Cost and BatchCost are the rows' sums; RunCost bounds what
	// the run costs as it runs (BatchCost for models in batch mode).
	InputCost, Cost, BatchCost, RunCost spend.Amount
	// Unknown: a row has no price, or is an agent's, so the costs are
	// unknown. Exact: every row's input was counted by its provider (a
	// judge's holds answers at their bound, so it never is).
	Unknown, Exact bool
	// Agents: some rows are agents', not estimated.
	Agents bool
}

// Sum adds up an estimate's rows.
func Sum(rows []Row) Total {
	t := Total{Exact: true}
	for _, r := range rows {
		if r.Agent {
			t.Agents, t.Unknown, t.Exact = true, true, false
			continue
		}
		t.Calls += r.Calls
		t.InputTokens += r.InputTokens
		t.OutputTokens += r.OutputTokens
		t.Exact = t.Exact && r.Exact && r.Judge == ""
		if r.Cost == nil {
			t.Unknown = true
			continue
		}
		t.InputCost += *r.InputCost
		t.Cost += *r.Cost
		t.BatchCost += *r.BatchCost
		if r.Batch {
			t.RunCost += *r.BatchCost
		} else {
			t.RunCost += *r.Cost
		}
	}
	return t
}

// sample is a rendered sample: its request, and what a judge sees of it.
type sample struct {
	req *provider.Request
	in  score.Input
}

// estimateModel counts a model's prompts on a dataset; it returns them for
// the judges.
func estimateModel(ctx context.Context, plan *runner.Plan, m *runner.Model, ds *runner.Dataset, o Options) (Row, []sample, error) {
	row := Row{Model: m.Name, Dataset: ds.Name}
	r, closer, err := ds.Open()
	if err != nil {
		return row, nil, fmt.Errorf("dataset %s: %w", ds.Name, err)
	}
	defer closer.Close()
	var samples []sample
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) || (err == nil && s.Index >= ds.Total) {
			break
		}
		if err != nil {
			return row, nil, fmt.Errorf("dataset %s: %w", ds.Name, err)
		}
		if s.Err != nil {
			row.Skipped++
			continue
		}
		req, err := plan.Prompt.Request(&s)
		if err != nil {
			row.Skipped++
			continue
		}
		samples = append(samples, sample{req: req, in: score.Input{
			Expected: s.Expected, HasExpected: s.HasExpected, Prompt: req.Prompt, Input: s.Input, Sample: s.Fields,
		}})
	}
	reqs := make([]*provider.Request, len(samples))
	for i := range samples {
		reqs[i] = samples[i].req
	}
	in, exact, err := count(ctx, plan, m, reqs, o)
	if err != nil {
		return row, nil, err
	}
	row.Calls, row.InputTokens, row.Exact = len(reqs), in, exact
	bound(plan, m, &row)
	return row, samples, nil
}

// estimateJudge counts a judge's prompts for the answers of subject: its
// rubric rendered for each sample with an empty answer (counted), plus the
// answer at its bound.
func estimateJudge(ctx context.Context, plan *runner.Plan, judge *runner.Model, sc runner.Scorer, subject *runner.Model, ds *runner.Dataset,
	samples []sample, answerBound int64, o Options) (Row, error) {
	row := Row{Model: judge.Name, Dataset: ds.Name, Judge: subject.Name}
	reqs := make([]*provider.Request, 0, len(samples))
	for _, s := range samples {
		var prompt string
		in := s.in
		in.Judge = func(_ context.Context, p string) (string, error) {
			prompt = p
			return "VERDICT: CORRECT", nil
		}
		if _, err := sc.Built.Score(ctx, in); err != nil || prompt == "" {
			continue
		}
		reqs = append(reqs, &provider.Request{Prompt: prompt, Messages: []provider.Message{{Role: provider.RoleUser, Content: prompt}}})
	}
	in, exact, err := count(ctx, plan, judge, reqs, o)
	if err != nil {
		return row, err
	}
	row.Calls, row.InputTokens, row.Exact = len(reqs), in+int64(len(reqs))*answerBound, exact
	bound(plan, judge, &row)
	return row, nil
}

// bound fills in a row's output bound and costs.
func bound(plan *runner.Plan, m *runner.Model, row *Row) {
	switch {
	case m.MaxTokens > 0:
		row.OutputPerCall, row.OutputFrom = int64(m.MaxTokens), "parameters.maxTokens"
	case plan.AssumedOutputTokens > 0:
		row.OutputPerCall, row.OutputFrom = int64(plan.AssumedOutputTokens), "spec.budget.assumedOutputTokens"
	default:
		row.OutputPerCall, row.OutputFrom = runner.DefaultAssumedOutputTokens, "assumed (no parameters.maxTokens)"
	}
	row.OutputTokens = int64(row.Calls) * row.OutputPerCall
	row.Batch = m.Batch != nil
	if p := m.Price; p != nil {
		inCost := p.Of(provider.Usage{InputTokens: row.InputTokens}, false)
		sync := p.Of(provider.Usage{InputTokens: row.InputTokens, OutputTokens: row.OutputTokens}, false)
		batch := p.Of(provider.Usage{InputTokens: row.InputTokens, OutputTokens: row.OutputTokens}, true)
		row.InputCost, row.Cost, row.BatchCost = &inCost, &sync, &batch
	}
}

// count counts the input tokens of reqs with m's counting endpoint, with
// m's concurrency, retrying throttled and failed counts as calls are
// retried. A provider without one (an OpenAI-compatible server answering
// 404) is estimated from the requests' length instead: exact is false.
func count(ctx context.Context, plan *runner.Plan, m *runner.Model, reqs []*provider.Request, o Options) (total int64, exact bool, err error) {
	counter, ok := m.Provider.(provider.TokenCounter)
	if !ok || len(reqs) == 0 {
		for _, r := range reqs {
			total += runner.EstimateInput(r)
		}
		return total, len(reqs) == 0, nil
	}
	var (
		mu          sync.Mutex
		firstErr    error
		unsupported bool
		wg          sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan *provider.Request)
	for range max(1, m.Concurrency) {
		wg.Go(func() {
			for r := range next {
				n, err := countOne(ctx, plan.Retry, callTimeout(plan, m), counter, r, o)
				mu.Lock()
				switch {
				case err == nil:
					total += n
				case isUnsupported(err):
					unsupported = true
					total += runner.EstimateInput(r)
				case firstErr == nil:
					firstErr = fmt.Errorf("model %s: counting input tokens: %w", m.Name, err)
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	for _, r := range reqs {
		select {
		case next <- r:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return 0, false, firstErr
	}
	if unsupported {
		o.Log(fmt.Sprintf("model %s: the server has no token counting endpoint; its input tokens are estimated from the prompts' length", m.Name))
	}
	return total, !unsupported, ctx.Err()
}

// defaultCountTimeout bounds a count when neither the model nor the plan
// says how long a call may take: a server that never answers must not hang
// the estimate.
const defaultCountTimeout = time.Minute

// callTimeout is how long one of m's calls may take: the model's timeout,
// else the plan's, else defaultCountTimeout.
func callTimeout(plan *runner.Plan, m *runner.Model) time.Duration {
	switch {
	case m.Timeout > 0:
		return m.Timeout
	case plan.Timeout > 0:
		return plan.Timeout
	}
	return defaultCountTimeout
}

// countOne counts one request, each attempt bounded by timeout, retrying as
// the engine retries a call.
func countOne(ctx context.Context, policy retry.Policy, timeout time.Duration, c provider.TokenCounter, r *provider.Request, o Options) (int64, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		n, err := c.CountTokens(actx, r)
		cancel()
		if err == nil || isUnsupported(err) {
			return n, err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v (the call timeout): %w", timeout, err)
		}
		class, after := retry.Classify(err)
		if class == retry.Final || (class == retry.Transient && attempt >= max(1, policy.MaxAttempts)) || attempt >= 100 {
			return 0, err
		}
		if err := o.Sleep(ctx, policy.Backoff(attempt, rand.Float64(), after)); err != nil {
			return 0, err
		}
	}
}

// isUnsupported says the server has no such endpoint.
func isUnsupported(err error) bool {
	h, ok := provider.AsHTTPError(err)
	return ok && (h.StatusCode == 404 || h.StatusCode == 405 || h.StatusCode == 501)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
