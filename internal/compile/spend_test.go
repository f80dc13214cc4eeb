package compile_test

import (
	"testing"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/runner/spend"
)

func TestPricing(t *testing.T) {
	ev := decode(t, inlineDataset+`models:
- {name: own, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', pricing: {inputPerMillion: 2.5, outputPerMillion: 10}}
- {name: unpriced, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1'}
budget: {maxTokens: 1000000}
`)
	ev.Spec.Models = append(ev.Spec.Models, endpointModel("shared", "gpt-4.1-mini", nil),
		endpointModel("override", "gpt-4.1-mini", &v1alpha1.Pricing{InputPerMillion: "1", OutputPerMillion: "1"}),
		endpointModel("other", "gpt-4.1", nil))
	team := &v1alpha1.ModelEndpointSpec{Provider: "openai", BaseURL: "http://127.0.0.1:9/v1", Pricing: []v1alpha1.ModelPrice{
		{Model: "gpt-4.1-mini", Pricing: v1alpha1.Pricing{InputPerMillion: "0.4", OutputPerMillion: "1.6"}},
	}}
	for i := range ev.Spec.Models {
		if ev.Spec.Models[i].EndpointRef != nil {
			ev.Spec.Models[i].UseEndpoint(team)
		}
	}
	plan, err := compile.Build(t.Context(), ev, newEnv(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]spend.Amount{"own": 2_500_000, "shared": 400_000, "override": 1_000_000}
	for _, m := range plan.Models {
		w, priced := want[m.Name]
		switch {
		case priced && (m.Price == nil || m.Price.Input != w):
			t.Errorf("%s: price %+v, want input %d picodollars a token", m.Name, m.Price, w)
		case !priced && m.Price != nil:
			t.Errorf("%s: priced %+v, want unknown", m.Name, m.Price)
		}
	}
	if plan.AssumedOutputTokens != v1alpha1.DefaultAssumedOutputTokens {
		t.Errorf("AssumedOutputTokens %d", plan.AssumedOutputTokens)
	}
}

func TestBudgetNeedsPrices(t *testing.T) {
	ev := decode(t, inlineDataset+`models:
- {name: own, provider: openai, model: m, baseURL: 'http://127.0.0.1:9/v1', pricing: {inputPerMillion: 2.5, outputPerMillion: 10}}
budget: {maxCost: 5, assumedOutputTokens: 300}
`)
	ev.Spec.Models = append(ev.Spec.Models, endpointModel("other", "gpt-4.1", nil))
	ev.Spec.Models[1].UseEndpoint(&v1alpha1.ModelEndpointSpec{Provider: "openai", BaseURL: "http://127.0.0.1:9/v1"})
	_, err := compile.Build(t.Context(), ev, newEnv(t, nil))
	wantError(t, err, `spec.models[1] (other) has no price, so spec.budget.maxCost cannot be kept`,
		`a pricing entry for model "gpt-4.1" in ModelEndpoint team`)

	ev.Spec.Models = ev.Spec.Models[:1]
	plan, err := compile.Build(t.Context(), ev, newEnv(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if plan.AssumedOutputTokens != 300 {
		t.Errorf("AssumedOutputTokens %d, want 300", plan.AssumedOutputTokens)
	}
	limit, err := apiconv.SpendLimit(ev.Spec.Budget)
	if err != nil || limit != (spend.Limit{Cost: 5 * spend.Dollar}) {
		t.Errorf("Limit = %+v, %v", limit, err)
	}
}

// endpointModel is a model calling through ModelEndpoint "team".
func endpointModel(name, model string, pricing *v1alpha1.Pricing) v1alpha1.Model {
	return v1alpha1.Model{Name: name, EndpointRef: &v1alpha1.EndpointReference{Name: "team"}, Model: model, Pricing: pricing}
}
