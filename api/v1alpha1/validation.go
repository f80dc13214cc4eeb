package v1alpha1

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds shared by the CRD markers and ValidateSpec.
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
	metricNameRE         = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	envNameRE            = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	sha256RE             = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// SupportedProviders, SupportedScorers, SupportedNormalizers and SupportedFormats
// list what the API admits; the CRD's enums (from the markers) say the same,
// and tests keep them, and the runner's registries, in step.
func SupportedProviders() []string   { return slices.Clone(supportedProviders) }
func SupportedScorers() []string     { return slices.Clone(supportedScorers) }
func SupportedNormalizers() []string { return slices.Clone(supportedNormalizers) }
func SupportedFormats() []string     { return slices.Clone(supportedFormats) }

// ValidateSpec checks an Evaluation spec the way the API server's schema and CEL
// rules do, so that a local run rejects what admission would. Errors name the field.
func ValidateSpec(spec *EvaluationSpec) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	errs = append(errs, validateDatasets(spec.Datasets, p.Child("datasets"))...)
	errs = append(errs, validateModels(spec, p.Child("models"))...)
	errs = append(errs, validateScoring(spec, p.Child("scoring"))...)
	errs = append(errs, validateBound(spec.Concurrency, 1, MaxConcurrency, p.Child("concurrency"))...)
	errs = append(errs, validateBound(spec.Parallelism, 1, MaxParallelism, p.Child("parallelism"))...)
	errs = append(errs, validateBound(spec.ShardSize, 1, MaxShardSize, p.Child("shardSize"))...)
	if r := spec.Retry; r != nil {
		rp := p.Child("retry")
		errs = append(errs, validateBound(r.MaxAttempts, 1, MaxAttempts, rp.Child("maxAttempts"))...)
		errs = append(errs, validateDuration(r.InitialBackoff, false, rp.Child("initialBackoff"))...)
		errs = append(errs, validateDuration(r.MaxBackoff, false, rp.Child("maxBackoff"))...)
		if d := r.MaxThrottleWait; d != nil && d.Duration < time.Second {
			errs = append(errs, field.Invalid(rp.Child("maxThrottleWait"), d.Duration.String(), "must be at least 1s"))
		} else {
			errs = append(errs, validateDuration(d, true, rp.Child("maxThrottleWait"))...)
		}
		if r.InitialBackoff != nil && r.MaxBackoff != nil && r.MaxBackoff.Duration >= 0 && r.InitialBackoff.Duration > r.MaxBackoff.Duration {
			errs = append(errs, field.Invalid(rp.Child("initialBackoff"), r.InitialBackoff.Duration.String(),
				"must not be longer than maxBackoff"))
		}
	}
	errs = append(errs, validateDuration(spec.TimeoutPerSample, true, p.Child("timeoutPerSample"))...)
	errs = append(errs, validateServices(spec.Services, p.Child("services"))...)
	errs = append(errs, validateHooks(spec, p.Child("hooks"))...)
	errs = append(errs, validateBudget(spec, p.Child("budget"))...)
	errs = append(errs, validateBaseline(spec.Baseline, p.Child("baseline"))...)
	errs = append(errs, validateGate(spec, p.Child("gate"))...)
	return errs
}

func validateDatasets(datasets []Dataset, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(datasets) == 0 {
		errs = append(errs, field.Required(p, "at least one dataset is needed"))
	}
	seen := sets.New[string]()
	for i := range datasets {
		d := &datasets[i]
		dp := p.Index(i)
		errs = append(errs, validateName(d.Name, 63, dp.Child("name"))...)
		if seen.Has(d.Name) {
			errs = append(errs, field.Duplicate(dp.Child("name"), d.Name))
		}
		seen.Insert(d.Name)
		errs = append(errs, validateSource(&d.Source, dp.Child("source"))...)
		if d.Format != "" && !sets.New(supportedFormats...).Has(string(d.Format)) {
			errs = append(errs, field.NotSupported(dp.Child("format"), d.Format, supportedFormats))
		}
		if d.Limit < 0 {
			errs = append(errs, field.Invalid(dp.Child("limit"), d.Limit, "must be 0 (all samples) or more"))
		}
	}
	return errs
}

