package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxPricePerMillion bounds a price per million tokens, in dollars.
const MaxPricePerMillion = 100000

func validatePricing(pr *Pricing, p *field.Path) field.ErrorList {
	if pr == nil {
		return nil
	}
	var errs field.ErrorList
	price := func(n *Number, name string, required bool) {
		fp := p.Child(name)
		if n == nil || *n == "" {
			if required {
				errs = append(errs, field.Required(fp, "dollars per million tokens"))
			}
			return
		}
		v, err := n.Float64()
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(fp, string(*n), err.Error()))
		case v < 0 || v > MaxPricePerMillion:
			errs = append(errs, field.Invalid(fp, string(*n), "must be between 0 and 100000 dollars per million tokens"))
		}
	}
	price(&pr.InputPerMillion, "inputPerMillion", true)
	price(&pr.OutputPerMillion, "outputPerMillion", true)
	price(pr.CachedInputPerMillion, "cachedInputPerMillion", false)
	price(pr.CacheWriteInputPerMillion, "cacheWriteInputPerMillion", false)
	price(pr.BatchInputPerMillion, "batchInputPerMillion", false)
	price(pr.BatchOutputPerMillion, "batchOutputPerMillion", false)
	if (pr.BatchInputPerMillion == nil) != (pr.BatchOutputPerMillion == nil) {
		errs = append(errs, field.Required(p.Child("batchInputPerMillion"), "give both batch prices, or neither (half the synchronous prices)"))
	}
	return errs
}

func validateBudget(spec *EvaluationSpec, p *field.Path) field.ErrorList {
	b := spec.Budget
	if b == nil {
		return nil
	}
	var errs field.ErrorList
	if b.MaxCost == nil && b.MaxTokens == nil {
		errs = append(errs, field.Required(p, "a budget needs maxCost, maxTokens or both"))
	}
	if b.MaxCost != nil {
		if v, err := b.MaxCost.Float64(); err != nil {
			errs = append(errs, field.Invalid(p.Child("maxCost"), string(*b.MaxCost), err.Error()))
		} else if v < 0 {
			errs = append(errs, field.Invalid(p.Child("maxCost"), string(*b.MaxCost), "must be 0 or more dollars"))
		}
	}
	if b.MaxTokens != nil && *b.MaxTokens < 1 {
		errs = append(errs, field.Invalid(p.Child("maxTokens"), *b.MaxTokens, "must be at least 1"))
	}
	errs = append(errs, validateBound(b.AssumedOutputTokens, 1, 1000000, p.Child("assumedOutputTokens"))...)
	for i := range spec.Models {
		m := &spec.Models[i]
		mp := field.NewPath("spec", "models").Index(i)
		if m.Provider == ProviderAgent && (m.Agent == nil || len(m.Agent.Endpoints) == 0) {
			errs = append(errs, field.Invalid(mp.Child("agent", "endpoints"), m.Name,
				"spec.budget cannot bound an agent that calls its API itself: give it agent.endpoints, so that its calls go through Proctor and are counted"))
		}
		if b.MaxCost != nil && m.Pricing == nil && m.EndpointRef == nil {
			errs = append(errs, field.Required(mp.Child("pricing"),
				"spec.budget.maxCost needs every model's pricing (a model with endpointRef may take it from its ModelEndpoint)"))
		}
	}
	return errs
}

func validateBatch(m *Model, p *field.Path) field.ErrorList {
	b := m.Batch
	if b == nil {
		return nil
	}
	var errs field.ErrorList
	if m.Provider == ProviderAgent {
		errs = append(errs, field.Forbidden(p, "agents call no batch API"))
	}
	errs = append(errs, validateBound(b.MaxRequests, 1, 100000, p.Child("maxRequests"))...)
	errs = append(errs, validateBound(b.MaxInFlight, 1, 100, p.Child("maxInFlight"))...)
	if b.CompletionWindow != "" && b.CompletionWindow != "24h" {
		errs = append(errs, field.NotSupported(p.Child("completionWindow"), b.CompletionWindow, []string{"24h"}))
	}
	if d := b.PollInterval; d != nil && (d.Duration < 100*time.Millisecond || d.Duration > time.Hour) {
		errs = append(errs, field.Invalid(p.Child("pollInterval"), d.Duration.String(), "must be between 100ms and 1h"))
	}
	switch b.RetryFailed {
	case "", BatchRetryBatch, BatchRetrySync, BatchRetryNone:
	default:
		errs = append(errs, field.NotSupported(p.Child("retryFailed"), b.RetryFailed, []string{"batch", "sync", "none"}))
	}
	errs = append(errs, validateDuration(b.Deadline, true, p.Child("deadline"))...)
	return errs
}
