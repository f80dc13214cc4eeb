package apiconv

import (
	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// LimitsOf is a model's rate limit as the engine's limiter and the budget count
// it; zero when the model has none.
func LimitsOf(r *v1alpha1.RateLimit) ratelimit.Limits {
	if r == nil {
		return ratelimit.Limits{}
	}
	return ratelimit.Limits{RequestsPerMinute: r.RequestsPerMinute, InputTokensPerMinute: r.InputTokensPerMinute, OutputTokensPerMinute: r.OutputTokensPerMinute}
}

// EndpointLimitsOf is a ModelEndpoint's limits as the limiter counts them.
func EndpointLimitsOf(l v1alpha1.EndpointLimits) ratelimit.Limits {
	return ratelimit.Limits{RequestsPerMinute: l.RequestsPerMinute, InputTokensPerMinute: l.InputTokensPerMinute,
		OutputTokensPerMinute: l.OutputTokensPerMinute, MaxInFlight: l.MaxInFlight}
}

// ModelLimits are the limits of the rate-limited models of spec, the models whose
// shares come from the Evaluation's budget; nil if none has a limit. A model
// calling through a ModelEndpoint takes its share from the endpoint's budget
// instead (its rateLimit caps it there).
func ModelLimits(spec *v1alpha1.EvaluationSpec) map[string]ratelimit.Limits {
	var out map[string]ratelimit.Limits
	for _, m := range spec.Models {
		l := LimitsOf(m.RateLimit)
		if l.IsZero() || m.EndpointRef != nil {
			continue
		}
		if out == nil {
			out = map[string]ratelimit.Limits{}
		}
		out[m.Name] = l
	}
	return out
}

// QuotaLimitsOf is a ModelQuota's limits as the limiter counts them.
func QuotaLimitsOf(q *v1alpha1.ModelQuota) ratelimit.Limits { return EndpointLimitsOf(q.Spec.Limits) }
