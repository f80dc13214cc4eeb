package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// EvaluationSpec declares what to evaluate: every model on every dataset, scored by
// every scorer.
type EvaluationSpec struct {
	// Datasets to evaluate every model on. Names must be unique.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	Datasets []Dataset `json:"datasets"`

	// Models to evaluate. A model that a judge scorer names is used as the judge
	// and is not itself evaluated. Names must be unique.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	Models []Model `json:"models"`

	// Prompt turns a sample into the message sent to the model.
	// +optional
	Prompt *Prompt `json:"prompt,omitempty"`

	// Scoring lists the scorers; each adds one metric per model and dataset.
	// Metric names (a scorer's name, or its type) must be unique.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Scoring []Scorer `json:"scoring,omitempty"`

	// Concurrency is the number of samples in flight at once per model (a sliding
	// window) in a local run, or per shard in a cluster. A model's own concurrency
	// overrides it. Default 10.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Concurrency *int32 `json:"concurrency,omitempty"`

	// Parallelism is the number of shards of one model that run at once (cluster
	// mode). Default 4.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Parallelism *int32 `json:"parallelism,omitempty"`

	// ShardSize is the number of samples per shard (cluster mode). Unset lets the
	// controller choose.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	ShardSize *int32 `json:"shardSize,omitempty"`

	// Retry is how failed calls are retried.
	// +optional
	Retry *RetryPolicy `json:"retry,omitempty"`

	// TimeoutPerSample bounds one attempt at a sample: one model call, or one agent
	// process. Time spent waiting for the rate limiter or backing off between
	// attempts does not count. Default 2m.
	// +optional
	TimeoutPerSample *metav1.Duration `json:"timeoutPerSample,omitempty"`

	// Cache reuses responses to identical requests across runs.
	// +optional
	Cache *Cache `json:"cache,omitempty"`

	// Suspend pauses a running Evaluation (cluster mode); finished samples are kept.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// Runner configures the runner pods (cluster mode).
	// +optional
	Runner *Runner `json:"runner,omitempty"`
}

// Dataset is a named set of samples.
type Dataset struct {
	// Name identifies the dataset in results and status.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Source says where the samples come from: exactly one of its fields.
	Source DatasetSource `json:"source"`

	// Format of the data: jsonl, json (an array of objects) or csv (with a header
	// row). Default: from the source's file extension, else jsonl.
	// +optional
	Format DatasetFormat `json:"format,omitempty"`

	// Fields maps the parts of a sample to the record's field names.
	// +optional
	Fields *FieldMapping `json:"fields,omitempty"`

	// Limit evaluates only the first Limit samples; 0 means all.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Limit int64 `json:"limit,omitempty"`
}

// DatasetFormat is how a dataset is encoded.
// +kubebuilder:validation:Enum=jsonl;json;csv
type DatasetFormat string

// Dataset formats.
const (
	FormatJSONL DatasetFormat = "jsonl"
	FormatJSON  DatasetFormat = "json"
	FormatCSV   DatasetFormat = "csv"
)

// DatasetSource is where a dataset's samples come from. Exactly one field is set.
type DatasetSource struct {
	// Inline samples, each an object such as {id: q1, input: "2+2?", expected: "4"}.
	// +optional
	// +kubebuilder:validation:MaxItems=10000
	Inline []runtime.RawExtension `json:"inline,omitempty"`

	// ConfigMap holds the data under a key (cluster mode).
	// +optional
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`

	// URL of the data (http or https), downloaded once per run.
	// +optional
	URL string `json:"url,omitempty"`

	// SHA256 is the expected hex SHA-256 of the data at URL; a mismatch stops the run
	// before any model call.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{64}$`
	SHA256 string `json:"sha256,omitempty"`

	// PVC reads the data from a file on a PersistentVolumeClaim (cluster mode).
	// +optional
	PVC *PVCSource `json:"pvc,omitempty"`

	// File is a local path, relative to the Evaluation file (local mode only).
	// +optional
	File string `json:"file,omitempty"`
}

