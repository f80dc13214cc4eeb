package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EndpointProvider is the API a ModelEndpoint speaks.
// +kubebuilder:validation:Enum=openai;anthropic
type EndpointProvider string

// ModelEndpointSpec is one provider account or API key: where calls go, the
// key they carry, and the limits the provider enforces on that key.
type ModelEndpointSpec struct {
	// provider is openai (any OpenAI-compatible chat completions server) or
	// anthropic (the Messages API).
	// +required
	Provider EndpointProvider `json:"provider"`

	// baseURL of the API, http or https. Default https://api.openai.com/v1 for
	// openai and https://api.anthropic.com for anthropic.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule=`self == '' || (isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHost() != '')`,message="baseURL must be an http or https URL"
	BaseURL string `json:"baseURL,omitempty"`

	// apiKey says where the key comes from: secretKeyRef, a Secret in the
	// ModelEndpoint's namespace (cluster mode), or env (local runs; default
	// OPENAI_API_KEY or ANTHROPIC_API_KEY). Omit it for servers that need none.
	// +optional
	APIKey *APIKey `json:"apiKey,omitempty"`

	// headers are extra, non-secret HTTP headers sent with every call.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Headers map[string]string `json:"headers,omitempty"`

	// limits are what the provider allows this key, shared by every Evaluation
	// that calls through the endpoint, fairly by weight: each
	// model referring to it gets a share in proportion to its endpointRef.weight,
	// within its own rateLimit, and what one does not take goes to the others.
	// Unset or 0 limits are not enforced up front (429 answers are still
	// waited out). Edits apply at once to running Evaluations.
	// +optional
	Limits *EndpointLimits `json:"limits,omitempty"`

	// quotaRef names a cluster-wide ModelQuota whose limits this endpoint
	// shares with the endpoints of other namespaces that name it (one provider
	// account, each namespace with its own key). The endpoint's own limits, if
	// set, then cap its part of the quota; until it has a part, the
	// Evaluations calling through it wait.
	// +optional
	QuotaRef *QuotaReference `json:"quotaRef,omitempty"`

	// pricing prices the model identifiers called through the endpoint; a
	// model's own pricing overrides it. An agent's calls through the endpoint
	// (agent.endpoints) are priced by the model id each request asks for,
	// when listed here. At most 64, each model once.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=model
	Pricing []ModelPrice `json:"pricing,omitempty"`
}

// EndpointLimits are per-minute budgets and a bound on calls in flight; 0 or
// unset means unlimited.
type EndpointLimits struct {
	// requestsPerMinute caps the calls per minute, over any sliding minute.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`

	// inputTokensPerMinute caps the input (prompt) tokens sent per minute.
	// Input tokens are estimated before each call and corrected from the usage
	// the server reports.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InputTokensPerMinute int64 `json:"inputTokensPerMinute,omitempty"`

	// outputTokensPerMinute caps the output (completion) tokens received per
	// minute.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OutputTokensPerMinute int64 `json:"outputTokensPerMinute,omitempty"`

	// maxInFlight caps the requests in flight at once through the endpoint,
	// across every Evaluation calling through it (a provider's concurrency
	// limit, or what a self-hosted server can batch). It is divided like the
	// per-minute limits: a runner pod whose share is 0 waits for one. 0 or
	// unset: no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxInFlight int64 `json:"maxInFlight,omitempty"`

	// burst is how much of each per-minute limit the provider lets through at
	// once, as the time the limit takes to refill it. Providers enforce rate
	// limits as token buckets refilled continuously, and may enforce a
	// per-minute limit over shorter periods (Anthropic: a 60 RPM limit may be
	// enforced as 1 request per second). Default 1s: a bucket holds a
	// sixtieth of each limit, at least one request, and the calls of every
	// runner pod through the key together stay within it. A provider whose
	// buckets hold more may say so, up to 1m. A duration between 1s and 1m.
	// +optional
	Burst *Burst `json:"burst,omitempty"`
}

// EndpointReference names a ModelEndpoint in the Evaluation's namespace.
type EndpointReference struct {
	// name of the ModelEndpoint.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// namespace of the ModelEndpoint, if set, must be the Evaluation's own: a
	// ModelEndpoint holds a namespace's key, which only that namespace's
	// Evaluations may use.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// weight of this model's share of the endpoint's limits against the other
	// models (of any Evaluation) calling through it at the time: a model of
	// weight 2 gets twice the share of one of weight 1. Default 1. Editing it
	// applies at once and does not start a new run.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Weight *int32 `json:"weight,omitempty"`
}

// EndpointWeight is a reference's weight, defaulted.
func (r *EndpointReference) EndpointWeight() int64 {
	if r == nil || r.Weight == nil {
		return DefaultEndpointWeight
	}
	return int64(*r.Weight)
}

