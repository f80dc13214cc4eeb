package runner

import (
	"math"
	"sync"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// EstimateInput guesses a request's input tokens before it is sent, at about four
// characters a token; the estimator corrects the guess from reported usage.
func EstimateInput(req *provider.Request) int64 {
	n := len(req.System)
	for _, m := range req.Messages {
		n += len(m.Content) + 16 // role and framing
		for _, tc := range m.ToolCalls {
			n += len(tc.Name) + len(tc.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return int64(n/4) + 1
}

// estimator learns, per model, how reported input tokens relate to the character
// estimate and how long answers are, so that token budgets are reserved accurately.
type estimator struct {
	mu sync.Mutex
	// ratio of reported to estimated input tokens; 1 until the first answer.
	ratio float64
	// out is the moving average of output tokens.
	out float64
}

func newEstimator(maxTokens int) estimator {
	out := 256.0
	if maxTokens > 0 {
		out = min(out, float64(maxTokens))
	}
	return estimator{ratio: 1, out: out}
}

// cost is what a request with rawIn estimated input tokens is expected to spend.
func (e *estimator) cost(rawIn int64) ratelimit.Cost {
	e.mu.Lock()
	defer e.mu.Unlock()
	return ratelimit.Cost{
		Requests:     1,
		InputTokens:  int64(math.Ceil(float64(rawIn) * e.ratio)),
		OutputTokens: int64(math.Ceil(e.out)),
	}
}

// observe folds in what the server reported for a request estimated at rawIn.
func (e *estimator) observe(rawIn int64, u provider.Usage) {
	const alpha = 0.2
	e.mu.Lock()
	defer e.mu.Unlock()
	if u.InputTokens > 0 && rawIn > 0 {
		r := min(4, max(0.25, float64(u.InputTokens)/float64(rawIn)))
		e.ratio += alpha * (r - e.ratio)
	}
	if u.OutputTokens > 0 {
		e.out += alpha * (float64(u.OutputTokens) - e.out)
	}
}
