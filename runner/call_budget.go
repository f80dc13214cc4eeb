package runner

import (
	"context"
	"errors"
	"syscall"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/spend"
)

// The budget stage: with a budget, an attempt reserves its worst case (its
// input and the most output it may have, at its price) from the ledger last
// of all, just before it is sent, so that the run never spends past its
// budget whatever comes back; the send settles it at what the attempt cost.

// reserveBudget reserves the attempt's worst case from the run's ledger: nil
// without a budget, and for an agent's own run, which is not a call (its
// calls through its endpoints are, and reserve for themselves). Waiting for
// room ends with Stop; a budget that cannot hold it ends the call with an
// error IsBudgetExceeded tells.
func (e *Engine) reserveBudget(ctx context.Context, m *modelRun, worst spend.Totals) (*spend.Hold, error) {
	l := e.opts.Ledger
	if l == nil || m.Agent {
		return nil, nil
	}
	hold, err := l.Reserve(waitCtx(ctx), worst)
	if err != nil {
		if IsBudgetExceeded(err) {
			return nil, err
		}
		return nil, waitErr(ctx, err)
	}
	return hold, nil
}

// worst is the most a call of a model with about inputTokens of input can
// cost at price (nil: unknown): its input, and parameters.maxTokens (else the
// plan's assumed answer length) of output.
func (e *Engine) worst(m *modelRun, price *spend.Price, inputTokens int64) spend.Totals {
	out := e.outputBound(m)
	t := spend.Totals{Tokens: inputTokens + out}
	if price != nil {
		t.Cost = price.Worst(inputTokens, out, false)
	}
	return t
}

// outputBound is the most output a call of m can have: its MaxTokens, else
// the plan's assumed answer length.
func (e *Engine) outputBound(m *modelRun) int64 {
	switch {
	case m.MaxTokens > 0:
		return int64(m.MaxTokens)
	case e.plan.AssumedOutputTokens > 0:
		return int64(e.plan.AssumedOutputTokens)
	}
	return DefaultAssumedOutputTokens
}

// DefaultAssumedOutputTokens is Plan.AssumedOutputTokens's default.
const DefaultAssumedOutputTokens = 4096

// charge is what an attempt cost: its reported usage at price (nil: unknown).
// An answer without usage, and a request sent that got no answer (a timeout,
// a connection lost), may have been charged in full: they count at their
// worst case. An error answer (4xx, 5xx, 429) and an agent's own run (its
// calls through its endpoints are charged as they are made) cost nothing.
func (m *modelRun) charge(price *spend.Price, resp *provider.Response, err error, worst spend.Totals) spend.Totals {
	if m.Agent {
		return spend.Totals{}
	}
	switch _, refused := provider.AsHTTPError(err); {
	case err == nil && resp.Usage.InputTokens == 0 && resp.Usage.OutputTokens == 0:
		return worst
	case err == nil:
		t := spend.Totals{Tokens: resp.Usage.InputTokens + resp.Usage.OutputTokens}
		if price != nil {
			t.Cost = price.Of(resp.Usage, false)
		}
		return t
	case refused, errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, errStopping):
		return spend.Totals{}
	default:
		return worst
	}
}