// ModelEndpointStatus is what the endpoint is used for now.
type ModelEndpointStatus struct {
	// conditions of the endpoint: Ready says whether Evaluations can call
	// through it.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation of the spec the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// evaluations counts the Evaluations with a runner pod calling through the
	// endpoint now.
	// +optional
	Evaluations int32 `json:"evaluations,omitempty"`
	// shards counts the runner pods holding a share of the endpoint's limits.
	// +optional
	Shards int32 `json:"shards,omitempty"`
	// limits are the limits in force, divided among the runner pods: the
	// endpoint's own, or its part of its ModelQuota (within its own).
	// +optional
	Limits *EndpointLimits `json:"limits,omitempty"`
	// usage is what went through the endpoint over the last minute, as the
	// runner pods counted it.
	// +optional
	Usage *EndpointUsage `json:"usage,omitempty"`
	// provider is what the provider's rate-limit headers last said of the
	// key's limits; condition LimitsMismatch says when they disagree with the
	// declared ones.
	// +optional
	Provider *ProviderLimits `json:"provider,omitempty"`
}

// ProviderLimits are a key's limits as its provider's rate-limit headers said
// them (OpenAI's x-ratelimit-*, Anthropic's anthropic-ratelimit-*).
type ProviderLimits struct {
	// requestsPerMinute is the provider's request limit.
	// +optional
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`
	// inputTokensPerMinute is the provider's input-token limit (Anthropic).
	// +optional
	InputTokensPerMinute int64 `json:"inputTokensPerMinute,omitempty"`
	// outputTokensPerMinute is the provider's output-token limit (Anthropic).
	// +optional
	OutputTokensPerMinute int64 `json:"outputTokensPerMinute,omitempty"`
	// tokensPerMinute is the provider's one token limit, of input and output
	// together (OpenAI).
	// +optional
	TokensPerMinute int64 `json:"tokensPerMinute,omitempty"`
	// remainingRequests is what was left of the request limit then.
	// +optional
	RemainingRequests int64 `json:"remainingRequests,omitempty"`
	// observedAt is when the answer that said so came.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
}

// EndpointUsage is what went through an endpoint over the last minute.
type EndpointUsage struct {
	// requestsPerMinute is the number of calls sent in the last minute.
	// +optional
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`
	// inputTokensPerMinute are the input tokens of the last minute's answers.
	// +optional
	InputTokensPerMinute int64 `json:"inputTokensPerMinute,omitempty"`
	// outputTokensPerMinute are the output tokens of the last minute's answers.
	// +optional
	OutputTokensPerMinute int64 `json:"outputTokensPerMinute,omitempty"`
	// throttledPerMinute counts the calls the provider refused with 429 (rate
	// limited) in the last minute: 0 while the limits match the provider's.
	// +optional
	ThrottledPerMinute int64 `json:"throttledPerMinute,omitempty"`
}

// ModelEndpoint is one provider account or API key, in a namespace: where
// model calls go, the key they carry (a Secret of the namespace), and the
// limits the provider puts on that key. Evaluation models refer to it with
// endpointRef instead of repeating provider, baseURL and apiKey; every runner
// pod of every Evaluation calling through it shares its limits, so that
// together they stay within them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=me;mep,categories=proctor
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="RPM",type=integer,JSONPath=`.status.limits.requestsPerMinute`,description="requests per minute in force"
// +kubebuilder:printcolumn:name="In-Flight",type=integer,JSONPath=`.status.limits.maxInFlight`,description="requests in flight at once, at most",priority=1
// +kubebuilder:printcolumn:name="Quota",type=string,JSONPath=`.spec.quotaRef.name`
// +kubebuilder:printcolumn:name="Evaluations",type=integer,JSONPath=`.status.evaluations`
// +kubebuilder:printcolumn:name="Shards",type=integer,JSONPath=`.status.shards`
// +kubebuilder:printcolumn:name="Achieved",type=integer,JSONPath=`.status.usage.requestsPerMinute`,description="requests in the last minute"
// +kubebuilder:printcolumn:name="429s",type=integer,JSONPath=`.status.usage.throttledPerMinute`,description="429 answers in the last minute"
// +kubebuilder:printcolumn:name="Provider-RPM",type=integer,JSONPath=`.status.provider.requestsPerMinute`,description="the request limit the provider's headers say"
// +kubebuilder:printcolumn:name="Limits",type=string,JSONPath=`.status.conditions[?(@.type=="LimitsMismatch")].reason`,description="whether the provider's headers agree with the declared limits"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63`,message="a ModelEndpoint's name must be a DNS label (lowercase letters, digits and '-', at most 63): runner pods hold its key under a variable named after it"
type ModelEndpoint struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says where calls go, with which key, within which limits.
	// +required
	Spec ModelEndpointSpec `json:"spec"`
	// status is what the endpoint is used for now.
	// +optional
	Status ModelEndpointStatus `json:"status,omitempty"`
}

