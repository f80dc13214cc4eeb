package compile

import (
	"fmt"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/spend"
)

// Price converts a model's pricing; nil pricing is an unknown price.
func Price(p *v1alpha1.Pricing) (*spend.Price, error) {
	if p == nil {
		return nil, nil
	}
	opt := func(n *v1alpha1.Number) string {
		if n == nil {
			return ""
		}
		return string(*n)
	}
	return spend.NewPrice(spend.PerMillion{
		Input: string(p.InputPerMillion), Output: string(p.OutputPerMillion),
		CachedInput: opt(p.CachedInputPerMillion), CacheWrite: opt(p.CacheWriteInputPerMillion),
		BatchInput: opt(p.BatchInputPerMillion), BatchOutput: opt(p.BatchOutputPerMillion),
	})
}

// checkBudget refuses a budget the run could not keep: maxCost with a model
// whose calls have no price, or any budget with an agent whose calls Proctor
// does not see (it has no agent.endpoints).
func checkBudget(spec *v1alpha1.EvaluationSpec, plan *runner.Plan) error {
	b := spec.Budget
	if b == nil {
		return nil
	}
	if _, err := apiconv.SpendLimit(b); err != nil {
		return err
	}
	plan.AssumedOutputTokens = v1alpha1.DefaultAssumedOutputTokens
	if b.AssumedOutputTokens != nil {
		plan.AssumedOutputTokens = int(*b.AssumedOutputTokens)
	}
	for i := range spec.Models {
		m := &spec.Models[i]
		rm := plan.Model(m.Name)
		if rm == nil {
			continue // not run here
		}
		path := fmt.Sprintf("spec.models[%d]", i)
		if rm.Agent && len(rm.AgentEndpoints) == 0 {
			return fmt.Errorf("%s (%s): spec.budget cannot bound an agent that calls its API itself: give it agent.endpoints, so that its calls go through Proctor and are counted, or remove spec.budget", path, m.Name)
		}
		if b.MaxCost != nil && rm.Price == nil {
			where := "pricing"
			if m.EndpointRef != nil {
				where = fmt.Sprintf("pricing (or a pricing entry for model %q in ModelEndpoint %s)", m.Model, m.EndpointRef.Name)
			}
			return fmt.Errorf("%s (%s) has no price, so spec.budget.maxCost cannot be kept: give it %s", path, m.Name, where)
		}
	}
	return nil
}

// batchConfig is a model's batch mode, with its defaults.
func batchConfig(b *v1alpha1.BatchMode) *runner.BatchConfig {
	if b == nil {
		return nil
	}
	cfg := &runner.BatchConfig{MaxInFlight: v1alpha1.DefaultBatchMaxInFlight, PollInterval: v1alpha1.DefaultBatchPollInterval,
		Retry: string(v1alpha1.BatchRetryBatch)}
	if b.MaxRequests != nil {
		cfg.MaxRequests = int(*b.MaxRequests)
	}
	if b.MaxInFlight != nil {
		cfg.MaxInFlight = int(*b.MaxInFlight)
	}
	if b.PollInterval != nil {
		cfg.PollInterval = b.PollInterval.Duration
	}
	if b.RetryFailed != "" {
		cfg.Retry = string(b.RetryFailed)
	}
	if b.Deadline != nil {
		cfg.Deadline = b.Deadline.Duration
	}
	return cfg
}
