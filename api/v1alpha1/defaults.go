package v1alpha1

import (
	"time"

	"k8s.io/utils/ptr"
)

// Defaults, said once: here, and in each field's documentation (what kubectl
// explain shows; TestDefaultsDocumented ties the two). The CRD sets none
// (no +kubebuilder:default): the controller and runner pods apply these to what
// they read, as a local run does, so an unset field means the same everywhere,
// and a stored Evaluation's spec, and so its run identity (SpecHash), does not
// change when a default does. Providers and the engine hold no copies: the
// compiler passes them the defaulted values.
const (
	DefaultConcurrency       = 10
	DefaultParallelism       = 4
	DefaultMaxAttempts       = 3
	DefaultInitialBackoff    = time.Second
	DefaultMaxBackoff        = 60 * time.Second
	DefaultMaxThrottleWait   = 10 * time.Minute
	DefaultTimeoutPerSample  = 2 * time.Minute
	DefaultPromptTemplate    = "{{ .Input }}"
	DefaultAnthropicMaxToken = 1024
	DefaultStallTimeout      = 5 * time.Minute
	DefaultEndpointWeight    = 1
	// DefaultBurst is what a rate limit's burst (a model's rateLimit, a
	// ModelEndpoint's or ModelQuota's limits) is when unset.
	DefaultBurst = time.Second
	// MaxAgentEndpoints bounds agent.endpoints.
	MaxAgentEndpoints = 8
	// MaxServices bounds spec.services.
	MaxServices              = 8
	DefaultSetupTimeout      = 10 * time.Minute
	DefaultSampleHookTimeout = time.Minute
	DefaultRepairTimeout     = 5 * time.Minute

	DefaultOpenAIBaseURL    = "https://api.openai.com/v1"
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	DefaultOpenAIKeyEnv     = "OPENAI_API_KEY"
	DefaultAnthropicKeyEnv  = "ANTHROPIC_API_KEY"
)

// SetDefaults fills the unset fields of spec that have a fixed default. Defaults that
// depend on the environment (a dataset's format from its file name, the controller's
// shard size) are resolved where that environment is known.
func SetDefaults(spec *EvaluationSpec) {
	if spec.Concurrency == nil {
		spec.Concurrency = ptr.To[int32](DefaultConcurrency)
	}
	if spec.Parallelism == nil {
		spec.Parallelism = ptr.To[int32](DefaultParallelism)
	}
	if spec.Retry == nil {
		spec.Retry = &RetryPolicy{}
	}
	if spec.Retry.MaxAttempts == nil {
		spec.Retry.MaxAttempts = ptr.To[int32](DefaultMaxAttempts)
	}
	if spec.Retry.InitialBackoff == nil {
		spec.Retry.InitialBackoff = &Backoff{Duration: DefaultInitialBackoff}
	}
	if spec.Retry.MaxBackoff == nil {
		spec.Retry.MaxBackoff = &Backoff{Duration: DefaultMaxBackoff}
	}
	if spec.Retry.MaxThrottleWait == nil {
		spec.Retry.MaxThrottleWait = &ThrottleWait{Duration: DefaultMaxThrottleWait}
	}
	if spec.TimeoutPerSample == nil {
		spec.TimeoutPerSample = &Timeout{Duration: DefaultTimeoutPerSample}
	}
	if spec.Prompt == nil {
		spec.Prompt = &Prompt{}
	}
	if spec.Prompt.Template == "" {
		spec.Prompt.Template = DefaultPromptTemplate
	}
	if spec.Cache == nil {
		spec.Cache = &Cache{}
	}
	for i := range spec.Models {
		if spec.Models[i].EndpointRef != nil {
			// Its endpoint's provider decides its defaults (UseEndpoint); a
			// provider written beside endpointRef must not make it a baseURL
			// nobody wrote.
			continue
		}
		spec.Models[i].setDefaults()
	}
	if h := spec.Hooks; h != nil {
		for _, hk := range []struct {
			hook *Hook
			def  time.Duration
		}{{h.Setup, DefaultSetupTimeout}, {h.BeforeSample, DefaultSampleHookTimeout}, {h.AfterSample, DefaultSampleHookTimeout}} {
			if hk.hook != nil && hk.hook.Timeout == nil {
				hk.hook.Timeout = &Timeout{Duration: hk.def}
			}
		}
		if h.RepairTimeout == nil {
			h.RepairTimeout = &Timeout{Duration: DefaultRepairTimeout}
		}
	}
	for i := range spec.Scoring {
		s := &spec.Scoring[i]
		if s.Type == ScorerToolCall && s.CheckArguments == nil {
			s.CheckArguments = ptr.To(true)
		}
	}
}

// setDefaults fills a model's provider defaults. A model with endpointRef has
// no provider until UseEndpoint gives it its endpoint's, and defaults it again.
func (m *Model) setDefaults() {
	if m.BaseURL == "" {
		switch m.Provider {
		case ProviderOpenAI:
			m.BaseURL = DefaultOpenAIBaseURL
		case ProviderAnthropic:
			m.BaseURL = DefaultAnthropicBaseURL
		}
	}
	if m.APIKey != nil && m.APIKey.Env == "" {
		m.APIKey.Env = DefaultAPIKeyEnv(m.Provider)
	}
}

// DefaultAPIKeyEnv is the environment variable a provider's key is read from when
// the model does not name one; "" for providers that have none.
func DefaultAPIKeyEnv(p Provider) string {
	switch p {
	case ProviderOpenAI:
		return DefaultOpenAIKeyEnv
	case ProviderAnthropic:
		return DefaultAnthropicKeyEnv
	}
	return ""
}

// MetricName is the name of the metric a scorer produces.
func (s *Scorer) MetricName() string {
	if s.Name != "" {
		return s.Name
	}
	return string(s.Type)
}

// JudgeModels returns the names of the models that judge scorers use.
func (spec *EvaluationSpec) JudgeModels() map[string]bool {
	judges := map[string]bool{}
	for _, s := range spec.Scoring {
		if s.Type == ScorerJudge && s.Judge != nil {
			judges[s.Judge.Model] = true
		}
	}
	return judges
}

// Limited applies the dataset's limit to a count of its records.
func (d *Dataset) Limited(n int) int {
	if d.Limit > 0 && int64(n) > d.Limit {
		return int(d.Limit)
	}
	return n
}

// BurstOf is a burst setting, defaulted.
func BurstOf(d *Burst) time.Duration {
	if d == nil || d.Duration <= 0 {
		return DefaultBurst
	}
	return d.Duration
}
