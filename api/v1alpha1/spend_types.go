package v1alpha1

// Pricing is what a model's tokens cost, in US dollars per million tokens, as
// the provider lists them. Prices are kept to the millionth of a dollar per
// million tokens. A model without pricing has an unknown cost: Proctor shows
// it as unknown, never as 0, and a budget's maxCost cannot be kept with it.
// +kubebuilder:validation:XValidation:rule=`!has(self.batchInputPerMillion) || has(self.batchOutputPerMillion)`,message="pricing.batchOutputPerMillion is needed with batchInputPerMillion: give both batch prices, or neither (half the synchronous prices)"
// +kubebuilder:validation:XValidation:rule=`!has(self.batchOutputPerMillion) || has(self.batchInputPerMillion)`,message="pricing.batchInputPerMillion is needed with batchOutputPerMillion: give both batch prices, or neither (half the synchronous prices)"
type Pricing struct {
	// inputPerMillion is the price of a million input (prompt) tokens.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +required
	InputPerMillion Number `json:"inputPerMillion"`

	// outputPerMillion is the price of a million output (completion) tokens.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +required
	OutputPerMillion Number `json:"outputPerMillion"`

	// cachedInputPerMillion is the price of a million input tokens read from
	// the provider's prompt cache (OpenAI's cached tokens, Anthropic's cache
	// reads). Default inputPerMillion.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	CachedInputPerMillion *Number `json:"cachedInputPerMillion,omitempty"`

	// cacheWriteInputPerMillion is the price of a million input tokens written
	// to the provider's prompt cache (Anthropic's cache creation). Default
	// inputPerMillion.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	CacheWriteInputPerMillion *Number `json:"cacheWriteInputPerMillion,omitempty"`

	// batchInputPerMillion and batchOutputPerMillion are the prices of calls
	// made through the provider's batch API. Default half of inputPerMillion
	// and outputPerMillion, the discount OpenAI and Anthropic both list;
	// cached input in a batch gets the same discount as the rest of its input.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	BatchInputPerMillion *Number `json:"batchInputPerMillion,omitempty"`

	// batchOutputPerMillion is the price of a million output tokens through
	// the batch API: see batchInputPerMillion.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	BatchOutputPerMillion *Number `json:"batchOutputPerMillion,omitempty"`
}

// ModelPrice prices one model identifier that is called through a
// ModelEndpoint.
type ModelPrice struct {
	// model is the provider's model identifier, as Evaluations' models name it
	// in their model field, e.g. gpt-4.1-mini.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	Model string `json:"model"`

	// pricing of that model through this endpoint.
	// +required
	Pricing Pricing `json:"pricing"`
}

// Budget bounds what a run may spend, over all its models, judges and shards.
// Each call reserves its worst case before it is sent (its input tokens, and
// parameters.maxTokens or assumedOutputTokens of output, at the model's
// price) and settles at what the provider reports; a call whose worst case
// no longer fits is not sent. The run then stops with reason BudgetExceeded,
// keeping its finished samples; raising the budget resumes it.
// +kubebuilder:validation:XValidation:rule=`has(self.maxCost) || has(self.maxTokens)`,message="a budget needs maxCost, maxTokens or both"
type Budget struct {
	// maxCost is the most the run may spend, in US dollars, at the models'
	// pricing. Every model called must then have pricing.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxCost *Number `json:"maxCost,omitempty"`

	// maxTokens is the most tokens (input and output, of every call) the run
	// may use.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTokens *int64 `json:"maxTokens,omitempty"`

	// assumedOutputTokens is the answer length reserved for a call whose model
	// sets no parameters.maxTokens, and assumed by estimates. Default 4096.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	AssumedOutputTokens *int32 `json:"assumedOutputTokens,omitempty"`
}

// DefaultAssumedOutputTokens is Budget.AssumedOutputTokens's default.
const DefaultAssumedOutputTokens = 4096

// CostSummary is what a model's samples on a dataset cost, in US dollars
// ("unknown" when a call's model has no pricing).
type CostSummary struct {
	// model is what the evaluated model's calls cost.
	// +required
	Model string `json:"model"`
	// judge is what judging the answers cost, when a judge scorer is used.
	// +optional
	Judge string `json:"judge,omitempty"`
}

// CostUnknown is a cost that cannot be known: a model without pricing.
const CostUnknown = "unknown"

// SpendStatus is what a run has spent, over all its shards and pods.
type SpendStatus struct {
	// cost is what its calls cost so far, in US dollars, or "unknown" when a
	// model it calls has no pricing.
	// +required
	Cost string `json:"cost"`
	// tokens counts the tokens its calls used so far (input and output).
	// +required
	Tokens int64 `json:"tokens"`
	// maxCost and maxTokens are spec.budget's, when set.
	// +optional
	MaxCost string `json:"maxCost,omitempty"`
	// maxTokens is spec.budget.maxTokens, when set.
	// +optional
	MaxTokens int64 `json:"maxTokens,omitempty"`
}