// ConfigMapSource selects a key of a ConfigMap in the Evaluation's namespace.
type ConfigMapSource struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// PVCSource selects a file on a PersistentVolumeClaim in the Evaluation's namespace.
type PVCSource struct {
	// +kubebuilder:validation:MinLength=1
	ClaimName string `json:"claimName"`
	// Path of the file relative to the volume's root.
	// +kubebuilder:validation:MinLength=1
	Path string `json:"path"`
}

// FieldMapping names the record fields that hold each part of a sample.
type FieldMapping struct {
	// ID field; default "id". Samples without one are numbered from 1.
	// +optional
	ID string `json:"id,omitempty"`
	// Input field, the text the prompt template sees as .Input; default "input".
	// +optional
	Input string `json:"input,omitempty"`
	// Expected field, what scorers compare against; default "expected".
	// +optional
	Expected string `json:"expected,omitempty"`
	// Messages field: a chat conversation sent instead of the rendered prompt; default "messages".
	// +optional
	Messages string `json:"messages,omitempty"`
	// Tools field: tool definitions offered to the model; default "tools".
	// +optional
	Tools string `json:"tools,omitempty"`
}

// Provider is the kind of model.
// +kubebuilder:validation:Enum=openai;anthropic;agent
type Provider string

// Providers.
const (
	ProviderOpenAI    Provider = "openai"
	ProviderAnthropic Provider = "anthropic"
	ProviderAgent     Provider = "agent"
)

// Model is one model (or agent) to evaluate, or to judge with.
type Model struct {
	// Name identifies the model in results, status and the names of its Jobs.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Provider: openai (any OpenAI-compatible chat completions server), anthropic
	// (the Messages API) or agent (a command-line agent run once per sample).
	Provider Provider `json:"provider"`

	// Model is the provider's model identifier, e.g. gpt-4.1-mini. Required for
	// openai and anthropic.
	// +optional
	Model string `json:"model,omitempty"`

	// BaseURL of the API. Default https://api.openai.com/v1 for openai and
	// https://api.anthropic.com for anthropic.
	// +optional
	BaseURL string `json:"baseURL,omitempty"`

	// APIKey says where the API key comes from. Omit it for servers that need none.
	// +optional
	APIKey *APIKey `json:"apiKey,omitempty"`

	// Headers are extra, non-secret HTTP headers sent with every call.
	// +optional
	Headers map[string]string `json:"headers,omitempty"`

	// Parameters are the sampling parameters.
	// +optional
	Parameters *Parameters `json:"parameters,omitempty"`

	// RateLimit is this model's budget for the whole Evaluation, shared by all of
	// its shards. Unset limits are discovered: on 429 answers Proctor backs off as the
	// server asks and shrinks its window instead of failing samples.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`

	// Concurrency overrides spec.concurrency for this model.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Concurrency *int32 `json:"concurrency,omitempty"`

	// Agent configures an agent model; required exactly when provider is agent.
	// +optional
	Agent *Agent `json:"agent,omitempty"`
}