func validateSource(s *DatasetSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	var set []string
	if len(s.Inline) > 0 {
		set = append(set, "inline")
	}
	if s.ConfigMap != nil {
		set = append(set, "configMap")
		if s.ConfigMap.Name == "" {
			errs = append(errs, field.Required(p.Child("configMap", "name"), ""))
		}
		if s.ConfigMap.Key == "" {
			errs = append(errs, field.Required(p.Child("configMap", "key"), ""))
		}
	}
	if s.URL != "" {
		set = append(set, "url")
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("url"), s.URL, "must be an http or https URL"))
		}
	}
	if s.PVC != nil {
		set = append(set, "pvc")
		if s.PVC.ClaimName == "" {
			errs = append(errs, field.Required(p.Child("pvc", "claimName"), ""))
		}
		if s.PVC.Path == "" {
			errs = append(errs, field.Required(p.Child("pvc", "path"), ""))
		} else if !isLocalPath(s.PVC.Path) {
			errs = append(errs, field.Invalid(p.Child("pvc", "path"), s.PVC.Path, "must be a relative path inside the volume"))
		}
	}
	if s.File != "" {
		set = append(set, "file")
	}
	switch len(set) {
	case 0:
		errs = append(errs, field.Required(p, "exactly one of inline, configMap, url, pvc or file must be set"))
	case 1:
	default:
		errs = append(errs, field.Invalid(p, strings.Join(set, ", "),
			"exactly one of inline, configMap, url, pvc or file must be set"))
	}
	if s.SHA256 != "" {
		if s.URL == "" {
			errs = append(errs, field.Forbidden(p.Child("sha256"), "only applies to url"))
		} else if !sha256RE.MatchString(s.SHA256) {
			errs = append(errs, field.Invalid(p.Child("sha256"), s.SHA256, "must be 64 hexadecimal digits"))
		}
	}
	return errs
}

func validateModels(spec *EvaluationSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(spec.Models) == 0 {
		return append(errs, field.Required(p, "at least one model is needed"))
	}
	seen := sets.New[string]()
	judges := spec.JudgeModels()
	subjects := 0
	for i := range spec.Models {
		m := &spec.Models[i]
		mp := p.Index(i)
		errs = append(errs, validateName(m.Name, MaxModelName, mp.Child("name"))...)
		if seen.Has(m.Name) {
			errs = append(errs, field.Duplicate(mp.Child("name"), m.Name))
		}
		seen.Insert(m.Name)
		if !judges[m.Name] {
			subjects++
		}
		switch {
		case m.EndpointRef != nil:
			errs = append(errs, validateEndpointRef(m, mp)...)
		case !sets.New(supportedProviders...).Has(string(m.Provider)):
			if m.Provider == "" {
				errs = append(errs, field.Required(mp.Child("provider"), "one of openai, anthropic or agent, or endpointRef naming a ModelEndpoint"))
			} else {
				errs = append(errs, field.NotSupported(mp.Child("provider"), m.Provider, supportedProviders))
			}
			continue
		case m.Provider == ProviderAgent:
			if m.Agent == nil {
				errs = append(errs, field.Required(mp.Child("agent"), "an agent model needs agent.command"))
			}
			if m.Parameters != nil {
				errs = append(errs, field.Forbidden(mp.Child("parameters"), "agents take no sampling parameters"))
			}
			if m.BaseURL != "" {
				errs = append(errs, field.Forbidden(mp.Child("baseURL"), "agents call no API themselves"))
			}
		default:
			if m.Agent != nil {
				errs = append(errs, field.Forbidden(mp.Child("agent"), "only for provider agent"))
			}
			if m.Model == "" {
				errs = append(errs, field.Required(mp.Child("model"), fmt.Sprintf("the %s model identifier", m.Provider)))
			}
		}
		errs = append(errs, validateEndpointFields(m.BaseURL, m.APIKey, mp)...)
		if m.APIKey != nil && m.APIKey.Env == "" && m.Provider == ProviderAgent {
			errs = append(errs, field.Required(mp.Child("apiKey", "env"), "the variable the agent reads its key from"))
		}
		errs = append(errs, validateParameters(m.Parameters, mp.Child("parameters"))...)
		if r := m.RateLimit; r != nil {
			errs = append(errs, validateRates(mp.Child("rateLimit"), r.RequestsPerMinute, r.InputTokensPerMinute, r.OutputTokensPerMinute)...)
			errs = append(errs, validateBurst(r.Burst, mp.Child("rateLimit", "burst"))...)
		}
		errs = append(errs, validateBound(m.Concurrency, 1, MaxConcurrency, mp.Child("concurrency"))...)
		if m.Agent != nil {
			errs = append(errs, validateAgent(m.Agent, mp.Child("agent"))...)
		}
		errs = append(errs, validatePricing(m.Pricing, mp.Child("pricing"))...)
		errs = append(errs, validateBatch(m, mp.Child("batch"))...)
	}
	if subjects == 0 {
		errs = append(errs, field.Invalid(p, len(spec.Models), "every model is a judge: at least one model must be evaluated"))
	}
	return errs
}

