package controllers

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

func TestBudgetRaised(t *testing.T) {
	cost := func(c string) *v1alpha1.Budget { return &v1alpha1.Budget{MaxCost: ptr.To(v1alpha1.Number(c))} }
	tests := []struct {
		name   string
		was    *v1alpha1.SpendStatus
		budget *v1alpha1.Budget
		want   bool
	}{
		{"no spend recorded", nil, cost("10"), false},
		{"unchanged", &v1alpha1.SpendStatus{MaxCost: "10.000000"}, cost("10"), false},
		{"lowered", &v1alpha1.SpendStatus{MaxCost: "10.000000"}, cost("5"), false},
		{"raised", &v1alpha1.SpendStatus{MaxCost: "10.000000"}, cost("10.5"), true},
		{"removed", &v1alpha1.SpendStatus{MaxCost: "10.000000"}, nil, true},
		{"tokens raised", &v1alpha1.SpendStatus{MaxTokens: 1000}, &v1alpha1.Budget{MaxTokens: ptr.To[int64](2000)}, true},
		{"a cost limit added to a token budget", &v1alpha1.SpendStatus{MaxTokens: 1000}, &v1alpha1.Budget{MaxTokens: ptr.To[int64](1000), MaxCost: ptr.To(v1alpha1.Number("1"))}, false},
	}
	for _, tt := range tests {
		ev := &v1alpha1.Evaluation{Spec: v1alpha1.EvaluationSpec{Budget: tt.budget}, Status: v1alpha1.EvaluationStatus{Spend: tt.was}}
		if got := budgetRaised(ev); got != tt.want {
			t.Errorf("%s: budgetRaised = %v, want %v", tt.name, got, tt.want)
		}
	}
}