// ModelEndpointList is a list of ModelEndpoints.
//
// +kubebuilder:object:root=true
type ModelEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelEndpoint `json:"items"`
}

// QuotaReference names a ModelQuota.
type QuotaReference struct {
	// name of the ModelQuota (cluster-scoped).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ModelQuotaSpec is a provider account's limits, divided among the
// ModelEndpoints (of any allowed namespace) that name the quota.
// +kubebuilder:validation:XValidation:rule=`(has(self.limits.requestsPerMinute) && self.limits.requestsPerMinute > 0) || (has(self.limits.inputTokensPerMinute) && self.limits.inputTokensPerMinute > 0) || (has(self.limits.outputTokensPerMinute) && self.limits.outputTokensPerMinute > 0) || (has(self.limits.maxInFlight) && self.limits.maxInFlight > 0)`,message="a ModelQuota needs at least one limit above 0"
type ModelQuotaSpec struct {
	// limits of the provider account, shared by every ModelEndpoint naming the
	// quota: each namespace with an endpoint in use gets a part in proportion to
	// its weight, which its endpoints in use share equally (within each
	// endpoint's own limits), and what one does not take goes to the others. A
	// namespace gets no more by making more endpoints. Edits apply at once.
	// +required
	Limits EndpointLimits `json:"limits"`

	// namespaces whose ModelEndpoints may use the quota, each with the weight
	// of its part (default 1), which its endpoints share. Unset: every
	// namespace, each of weight 1. An endpoint of a namespace not listed is not Ready, and the
	// Evaluations calling through it wait.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	// +listType=map
	// +listMapKey=name
	Namespaces []QuotaNamespace `json:"namespaces,omitempty"`
}

// QuotaNamespace is a namespace allowed to use a ModelQuota.
type QuotaNamespace struct {
	// name of the namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// weight of the namespace's part against the others'; its endpoints share
	// it. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Weight *int32 `json:"weight,omitempty"`
}

// Admits reports whether endpoints of namespace may use the quota, and with
// which weight.
func (s *ModelQuotaSpec) Admits(namespace string) (weight int64, ok bool) {
	if len(s.Namespaces) == 0 {
		return DefaultEndpointWeight, true
	}
	for _, n := range s.Namespaces {
		if n.Name == namespace {
			if n.Weight == nil {
				return DefaultEndpointWeight, true
			}
			return int64(*n.Weight), true
		}
	}
	return 0, false
}

// ModelQuotaStatus is what the quota is used for now.
type ModelQuotaStatus struct {
	// conditions of the quota.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation of the spec the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// endpoints counts the ModelEndpoints with runner pods calling through
	// them now.
	// +optional
	Endpoints int32 `json:"endpoints,omitempty"`
	// evaluations counts the Evaluations calling through the quota now.
	// +optional
	Evaluations int32 `json:"evaluations,omitempty"`
	// shards counts the runner pods calling through the quota now.
	// +optional
	Shards int32 `json:"shards,omitempty"`
	// usage is what went through the quota's endpoints over the last minute.
	// +optional
	Usage *EndpointUsage `json:"usage,omitempty"`
}

// ModelQuota is a provider account's limits shared across namespaces: each
// namespace keeps its key in its own Secret and ModelEndpoint, and the
// endpoints that name the quota (quotaRef) divide its limits among them by
// weight. It holds no credentials.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mq,categories=proctor
// +kubebuilder:printcolumn:name="RPM",type=integer,JSONPath=`.spec.limits.requestsPerMinute`
// +kubebuilder:printcolumn:name="Endpoints",type=integer,JSONPath=`.status.endpoints`
// +kubebuilder:printcolumn:name="Evaluations",type=integer,JSONPath=`.status.evaluations`
// +kubebuilder:printcolumn:name="Shards",type=integer,JSONPath=`.status.shards`
// +kubebuilder:printcolumn:name="Achieved",type=integer,JSONPath=`.status.usage.requestsPerMinute`,description="requests in the last minute"
// +kubebuilder:printcolumn:name="429s",type=integer,JSONPath=`.status.usage.throttledPerMinute`,description="429 answers in the last minute"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelQuota struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the account's limits and who shares them.
	// +required
	Spec ModelQuotaSpec `json:"spec"`
	// status is what the quota is used for now.
	// +optional
	Status ModelQuotaStatus `json:"status,omitempty"`
}

// ModelQuotaList is a list of ModelQuotas.
//
// +kubebuilder:object:root=true
type ModelQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelQuota `json:"items"`
}