// APIKey locates an API key. The key itself never appears in the spec.
type APIKey struct {
	// Env is the environment variable that holds the key: read from proctor's own
	// environment in a local run, and set from SecretKeyRef in runner pods. Default
	// OPENAI_API_KEY for openai and ANTHROPIC_API_KEY for anthropic.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Env string `json:"env,omitempty"`

	// SecretKeyRef is the Secret key holding the API key (cluster mode).
	// +optional
	SecretKeyRef *corev1.SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// Parameters are sampling parameters; unset ones are left to the server.
type Parameters struct {
	// Temperature, between 0 and 2.
	// +optional
	Temperature *Number `json:"temperature,omitempty"`

	// TopP (nucleus sampling), between 0 and 1.
	// +optional
	TopP *Number `json:"topP,omitempty"`

	// MaxTokens caps the answer's length. Anthropic requires one: default 1024 there.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTokens *int32 `json:"maxTokens,omitempty"`

	// Seed asks for reproducible sampling where the server supports it.
	// +optional
	Seed *int64 `json:"seed,omitempty"`

	// Stop sequences.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Stop []string `json:"stop,omitempty"`
}

// RateLimit is a per-minute budget; 0 means unlimited.
type RateLimit struct {
	// RequestsPerMinute across the whole Evaluation.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`

	// InputTokensPerMinute across the whole Evaluation. Input tokens are estimated
	// before each call and corrected from the usage the server reports.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InputTokensPerMinute int64 `json:"inputTokensPerMinute,omitempty"`

	// OutputTokensPerMinute across the whole Evaluation.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OutputTokensPerMinute int64 `json:"outputTokensPerMinute,omitempty"`
}

// Agent runs a command-line agent once per sample, in a fresh workspace directory
// holding the declared files. Its standard output is the answer.
type Agent struct {
	// Image holding the agent CLI (cluster mode); the proctor binary is injected into it.
	// +optional
	Image string `json:"image,omitempty"`

	// Command is the argv; each element is a Go template over .Prompt, .System,
	// .Sample, .ID and .Workspace. No shell is involved.
	// +kubebuilder:validation:MinItems=1
	Command []string `json:"command"`

	// Stdin is a template written to the agent's standard input.
	// +optional
	Stdin string `json:"stdin,omitempty"`

	// Files maps workspace-relative paths to templates of their content.
	// +optional
	Files map[string]string `json:"files,omitempty"`

	// Env is the agent's environment, besides PATH, HOME and the model's API key
	// variable. In a local run an entry without a value is taken from proctor's
	// own environment.
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Timeout bounds one agent run, overriding spec.timeoutPerSample. When it
	// expires the agent's whole process group is killed.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// Prompt turns a sample into a message.
type Prompt struct {
	// System prompt, a Go template like Template.
	// +optional
	System string `json:"system,omitempty"`

	// Template is a Go text/template over .Sample (the record's fields), .Input,
	// .Expected and .ID, e.g. "{{ .Sample.question }}". Default "{{ .Input }}".
	// Samples that carry messages are sent as they are instead.
	// +optional
	Template string `json:"template,omitempty"`
}

// ScorerType is a kind of scorer.
// +kubebuilder:validation:Enum=exact_match;contains;regex;numeric;json_match;tool_call;judge
type ScorerType string

// Scorer types.
const (
	ScorerExactMatch ScorerType = "exact_match"
	ScorerContains   ScorerType = "contains"
	ScorerRegex      ScorerType = "regex"
	ScorerNumeric    ScorerType = "numeric"
	ScorerJSONMatch  ScorerType = "json_match"
	ScorerToolCall   ScorerType = "tool_call"
	ScorerJudge      ScorerType = "judge"
)

// Normalizer is a text normalization applied before comparing.
// +kubebuilder:validation:Enum=trim;lowercase;collapse_whitespace;strip_punctuation
type Normalizer string

// Scorer turns each answer into a score between 0 and 1; a metric is the mean.
type Scorer struct {
	// Type of scorer.
	Type ScorerType `json:"type"`

	// Name of the metric; default the type.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Name string `json:"name,omitempty"`

	// Normalize the answer and the expected text, in order, before comparing.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Normalize []Normalizer `json:"normalize,omitempty"`

	// Pattern is the regex scorer's RE2 pattern; unset uses each sample's expected
	// value as the pattern.
	// +optional
	Pattern string `json:"pattern,omitempty"`

	// Tolerance is the numeric scorer's absolute tolerance; default 0.
	// +optional
	Tolerance *Number `json:"tolerance,omitempty"`

	// CheckArguments makes tool_call require the expected arguments too (a subset
	// match), not only the tool's name. Default true.
	// +optional
	CheckArguments *bool `json:"checkArguments,omitempty"`

	// Judge configures the judge scorer.
	// +optional
	Judge *Judge `json:"judge,omitempty"`
}

// Judge has a model grade each answer.
type Judge struct {
	// Model names the entry of spec.models used as the judge. Its calls share that
	// model's limits, retries and cache.
	// +kubebuilder:validation:MinLength=1
	Model string `json:"model"`

	// Rubric is a Go template over .Prompt, .Input, .Output, .Expected and .Sample.
	// The judge must end its reply with a line "VERDICT: CORRECT", "VERDICT: PARTIAL"
	// or "VERDICT: INCORRECT". Default: a short grading rubric.
	// +optional
	Rubric string `json:"rubric,omitempty"`
}

// RetryPolicy retries failed calls with exponential backoff and full jitter, on
// connection errors, timeouts, 408, 429 and 5xx answers; other 4xx answers are
// final. A server's retry-after is always honoured.
type RetryPolicy struct {
	// MaxAttempts per call, the first included. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// InitialBackoff is the cap of the first backoff; it doubles per attempt. Default 1s.
	// +optional
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`

	// MaxBackoff caps the backoff. Default 60s.
	// +optional
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// Cache configures the response cache.
type Cache struct {
	// Enabled reuses a cached response for a request identical in provider,
	// endpoint, model, parameters, messages and tools.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
}

// Runner configures runner pods (cluster mode).
type Runner struct {
	// Image of the runner; default the operator's own image.
	// +optional
	Image string `json:"image,omitempty"`
	// Resources of the runner container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// ServiceAccountName overrides the per-Evaluation ServiceAccount.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// NodeSelector for runner pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations for runner pods.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// Phase is a coarse summary of where an Evaluation is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Suspended
type Phase string

// Phases.
const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
	PhaseSuspended Phase = "Suspended"
)

// EvaluationStatus is the observed state of an Evaluation.
type EvaluationStatus struct {
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Progressing, Complete, Failed, Suspended.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	Progress *Progress `json:"progress,omitempty"`
	// +optional
	Shards *ShardCounts `json:"shards,omitempty"`
	// Results has one entry per model and dataset.
	// +optional
	Results []ModelResult `json:"results,omitempty"`
	// Score is the first model's first metric, for `kubectl get`.
	// +optional
	Score string `json:"score,omitempty"`
	// ResultsConfigMap holds the summary and the per-sample records.
	// +optional
	ResultsConfigMap string `json:"resultsConfigMap,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// Progress counts finished samples over all models and datasets.
type Progress struct {
	Total     int64 `json:"total"`
	Completed int64 `json:"completed"`
	Errored   int64 `json:"errored"`
	// Text is "completed/total", for `kubectl get`.
	Text string `json:"text,omitempty"`
}

// ShardCounts counts shards by state.
type ShardCounts struct {
	Total     int32 `json:"total"`
	Active    int32 `json:"active"`
	Succeeded int32 `json:"succeeded"`
	Failed    int32 `json:"failed"`
}

// ModelResult is the outcome of one model on one dataset.
type ModelResult struct {
	Model     string `json:"model"`
	Dataset   string `json:"dataset"`
	Total     int64  `json:"total"`
	Completed int64  `json:"completed"`
	Errored   int64  `json:"errored"`
	// Metrics maps metric names to scores formatted with four decimals.
	// +optional
	Metrics map[string]string `json:"metrics,omitempty"`
	// +optional
	LatencyMillis *LatencySummary `json:"latencyMillis,omitempty"`
	// +optional
	Tokens *TokenUsage `json:"tokens,omitempty"`
}

// LatencySummary summarizes per-sample latencies in milliseconds.
type LatencySummary struct {
	P50 int64 `json:"p50"`
	P95 int64 `json:"p95"`
}

// TokenUsage totals tokens.
type TokenUsage struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// Evaluation runs models over datasets and scores them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=eval;evals,categories=proctor
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress.text`
// +kubebuilder:printcolumn:name="Score",type=string,JSONPath=`.status.score`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Evaluation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec EvaluationSpec `json:"spec"`
	// +optional
	Status EvaluationStatus `json:"status,omitempty"`
}

// EvaluationList is a list of Evaluations.
//
// +kubebuilder:object:root=true
type EvaluationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Evaluation `json:"items"`
}