// validateEndpointRef checks a model that takes its provider, baseURL, apiKey
// and headers from a ModelEndpoint.
func validateEndpointRef(m *Model, mp *field.Path) field.ErrorList {
	var errs field.ErrorList
	rp := mp.Child("endpointRef")
	if m.Provider != "" {
		errs = append(errs, field.Forbidden(mp.Child("provider"), "a model needs exactly one of provider or endpointRef (whose ModelEndpoint says the provider)"))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"baseURL", m.BaseURL != ""}, {"apiKey", m.APIKey != nil}, {"headers", m.Headers != nil}} {
		if f.set {
			errs = append(errs, field.Forbidden(mp.Child(f.name), "a model with endpointRef takes it from its ModelEndpoint"))
		}
	}
	if m.Agent != nil {
		errs = append(errs, field.Forbidden(mp.Child("agent"), "only for provider agent"))
	}
	if m.Model == "" {
		errs = append(errs, field.Required(mp.Child("model"), "the provider's model identifier"))
	}
	return append(errs, validateEndpointReference(m.EndpointRef, rp)...)
}

// validateEndpointReference checks a reference to a ModelEndpoint: a model's
// or an agent's.
func validateEndpointReference(ref *EndpointReference, rp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ref.Name == "" {
		errs = append(errs, field.Required(rp.Child("name"), "the ModelEndpoint's name"))
	} else {
		for _, msg := range validation.IsDNS1123Label(ref.Name) {
			errs = append(errs, field.Invalid(rp.Child("name"), ref.Name, msg))
		}
	}
	if len(ref.Namespace) > 63 {
		errs = append(errs, field.TooLong(rp.Child("namespace"), ref.Namespace, 63))
	}
	return append(errs, validateBound(ref.Weight, 1, MaxEndpointWeight, rp.Child("weight"))...)
}

