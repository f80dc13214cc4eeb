package apiconv

import (
	"fmt"
	"slices"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/spend"
)

// SpendLimit converts spec.budget to a ledger's limit; nil bounds nothing.
func SpendLimit(b *v1alpha1.Budget) (spend.Limit, error) {
	var l spend.Limit
	if b == nil {
		return l, nil
	}
	if b.MaxCost != nil {
		c, err := spend.ParseDollars(string(*b.MaxCost))
		if err != nil {
			return l, fmt.Errorf("spec.budget.maxCost: %w", err)
		}
		// A budget of 0 dollars is a budget: nothing may be spent.
		l.Cost = max(c, spend.Nothing)
	}
	if b.MaxTokens != nil {
		l.Tokens = *b.MaxTokens
	}
	return l, nil
}

// CostKnown reports whether what the run's calls cost can be known: every
// model's cost is known (ModelCostKnown).
func CostKnown(spec *v1alpha1.EvaluationSpec) bool {
	for i := range spec.Models {
		if !ModelCostKnown(&spec.Models[i]) {
			return false
		}
	}
	return true
}

// WantsEstimate says a run is estimated before it starts (status.estimate):
// it has a budget, or a model with pricing. Its planner Job then counts the
// prompts' tokens with the models' keys.
func WantsEstimate(spec *v1alpha1.EvaluationSpec) bool {
	return spec.Budget != nil || slices.ContainsFunc(spec.Models, func(m v1alpha1.Model) bool { return m.Pricing != nil })
}

// ModelCostKnown reports whether what a model's calls cost can be known: it
// has pricing (one with endpointRef resolved, taking its ModelEndpoint's),
// and, for an agent, its calls are seen (agent.endpoints) or it reports its
// usage (agent.outputFormat); Claude Code reports its cost too.
func ModelCostKnown(m *v1alpha1.Model) bool {
	if m.Provider != v1alpha1.ProviderAgent || m.Agent == nil {
		return m.Pricing != nil
	}
	switch {
	case len(m.Agent.Endpoints) > 0:
		return m.Pricing != nil
	case m.Agent.OutputFormat == v1alpha1.AgentOutputClaudeCode:
		return true
	case m.Agent.OutputFormat == v1alpha1.AgentOutputCodex:
		return m.Pricing != nil
	}
	return false
}
