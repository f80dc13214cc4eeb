package v1alpha1

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateBaseline checks spec.baseline: exactly one source. A path is
// accepted here (a local run's); the API server refuses it.
func validateBaseline(b *Baseline, p *field.Path) field.ErrorList {
	if b == nil {
		return nil
	}
	var errs field.ErrorList
	n := 0
	for _, s := range []string{b.Evaluation, b.ConfigMap, b.Path} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		errs = append(errs, field.Invalid(p, n, "exactly one of evaluation, configMap or path must be set"))
	}
	if b.Evaluation != "" {
		errs = append(errs, validateObjectName(b.Evaluation, p.Child("evaluation"))...)
	}
	if b.ConfigMap != "" {
		errs = append(errs, validateObjectName(b.ConfigMap, p.Child("configMap"))...)
	}
	return errs
}

// validateGate checks spec.gate against the metrics, models and datasets it
// names.
func validateGate(spec *EvaluationSpec, p *field.Path) field.ErrorList {
	g := spec.Gate
	if g == nil {
		return nil
	}
	var errs field.ErrorList
	if len(g.Rules) == 0 {
		errs = append(errs, field.Required(p.Child("rules"), "a gate needs at least one rule"))
	}
	if g.Significance != nil {
		if v, err := g.Significance.Float64(); err != nil || v <= 0 || v > 0.5 {
			errs = append(errs, field.Invalid(p.Child("significance"), string(*g.Significance), "must be more than 0 and at most 0.5"))
		}
	}
	metrics, models, datasets := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i := range spec.Scoring {
		metrics[spec.Scoring[i].MetricName()] = true
	}
	for i := range spec.Models {
		models[spec.Models[i].Name] = true
	}
	for i := range spec.Datasets {
		datasets[spec.Datasets[i].Name] = true
	}
	for i := range g.Rules {
		r := &g.Rules[i]
		rp := p.Child("rules").Index(i)
		switch {
		case r.Metric == "":
			errs = append(errs, field.Required(rp.Child("metric"), "a metric of spec.scoring"))
		case !metrics[r.Metric]:
			errs = append(errs, field.Invalid(rp.Child("metric"), r.Metric, "must name a metric of spec.scoring (a scorer's name, else its type)"))
		}
		if r.Model != "" && !models[r.Model] {
			errs = append(errs, field.Invalid(rp.Child("model"), r.Model, "must name an entry of spec.models"))
		}
		if r.Dataset != "" && !datasets[r.Dataset] {
			errs = append(errs, field.Invalid(rp.Child("dataset"), r.Dataset, "must name an entry of spec.datasets"))
		}
		if r.Min == nil && r.MaxDrop == nil {
			errs = append(errs, field.Required(rp, "a gate rule needs min or maxDrop"))
		}
		if r.Min != nil {
			if v, err := r.Min.Float64(); err != nil {
				errs = append(errs, field.Invalid(rp.Child("min"), string(*r.Min), err.Error()))
			} else if v < 0 || v > 1 {
				errs = append(errs, field.Invalid(rp.Child("min"), string(*r.Min), "must be between 0 and 1, as scores are: no run could pass this gate"))
			}
		}
		if r.MaxDrop != nil {
			if v, err := r.MaxDrop.Float64(); err != nil || v < 0 || v > 1 {
				errs = append(errs, field.Invalid(rp.Child("maxDrop"), string(*r.MaxDrop), "must be a number between 0 and 1, as scores are"))
			}
			if spec.Baseline == nil {
				errs = append(errs, field.Required(field.NewPath("spec", "baseline"), "gate.rules[].maxDrop needs spec.baseline, the result a drop is measured from"))
			}
		}
	}
	return errs
}

// validateObjectName checks the name of an object in the Evaluation's namespace.
func validateObjectName(name string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// SignificanceLevel is the gate's significance level (its default if unset).
func (g *Gate) SignificanceLevel() float64 {
	if g == nil || g.Significance == nil {
		return DefaultSignificance
	}
	v, err := g.Significance.Float64()
	if err != nil {
		return DefaultSignificance
	}
	return v
}
