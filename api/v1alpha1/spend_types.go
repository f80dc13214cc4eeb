package v1alpha1

import (
	"time"
)

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

// EstimateStatus is what a run will cost at most, estimated before it
// started without calling a model (as proctor run --estimate does): every
// prompt rendered and its input tokens counted by the provider's token
// counting endpoint, each answer at its bound (parameters.maxTokens, else
// spec.budget.assumedOutputTokens).
type EstimateStatus struct {
	// cost bounds what the run's calls will cost, in US dollars, at the batch
	// price for models in batch mode; "unknown" when a model it calls has no
	// pricing or is an agent (whose calls are not estimated).
	// +optional
	Cost string `json:"cost,omitempty"`
	// inputTokens are the run's input tokens.
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`
	// outputTokens bound the run's output tokens.
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`
	// exact says every input token was counted by its provider; otherwise
	// some were estimated from the prompts' length (a server without a
	// counting endpoint), and a judge's input holds the answer at its bound.
	// +optional
	Exact bool `json:"exact,omitempty"`
	// results are the estimate of each model (and judge) on each dataset
	// (the first 256).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Results []EstimateResult `json:"results,omitempty"`
	// message says what the estimate rests on, or why it could not be made.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// EstimateResult is the estimate of one model's calls on one dataset: its
// own, or a judge's judging another model's answers.
type EstimateResult struct {
	// model is the model called.
	// +required
	Model string `json:"model"`
	// dataset is the dataset.
	// +required
	Dataset string `json:"dataset"`
	// judging names, on a judge's row, the model whose answers it judges.
	// +optional
	Judging string `json:"judging,omitempty"`
	// calls is the number of calls.
	// +optional
	Calls int64 `json:"calls,omitempty"`
	// inputTokens and outputTokens: counted input, and the output's bound.
	// +optional
	InputTokens int64 `json:"inputTokens,omitempty"`
	// outputTokens bound the calls' output tokens.
	// +optional
	OutputTokens int64 `json:"outputTokens,omitempty"`
	// cost and batchCost bound the calls' cost called at once and through
	// the batch API, in US dollars; "unknown" without pricing, and for an
	// agent, whose calls are not estimated.
	// +optional
	Cost string `json:"cost,omitempty"`
	// batchCost is the calls' cost through the batch API.
	// +optional
	BatchCost string `json:"batchCost,omitempty"`
}

// BatchMode runs a model's samples through its provider's batch API
// (OpenAI's Batch API, Anthropic's Message Batches): at the batch price
// (half, by default), answered within the completion window instead of at
// once. Proctor submits the samples in batches, follows them, and turns
// their results into the same records, scores and summaries as calls.
type BatchMode struct {
	// maxRequests bounds the requests of one batch; default, and at most,
	// the provider's limit (50,000 for OpenAI, 100,000 for Anthropic). Batches
	// are also kept under the provider's size limit (200 MB, 256 MB).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxRequests *int32 `json:"maxRequests,omitempty"`

	// maxInFlight bounds the batches submitted and not yet ended at once
	// (per runner pod in a cluster). Default 4.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`

	// completionWindow is the window the provider is given to process a
	// batch; both providers offer 24h only. Default 24h.
	// +optional
	// +kubebuilder:validation:Enum="24h"
	CompletionWindow string `json:"completionWindow,omitempty"`

	// pollInterval is how often the batches in flight are looked at. A
	// duration between 100ms and 1h. Default 30s.
	// +optional
	PollInterval *PollInterval `json:"pollInterval,omitempty"`

	// retryFailed says what becomes of requests the provider reports failed,
	// expired or canceled: batch submits them again in a new batch (the
	// default; at most retry.maxAttempts times in all), sync calls them at
	// once, none makes them the samples' errors.
	// +optional
	// +kubebuilder:validation:Enum=batch;sync;none
	RetryFailed BatchRetry `json:"retryFailed,omitempty"`

	// deadline bounds how long a batch may take, when set: one not ended
	// that long after its submission is cancelled, and the requests it had
	// not answered are called synchronously. A duration such as 2h, at most
	// 24h.
	// +optional
	Deadline *Timeout `json:"deadline,omitempty"`
}

// BatchRetry is what becomes of a batch's failed requests.
type BatchRetry string

// BatchRetry values.
const (
	BatchRetryBatch BatchRetry = "batch"
	BatchRetrySync  BatchRetry = "sync"
	BatchRetryNone  BatchRetry = "none"
)

// Batch defaults.
const (
	DefaultBatchMaxInFlight  = 4
	DefaultBatchPollInterval = 30 * time.Second
)

// BatchesStatus is the current run's batches, over all its shards.
type BatchesStatus struct {
	// submitted counts the batches submitted; ended, those that ended (their
	// results recorded).
	// +required
	Submitted int32 `json:"submitted"`
	// ended counts the batches whose results were recorded.
	// +required
	Ended int32 `json:"ended"`
	// pending counts the samples in batches not ended yet.
	// +optional
	Pending int64 `json:"pending,omitempty"`
	// text is "ended/submitted", for `kubectl get`.
	// +optional
	Text string `json:"text,omitempty"`
	// inFlight are the batches not ended yet (at most 50), by the provider's
	// id.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	InFlight []BatchRef `json:"inFlight,omitempty"`
}

// BatchRef is one batch in flight.
type BatchRef struct {
	// id is the provider's id of the batch.
	// +required
	ID string `json:"id"`
	// shard is the shard that submitted it (MODEL/INDEX).
	// +required
	Shard string `json:"shard"`
	// requests counts its samples.
	// +required
	Requests int32 `json:"requests"`
	// judge names, for a judge's batch, the judge model and the scorer whose
	// verdicts it holds on the shard's answers (JUDGE/SCORER).
	// +optional
	Judge string `json:"judge,omitempty"`
}