// validateAgentEndpoints checks agent.endpoints: each endpoint once, each
// with two variables of its own.
func validateAgentEndpoints(eps []AgentEndpoint, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(eps) > MaxAgentEndpoints {
		errs = append(errs, field.TooMany(p, len(eps), MaxAgentEndpoints))
	}
	names, vars := sets.New[string](), sets.New[string]()
	for i := range eps {
		e := &eps[i]
		ep := p.Index(i)
		errs = append(errs, validateEndpointReference(&e.EndpointRef, ep.Child("endpointRef"))...)
		if names.Has(e.EndpointRef.Name) {
			errs = append(errs, field.Duplicate(ep.Child("endpointRef", "name"), e.EndpointRef.Name))
		}
		names.Insert(e.EndpointRef.Name)
		for _, v := range []struct{ name, value string }{{"baseURLEnv", e.BaseURLEnv}, {"apiKeyEnv", e.APIKeyEnv}} {
			switch {
			case v.value == "":
				errs = append(errs, field.Required(ep.Child(v.name), "the variable the agent reads it from"))
			case !envNameRE.MatchString(v.value):
				errs = append(errs, field.Invalid(ep.Child(v.name), v.value, "must be an environment variable name"))
			case vars.Has(v.value):
				errs = append(errs, field.Duplicate(ep.Child(v.name), v.value))
			}
			vars.Insert(v.value)
		}
	}
	return errs
}

// ValidateEndpoint checks a ModelEndpoint the way the API server's schema and
// CEL rules do, for a local run's file.
func ValidateEndpoint(ep *ModelEndpoint) field.ErrorList {
	var errs field.ErrorList
	np := field.NewPath("metadata", "name")
	if ep.Name == "" {
		errs = append(errs, field.Required(np, "a ModelEndpoint needs a name: models refer to it by name"))
	} else {
		for _, msg := range validation.IsDNS1123Label(ep.Name) {
			errs = append(errs, field.Invalid(np, ep.Name, msg))
		}
	}
	p := field.NewPath("spec")
	switch ep.Spec.Provider {
	case EndpointProvider(ProviderOpenAI), EndpointProvider(ProviderAnthropic):
	case "":
		errs = append(errs, field.Required(p.Child("provider"), "openai or anthropic"))
	default:
		errs = append(errs, field.NotSupported(p.Child("provider"), ep.Spec.Provider, []string{string(ProviderOpenAI), string(ProviderAnthropic)}))
	}
	errs = append(errs, validateEndpointFields(ep.Spec.BaseURL, ep.Spec.APIKey, p)...)
	if l := ep.Spec.Limits; l != nil {
		errs = append(errs, validateEndpointLimits(p.Child("limits"), l)...)
	}
	seen := sets.New[string]()
	for i := range ep.Spec.Pricing {
		pp := p.Child("pricing").Index(i)
		mp := &ep.Spec.Pricing[i]
		if mp.Model == "" {
			errs = append(errs, field.Required(pp.Child("model"), "the model identifier it prices"))
		} else if seen.Has(mp.Model) {
			errs = append(errs, field.Duplicate(pp.Child("model"), mp.Model))
		}
		seen.Insert(mp.Model)
		errs = append(errs, validatePricing(&mp.Pricing, pp.Child("pricing"))...)
	}
	return errs
}

// validateEndpointFields checks where calls go and the key's variable, which
// a model and a ModelEndpoint both say (p is the model's or the spec's path).
func validateEndpointFields(baseURL string, key *APIKey, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if baseURL != "" {
		if u, err := url.Parse(baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("baseURL"), baseURL, "must be an http or https URL"))
		}
	}
	if key != nil && key.Env != "" && !envNameRE.MatchString(key.Env) {
		errs = append(errs, field.Invalid(p.Child("apiKey", "env"), key.Env, "must be an environment variable name"))
	}
	return errs
}

// ValidateQuota checks a ModelQuota the way the API server's schema and CEL
// rules do, for a local run's file.
func ValidateQuota(q *ModelQuota) field.ErrorList {
	var errs field.ErrorList
	np := field.NewPath("metadata", "name")
	if q.Name == "" {
		errs = append(errs, field.Required(np, "a ModelQuota needs a name: endpoints refer to it by name"))
	}
	lp := field.NewPath("spec", "limits")
	l := q.Spec.Limits
	errs = append(errs, validateEndpointLimits(lp, &l)...)
	if l.RequestsPerMinute <= 0 && l.InputTokensPerMinute <= 0 && l.OutputTokensPerMinute <= 0 && l.MaxInFlight <= 0 {
		errs = append(errs, field.Required(lp, "a ModelQuota needs at least one limit above 0"))
	}
	return errs
}

