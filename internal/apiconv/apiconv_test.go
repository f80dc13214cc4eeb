package apiconv

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/compare"
)

func TestGate(t *testing.T) {
	n := func(s string) *v1alpha1.Number { v := v1alpha1.Number(s); return &v }
	for _, tc := range []struct {
		name string
		in   *v1alpha1.Gate
		want *compare.Gate
	}{
		{"none", nil, nil},
		{"the default significance, bounds as written", &v1alpha1.Gate{Rules: []v1alpha1.GateRule{{Metric: "exact_match", Model: "m", Min: n("0.80")}}},
			&compare.Gate{Significance: v1alpha1.DefaultSignificance, Rules: []compare.Rule{{Metric: "exact_match", Model: "m", Min: &compare.Bound{Value: 0.8, Text: "0.80"}}}}},
		{"significance and maxDrop", &v1alpha1.Gate{Significance: n("0.01"), Rules: []v1alpha1.GateRule{{Metric: "f1", Dataset: "d", MaxDrop: n("0")}}},
			&compare.Gate{Significance: 0.01, Rules: []compare.Rule{{Metric: "f1", Dataset: "d", MaxDrop: &compare.Bound{Value: 0, Text: "0"}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Gate(tc.in)); diff != "" {
				t.Errorf("Gate (-want +got):\n%s", diff)
			}
		})
	}
}
