package v1alpha1

import (
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds the CRD markers say too (markers cannot name a constant).
const (
	MaxConcurrency = 10000
	MaxParallelism = 1000
	MaxShardSize   = 10000000
	MaxAttempts    = 100
	MaxModelName   = 40
	// MaxEndpointWeight bounds endpointRef.weight.
	MaxEndpointWeight = 1000
)

var (
	supportedProviders = []string{string(ProviderOpenAI), string(ProviderAnthropic), string(ProviderAgent)}
	supportedFormats   = []string{string(FormatJSONL), string(FormatJSON), string(FormatCSV)}
	supportedScorers   = []string{
		string(ScorerExactMatch), string(ScorerContains), string(ScorerRegex), string(ScorerNumeric),
		string(ScorerJSONMatch), string(ScorerToolCall), string(ScorerJudge),
	}
	supportedNormalizers = []string{"trim", "lowercase", "collapse_whitespace", "strip_punctuation", "number"}
	envNameRE            = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// SupportedProviders, SupportedScorers, SupportedNormalizers and SupportedFormats
// list what the API admits; the CRD's enums (from the markers) say the same,
// and tests keep them, and the runner's registries, in step.
func SupportedProviders() []string   { return slices.Clone(supportedProviders) }
func SupportedScorers() []string     { return slices.Clone(supportedScorers) }
func SupportedNormalizers() []string { return slices.Clone(supportedNormalizers) }
func SupportedFormats() []string     { return slices.Clone(supportedFormats) }

// ValidateLocal checks what the CRD's schema and rules cannot, for a local
// run, which validates an Evaluation with that schema and those rules first
// (internal/admission): the names of environment variables (corev1.EnvVar's
// name has no length bound, so the API server will not run a pattern over it
// at admission; in a cluster the names go into the pods' env, where the Pod's
// own validation applies). Errors name the field.
func ValidateLocal(spec *EvaluationSpec) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	for i := range spec.Models {
		if a := spec.Models[i].Agent; a != nil {
			errs = append(errs, validateEnvNames(a.Env, p.Child("models").Index(i).Child("agent", "env"))...)
		}
	}
	for i := range spec.Services {
		errs = append(errs, validateEnvNames(spec.Services[i].Env, p.Child("services").Index(i).Child("env"))...)
	}
	if h := spec.Hooks; h != nil {
		errs = append(errs, validateEnvNames(h.Env, p.Child("hooks", "env"))...)
	}
	return errs
}

func validateEnvNames(env []corev1.EnvVar, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, e := range env {
		if !envNameRE.MatchString(e.Name) {
			errs = append(errs, field.Invalid(p.Index(i).Child("name"), e.Name, "must be an environment variable name"))
		}
	}
	return errs
}