// validateEndpointLimits checks a ModelEndpoint's or a ModelQuota's limits.
func validateEndpointLimits(p *field.Path, l *EndpointLimits) field.ErrorList {
	errs := validateRates(p, l.RequestsPerMinute, l.InputTokensPerMinute, l.OutputTokensPerMinute)
	if l.MaxInFlight < 0 {
		errs = append(errs, field.Invalid(p.Child("maxInFlight"), l.MaxInFlight, "must be 0 (unlimited) or more"))
	}
	return append(errs, validateBurst(l.Burst, p.Child("burst"))...)
}

// validateBurst checks a limits' burst: between 1s and 1m.
func validateBurst(d *metav1.Duration, p *field.Path) field.ErrorList {
	if d == nil || (d.Duration >= time.Second && d.Duration <= time.Minute) {
		return nil
	}
	return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be at least 1s and at most 1m")}
}

// validateRates checks per-minute limits (a rateLimit, an endpoint's limits):
// none negative.
func validateRates(p *field.Path, requests, inputTokens, outputTokens int64) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		name string
		v    int64
	}{{"requestsPerMinute", requests}, {"inputTokensPerMinute", inputTokens}, {"outputTokensPerMinute", outputTokens}} {
		if f.v < 0 {
			errs = append(errs, field.Invalid(p.Child(f.name), f.v, "must be 0 (unlimited) or more"))
		}
	}
	return errs
}

func validateParameters(prm *Parameters, p *field.Path) field.ErrorList {
	if prm == nil {
		return nil
	}
	var errs field.ErrorList
	numberIn := func(n *Number, lo, hi float64, fp *field.Path) {
		if n == nil {
			return
		}
		f, err := n.Float64()
		if err != nil {
			errs = append(errs, field.Invalid(fp, string(*n), err.Error()))
		} else if f < lo || f > hi {
			errs = append(errs, field.Invalid(fp, f, fmt.Sprintf("must be between %g and %g", lo, hi)))
		}
	}
	numberIn(prm.Temperature, 0, 2, p.Child("temperature"))
	numberIn(prm.TopP, 0, 1, p.Child("topP"))
	if prm.MaxTokens != nil && *prm.MaxTokens < 1 {
		errs = append(errs, field.Invalid(p.Child("maxTokens"), *prm.MaxTokens, "must be at least 1"))
	}
	return errs
}

func validateAgent(a *Agent, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(a.Command) == 0 || strings.TrimSpace(a.Command[0]) == "" {
		errs = append(errs, field.Required(p.Child("command"), "the agent's argv, e.g. [\"agent-cli\", \"-p\", \"{{ .Prompt }}\"]"))
	}
	for name := range a.Files {
		if !isLocalPath(name) {
			errs = append(errs, field.Invalid(p.Child("files").Key(name), name, "must be a relative path inside the workspace"))
		}
	}
	errs = append(errs, validateEnvNames(a.Env, p.Child("env"))...)
	errs = append(errs, validateDuration(a.Timeout, true, p.Child("timeout"))...)
	switch a.OutputFormat {
	case "", AgentOutputText, AgentOutputClaudeCode, AgentOutputCodex:
	default:
		errs = append(errs, field.NotSupported(p.Child("outputFormat"), a.OutputFormat,
			[]string{string(AgentOutputText), string(AgentOutputClaudeCode), string(AgentOutputCodex)}))
	}
	return append(errs, validateAgentEndpoints(a.Endpoints, p.Child("endpoints"))...)
}

