package apiconv

import (
	"testing"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

func TestModelCostKnown(t *testing.T) {
	priced := &v1alpha1.Pricing{InputPerMillion: "1", OutputPerMillion: "2"}
	agent := func(format v1alpha1.AgentOutputFormat, endpoints int, pricing *v1alpha1.Pricing) v1alpha1.Model {
		a := &v1alpha1.Agent{Command: []string{"coder"}, OutputFormat: format}
		for range endpoints {
			a.Endpoints = append(a.Endpoints, v1alpha1.AgentEndpoint{EndpointRef: v1alpha1.EndpointReference{Name: "team"}})
		}
		return v1alpha1.Model{Name: "a", Provider: v1alpha1.ProviderAgent, Agent: a, Pricing: pricing}
	}
	tests := []struct {
		name  string
		model v1alpha1.Model
		want  bool
	}{
		{"a priced model", v1alpha1.Model{Name: "m", Provider: v1alpha1.ProviderOpenAI, Pricing: priced}, true},
		{"an unpriced model", v1alpha1.Model{Name: "m", Provider: v1alpha1.ProviderOpenAI}, false},
		{"an agent whose calls are unseen", agent(v1alpha1.AgentOutputText, 0, priced), false},
		{"a priced agent calling through endpoints", agent(v1alpha1.AgentOutputText, 1, priced), true},
		{"an unpriced agent calling through endpoints", agent(v1alpha1.AgentOutputText, 1, nil), false},
		{"Claude Code reports its cost", agent(v1alpha1.AgentOutputClaudeCode, 0, nil), true},
		{"Codex reports tokens only", agent(v1alpha1.AgentOutputCodex, 0, nil), false},
		{"Codex's tokens at its price", agent(v1alpha1.AgentOutputCodex, 0, priced), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ModelCostKnown(&tc.model); got != tc.want {
				t.Errorf("ModelCostKnown = %t, want %t", got, tc.want)
			}
		})
	}
}
