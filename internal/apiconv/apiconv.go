// Package apiconv converts the API's types into the runner's plain ones,
// for the controller and local runs alike: the runner has no Kubernetes, and
// this package none beyond the API types (no controller-runtime).
package apiconv

import (
	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/compare"
)

// Gate is spec.gate as compare checks it; nil for none. Its numbers were
// validated at admission (or before a local run).
func Gate(g *v1alpha1.Gate) *compare.Gate {
	if g == nil {
		return nil
	}
	out := &compare.Gate{Significance: g.SignificanceLevel()}
	for _, r := range g.Rules {
		out.Rules = append(out.Rules, compare.Rule{Metric: r.Metric, Model: r.Model, Dataset: r.Dataset, Min: bound(r.Min), MaxDrop: bound(r.MaxDrop)})
	}
	return out
}

func bound(n *v1alpha1.Number) *compare.Bound {
	if n == nil {
		return nil
	}
	v, _ := n.Float64()
	return &compare.Bound{Value: v, Text: string(*n)}
}