func validateScoring(spec *EvaluationSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	models := map[string]*Model{}
	for i := range spec.Models {
		models[spec.Models[i].Name] = &spec.Models[i]
	}
	seen := sets.New[string]()
	for i := range spec.Scoring {
		s := &spec.Scoring[i]
		sp := p.Index(i)
		if !sets.New(supportedScorers...).Has(string(s.Type)) {
			if s.Type == "" {
				errs = append(errs, field.Required(sp.Child("type"), ""))
			} else {
				errs = append(errs, field.NotSupported(sp.Child("type"), s.Type, supportedScorers))
			}
			continue
		}
		if s.Name != "" && !metricNameRE.MatchString(s.Name) {
			errs = append(errs, field.Invalid(sp.Child("name"), s.Name, "must be letters, digits, '-', '_' or '.'"))
		}
		if seen.Has(s.MetricName()) {
			errs = append(errs, field.Duplicate(sp.Child("name"), s.MetricName()))
		}
		seen.Insert(s.MetricName())
		for j, n := range s.Normalize {
			if !sets.New(supportedNormalizers...).Has(string(n)) {
				errs = append(errs, field.NotSupported(sp.Child("normalize").Index(j), n, supportedNormalizers))
			}
		}
		if s.Pattern != "" {
			if s.Type != ScorerRegex {
				errs = append(errs, field.Forbidden(sp.Child("pattern"), "only applies to the regex scorer"))
			} else if _, err := regexp.Compile(s.Pattern); err != nil {
				errs = append(errs, field.Invalid(sp.Child("pattern"), s.Pattern, err.Error()))
			}
		}
		if s.Tolerance != nil {
			if s.Type != ScorerNumeric {
				errs = append(errs, field.Forbidden(sp.Child("tolerance"), "only applies to the numeric scorer"))
			} else if f, err := s.Tolerance.Float64(); err != nil || f < 0 {
				errs = append(errs, field.Invalid(sp.Child("tolerance"), string(*s.Tolerance), "must be a number, 0 or more"))
			}
		}
		if s.CheckArguments != nil && s.Type != ScorerToolCall {
			errs = append(errs, field.Forbidden(sp.Child("checkArguments"), "only applies to the tool_call scorer"))
		}
		switch {
		case s.Type == ScorerJudge && s.Judge == nil:
			errs = append(errs, field.Required(sp.Child("judge"), "a judge scorer needs judge.model"))
		case s.Type != ScorerJudge && s.Judge != nil:
			errs = append(errs, field.Forbidden(sp.Child("judge"), "only applies to the judge scorer"))
		case s.Judge != nil:
			jp := sp.Child("judge", "model")
			m, ok := models[s.Judge.Model]
			switch {
			case s.Judge.Model == "":
				errs = append(errs, field.Required(jp, "the name of an entry of spec.models"))
			case !ok:
				errs = append(errs, field.Invalid(jp, s.Judge.Model, "must name an entry of spec.models"))
			case m.Provider == ProviderAgent:
				errs = append(errs, field.Invalid(jp, s.Judge.Model, "a judge must be an openai or anthropic model, not an agent"))
			}
		}
	}
	return errs
}

func validateName(name string, maxLen int, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	if len(name) > maxLen && len(errs) == 0 {
		errs = append(errs, field.TooLong(p, name, maxLen))
	}
	return errs
}

func validateBound(v *int32, lo, hi int32, p *field.Path) field.ErrorList {
	if v == nil || (*v >= lo && *v <= hi) {
		return nil
	}
	return field.ErrorList{field.Invalid(p, *v, fmt.Sprintf("must be between %d and %d", lo, hi))}
}

func validateDuration(d *metav1.Duration, positive bool, p *field.Path) field.ErrorList {
	switch {
	case d == nil:
		return nil
	case positive && d.Duration <= 0:
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be longer than 0s")}
	case d.Duration < 0:
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must not be negative")}
	case d.Duration > 24*time.Hour:
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be at most 24h")}
	}
	return nil
}

// isLocalPath reports whether p is a clean relative path that stays inside its root.
func isLocalPath(p string) bool {
	if p == "" || path.IsAbs(p) || strings.HasPrefix(p, "\\") {
		return false
	}
	c := path.Clean(p)
	return c != "." && c != ".." && !strings.HasPrefix(c, "../")
}
