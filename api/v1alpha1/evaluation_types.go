package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// EvaluationSpec declares what to evaluate: every model on every dataset, scored by
// every scorer.
// +kubebuilder:validation:XValidation:rule=`!has(self.scoring) || !has(self.models) || self.scoring.all(s, s.type != 'judge' || !has(s.judge) || self.models.exists(m, m.name == s.judge.model))`,message="a judge scorer's judge.model must name an entry of spec.models",fieldPath=".scoring"
// +kubebuilder:validation:XValidation:rule=`!has(self.scoring) || !has(self.models) || self.scoring.all(s, s.type != 'judge' || !has(s.judge) || !self.models.exists(m, m.name == s.judge.model && has(m.provider) && m.provider == 'agent'))`,message="a judge scorer's judge.model must name an openai or anthropic model, not an agent",fieldPath=".scoring"
// +kubebuilder:validation:XValidation:rule=`!has(self.scoring) || !has(self.models) || self.models.exists(m, !self.scoring.exists(s, s.type == 'judge' && has(s.judge) && s.judge.model == m.name))`,message="every model is a judge: at least one entry of spec.models must not be a judge scorer's judge.model, or there is nothing to evaluate",fieldPath=".models"
// +kubebuilder:validation:XValidation:rule=`!has(self.hooks) || (has(self.hooks.image) && size(self.hooks.image) > 0) || !has(self.models) || self.models.all(m, (has(m.provider) && m.provider == 'agent') || (has(self.scoring) && self.scoring.exists(s, has(s.judge) && s.judge.model == m.name)))`,message="hooks need hooks.image, the image they run in (with their tools), unless every model under evaluation is an agent, whose image they then use",fieldPath=".hooks"
// +kubebuilder:validation:XValidation:rule=`!has(self.scheduling) || !has(self.scheduling.minParallelism) || self.scheduling.minParallelism <= (has(self.parallelism) ? self.parallelism : 4)`,message="scheduling.minParallelism must be at most spec.parallelism (default 4): the fewest pods Kueue may admit of the most that run",fieldPath=".scheduling.minParallelism"
// +kubebuilder:validation:XValidation:rule=`!has(self.budget) || self.models.all(m, !has(m.provider) || m.provider != 'agent' || (has(m.agent) && has(m.agent.endpoints) && size(m.agent.endpoints) > 0))`,message="spec.budget cannot bound an agent that calls its API itself: give every agent model agent.endpoints, so that its calls go through Proctor and are counted",fieldPath=".budget"
// +kubebuilder:validation:XValidation:rule=`!has(self.budget) || !has(self.budget.maxCost) || self.models.all(m, has(m.pricing) || has(m.endpointRef))`,message="spec.budget.maxCost needs every model's pricing (a model with endpointRef may take it from its ModelEndpoint)",fieldPath=".budget"
// +kubebuilder:validation:XValidation:rule=`!has(self.hooks) || self.models.all(m, !has(m.batch))`,message="hooks do not apply to a model with batch: its samples run in the provider's batch, not in slots",fieldPath=".hooks"
// +kubebuilder:validation:XValidation:rule=`!has(self.gate) || has(self.baseline) || self.gate.rules.all(r, !has(r.maxDrop))`,message="gate.rules[].maxDrop needs spec.baseline, the result a drop is measured from",fieldPath=".gate"
// +kubebuilder:validation:XValidation:rule=`!has(self.gate) || self.gate.rules.all(r, (has(self.scoring) && self.scoring.exists(s, (has(s.name) && size(s.name) != 0 ? s.name : s.type) == r.metric)))`,message="gate.rules[].metric must name a metric of spec.scoring (a scorer's name, else its type)",fieldPath=".gate"
// +kubebuilder:validation:XValidation:rule=`!has(self.gate) || self.gate.rules.all(r, !has(r.model) || size(r.model) == 0 || self.models.exists(m, m.name == r.model))`,message="gate.rules[].model must name an entry of spec.models",fieldPath=".gate"
// +kubebuilder:validation:XValidation:rule=`!has(self.gate) || self.gate.rules.all(r, !has(r.dataset) || size(r.dataset) == 0 || self.datasets.exists(d, d.name == r.dataset))`,message="gate.rules[].dataset must name an entry of spec.datasets",fieldPath=".gate"
type EvaluationSpec struct {
	// datasets to evaluate every model on. Names must be unique.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +required
	Datasets []Dataset `json:"datasets"`

	// models to evaluate. A model that a judge scorer names is used as the judge
	// and is not itself evaluated, so at least one model must not be a judge.
	// Names must be unique.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +required
	Models []Model `json:"models"`

	// prompt turns a sample into the message sent to the model.
	// +optional
	Prompt *Prompt `json:"prompt,omitempty"`

	// scoring lists the scorers; each adds one metric per model and dataset.
	// Metric names (a scorer's name, or its type) must be unique.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule=`self.all(s, self.exists_one(t, (has(t.name) && t.name != '' ? t.name : t.type) == (has(s.name) && s.name != '' ? s.name : s.type)))`,message="metric names must be unique: give scorers of the same type distinct names (a scorer's metric is its name, else its type)"
	// +listType=atomic
	Scoring []Scorer `json:"scoring,omitempty"`

	// concurrency is the number of samples in flight at once per model (a sliding
	// window) in a local run, or per shard in a cluster. A model's own concurrency
	// overrides it. Default 10.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Concurrency *int32 `json:"concurrency,omitempty"`

	// parallelism is the number of shards of one model that run at once (cluster
	// mode): the run's workers, pods that each take their shards one after
	// another, no more than the shards. Lowered mid-run, the workers take
	// turns; raised, it adds none beyond those the run started with. Default 4.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Parallelism *int32 `json:"parallelism,omitempty"`

	// shardSize is the number of samples per shard (cluster mode). Unset lets the
	// controller choose. A run makes at most 8 shards a model for each of its
	// workers (parallelism) unless that takes shards of more than 1,000
	// samples, and 256 in all: a smaller shardSize is raised (event
	// ShardSizeRaised).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	ShardSize *int32 `json:"shardSize,omitempty"`

	// retry is how failed calls are retried.
	// +optional
	Retry *RetryPolicy `json:"retry,omitempty"`

	// timeoutPerSample bounds one attempt at a sample: one model call, or one agent
	// process. Time spent waiting for the rate limiter or backing off between
	// attempts does not count. A duration such as 90s or 2m, at most 24h. Default 2m.
	// +optional
	TimeoutPerSample *Timeout `json:"timeoutPerSample,omitempty"`

	// cache reuses responses to identical requests across runs.
	// +optional
	Cache *Cache `json:"cache,omitempty"`

	// suspend pauses a running Evaluation (cluster mode); finished samples are kept.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// runner configures the runner pods (cluster mode).
	// +optional
	Runner *Runner `json:"runner,omitempty"`

	// services run beside the samples: containers of every runner pod (native
	// sidecars), or processes of a local run. Names must be unique. At most 8.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Services []Service `json:"services,omitempty"`

	// hooks prepare the state each sample runs against: once when the
	// services are ready, and before and after each sample in its slot.
	// +optional
	Hooks *Hooks `json:"hooks,omitempty"`

	// budget bounds what the run may spend, in money and in tokens. Editing
	// it does not start a new run: raising it resumes a run it stopped.
	// +optional
	Budget *Budget `json:"budget,omitempty"`

	// baseline is an earlier result to compare the run with, sample by
	// sample: the comparison is in status.comparison and summary.json.
	// Editing it or gate does not start a new run: an ended run is compared
	// and gated again.
	// +optional
	Baseline *Baseline `json:"baseline,omitempty"`

	// resultsStore puts the records of this Evaluation's runs in an object
	// store of its own, instead of the cluster's results store (the chart's
	// resultsStore) or, without one, ConfigMaps. Local runs ignore it (they
	// take -o s3://...).
	// +optional
	ResultsStore *ResultsStore `json:"resultsStore,omitempty"`

	// gate is what the results must meet for the run to succeed (Ready):
	// minimum scores, and the largest significant drop from the baseline.
	// +optional
	Gate *Gate `json:"gate,omitempty"`

	// tracing sends OpenTelemetry traces of the run over OTLP: a trace per
	// sample, with a span per model attempt (the GenAI semantic
	// conventions), scorer, hook and call an agent makes through its
	// endpoints; MLflow, Langfuse, Jaeger or any OTLP receiver shows them.
	// Off unless an endpoint is set, here or by the operator (the chart's
	// tracing.endpoint); in a local run the standard OTEL_EXPORTER_OTLP_*
	// variables win. Editing it does not start a new run: runner pods
	// started after the edit use it.
	// +optional
	Tracing *Tracing `json:"tracing,omitempty"`

	// scheduling has the run's runner Jobs admitted by Kueue, as a cluster
	// that shares its capacity among teams does. Without Kueue installed,
	// leave it unset: nothing needs it.
	// +optional
	Scheduling *Scheduling `json:"scheduling,omitempty"`
}

// Scheduling says how Kueue admits a run's Jobs.
type Scheduling struct {
	// queueName is the Kueue LocalQueue, in the Evaluation's namespace, that
	// admits the run's Jobs (their label kueue.x-k8s.io/queue-name). Kueue
	// holds a Job suspended until its ClusterQueue has quota for it (the
	// run shows Queued) and may preempt it, and the run goes on where it
	// was. Default: the operator's (the chart's scheduling.queueName); when
	// neither sets one, Jobs start at once. Editing it applies to Jobs not
	// yet admitted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	QueueName string `json:"queueName,omitempty"`

	// priorityClassName is the runner pods' PriorityClass, by which Kueue
	// also orders and preempts the run's Jobs.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// minParallelism lets Kueue admit a model's Job with fewer pods at once
	// than spec.parallelism, down to this many, when its queue lacks quota
	// for all (partial admission: kueue.x-k8s.io/job-min-parallelism). The
	// run takes longer, not fewer samples. One not below a Job's pods at once
	// (parallelism, or its shards when fewer) is all or nothing. Default: all
	// or nothing.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinParallelism *int32 `json:"minParallelism,omitempty"`
}

// Tracing says where a run's traces go and what they hold.
type Tracing struct {
	// endpoint is the OTLP receiver's base URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT takes it: for http/protobuf the traces go
	// to ENDPOINT/v1/traces (for example http://otel-collector.monitoring:4318,
	// or MLflow's http://mlflow:5000), for grpc to ENDPOINT (port 4317).
	// Default: the operator's.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.startsWith('http://') || self.startsWith('https://')`,message="tracing.endpoint must be an http:// or https:// URL"
	Endpoint string `json:"endpoint,omitempty"`

	// protocol is OTLP's transport: http/protobuf (default) or grpc.
	// +optional
	Protocol TracingProtocol `json:"protocol,omitempty"`

	// headersSecretRef is a key of a Secret, in the Evaluation's namespace,
	// holding the headers sent with the traces, as
	// OTEL_EXPORTER_OTLP_HEADERS takes them (name=value,name=value): a
	// receiver's credentials, such as Langfuse's Authorization or MLflow's
	// x-mlflow-experiment-id. Cluster runs; locally, set
	// OTEL_EXPORTER_OTLP_HEADERS.
	// +optional
	HeadersSecretRef *corev1.SecretKeySelector `json:"headersSecretRef,omitempty"`

	// captureContent puts prompts, system instructions and answers on the
	// attempts' spans (gen_ai.input.messages, gen_ai.system_instructions,
	// gen_ai.output.messages), redacted as records are. Default false: spans
	// say what was called, how it went and what it cost, not what was said.
	// +optional
	CaptureContent bool `json:"captureContent,omitempty"`
}

// TracingProtocol is an OTLP transport.
// +kubebuilder:validation:Enum=http/protobuf;grpc
type TracingProtocol string

// OTLP transports.
const (
	TracingProtocolHTTP TracingProtocol = "http/protobuf"
	TracingProtocolGRPC TracingProtocol = "grpc"
)

// Dataset is a named set of samples.
type Dataset struct {
	// name identifies the dataset in results and status.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// source says where the samples come from: exactly one of inline, configMap,
	// url or pvc (or file, in local runs only).
	// +required
	Source DatasetSource `json:"source"`

	// format of the data: jsonl, json (an array of objects) or csv (with a header
	// row). Default: from the source's file extension, else jsonl.
	// +optional
	Format DatasetFormat `json:"format,omitempty"`

	// fields maps the parts of a sample to the record's field names.
	// +optional
	Fields *FieldMapping `json:"fields,omitempty"`

	// limit evaluates only the first Limit samples; 0 means all.
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
// +kubebuilder:validation:XValidation:rule=`(has(self.inline) && size(self.inline) > 0 ? 1 : 0) + (has(self.configMap) ? 1 : 0) + (has(self.url) && size(self.url) != 0 ? 1 : 0) + (has(self.pvc) ? 1 : 0) + (has(self.file) && size(self.file) != 0 ? 1 : 0) == 1`,message="exactly one of inline, configMap, url, pvc or file must be set"
// +kubebuilder:validation:XValidation:rule=`!has(self.sha256) || size(self.sha256) == 0 || (has(self.url) && size(self.url) != 0)`,message="sha256 only applies to a url source"
type DatasetSource struct {
	// inline samples, at least one, each an object such as
	// {id: q1, input: "2+2?", expected: "4"}.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10000
	// +listType=atomic
	Inline []runtime.RawExtension `json:"inline,omitempty"`

	// configMap holds the data under a key (cluster mode).
	// +optional
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`

	// url of the data (http or https), downloaded once per run.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule=`self == '' || (isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHost() != '')`,message="url must be an http or https URL"
	URL string `json:"url,omitempty"`

	// sha256 is the expected hex SHA-256 of the data at url (64 hexadecimal digits);
	// a mismatch stops the run before any model call. Only with url.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9a-fA-F]{64})?$`
	SHA256 string `json:"sha256,omitempty"`

	// pvc reads the data from a file on a PersistentVolumeClaim (cluster mode).
	// +optional
	PVC *PVCSource `json:"pvc,omitempty"`

	// file is a local path, relative to the Evaluation file, for local runs
	// (proctor run) only: the API server refuses it.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self == ''`,message="file is for local runs (proctor run) only: in a cluster, use configMap, url or pvc"
	File string `json:"file,omitempty"`
}

// ConfigMapSource selects a key of a ConfigMap in the Evaluation's namespace.
type ConfigMapSource struct {
	// name of the ConfigMap, in the Evaluation's namespace.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// key of the ConfigMap's data that holds the samples.
	// +kubebuilder:validation:MinLength=1
	// +required
	Key string `json:"key"`
}

// PVCSource selects a file on a PersistentVolumeClaim in the Evaluation's namespace.
type PVCSource struct {
	// claimName is the name of the PersistentVolumeClaim, in the Evaluation's namespace.
	// +kubebuilder:validation:MinLength=1
	// +required
	ClaimName string `json:"claimName"`
	// path of the file relative to the volume's root, e.g. data/qs.jsonl; it must
	// stay inside the volume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule=`self != '' && !self.startsWith('/') && !self.startsWith('\\') && !self.matches('(^|/)[.][.](/|$)') && self.matches('(^|/)([^/.]|[.][^/])')`,message="pvc.path must be a relative path inside the volume, without '..'"
	// +required
	Path string `json:"path"`
}

// FieldMapping names the record fields that hold each part of a sample.
type FieldMapping struct {
	// id field; default "id". Samples without one are numbered from 1.
	// +optional
	ID string `json:"id,omitempty"`
	// input field, the text the prompt template sees as .Input; default "input".
	// +optional
	Input string `json:"input,omitempty"`
	// expected field, what scorers compare against; default "expected".
	// +optional
	Expected string `json:"expected,omitempty"`
	// messages field: a chat conversation sent instead of the rendered prompt; default "messages".
	// +optional
	Messages string `json:"messages,omitempty"`
	// tools field: tool definitions offered to the model; default "tools".
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
// +kubebuilder:validation:XValidation:rule=`has(self.provider) != has(self.endpointRef)`,message="a model needs exactly one of provider (with its baseURL and apiKey) or endpointRef (a ModelEndpoint that holds them)"
// +kubebuilder:validation:XValidation:rule=`!has(self.endpointRef) || ((!has(self.baseURL) || size(self.baseURL) == 0) && !has(self.apiKey) && !has(self.headers))`,message="a model with endpointRef takes baseURL, apiKey and headers from its ModelEndpoint: remove them from the model"
// +kubebuilder:validation:XValidation:rule=`!has(self.provider) || self.provider != 'agent' || has(self.agent)`,message="a model with provider agent needs agent.command"
// +kubebuilder:validation:XValidation:rule=`(has(self.provider) && self.provider == 'agent') || !has(self.agent)`,message="agent only applies to provider agent"
// +kubebuilder:validation:XValidation:rule=`(has(self.provider) && self.provider == 'agent') || (has(self.model) && size(self.model) != 0)`,message="model is required for provider openai or anthropic, and with endpointRef: the provider's model identifier, e.g. gpt-4.1-mini"
// +kubebuilder:validation:XValidation:rule=`!has(self.provider) || self.provider != 'agent' || !has(self.parameters)`,message="parameters do not apply to an agent model: agents take no sampling parameters"
// +kubebuilder:validation:XValidation:rule=`!has(self.provider) || self.provider != 'agent' || !has(self.baseURL) || size(self.baseURL) == 0`,message="baseURL does not apply to an agent model: agents call no API themselves"
// +kubebuilder:validation:XValidation:rule=`!has(self.provider) || self.provider != 'agent' || !has(self.apiKey) || (has(self.apiKey.env) && size(self.apiKey.env) != 0)`,message="an agent model's apiKey needs env, the variable the agent reads its key from: it has no default for agents"
// +kubebuilder:validation:XValidation:rule=`!has(self.batch) || !has(self.provider) || self.provider != 'agent'`,message="batch does not apply to an agent model: agents call no batch API"
type Model struct {
	// name identifies the model in results, status and the names of its Jobs.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// provider is openai (any OpenAI-compatible chat completions server), anthropic
	// (the Messages API) or agent (a command-line agent run once per sample).
	// Required unless endpointRef names a ModelEndpoint, which then says it.
	// +optional
	Provider Provider `json:"provider,omitempty"`

	// endpointRef names a ModelEndpoint of the Evaluation's namespace to call
	// instead of giving provider, baseURL, apiKey and headers here. Its limits
	// are shared with every other model calling through it (of this and of
	// other Evaluations), by weight; the model's own rateLimit, if set, caps
	// its share.
	// +optional
	EndpointRef *EndpointReference `json:"endpointRef,omitempty"`

	// model is the provider's model identifier, e.g. gpt-4.1-mini. Required for
	// openai and anthropic.
	// +optional
	Model string `json:"model,omitempty"`

	// baseURL of the API, http or https. Default https://api.openai.com/v1 for openai
	// and https://api.anthropic.com for anthropic; not for agents.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule=`self == '' || (isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHost() != '')`,message="baseURL must be an http or https URL"
	BaseURL string `json:"baseURL,omitempty"`

	// apiKey says where the API key comes from. Omit it for servers that need none.
	// An agent model's apiKey must name env.
	// +optional
	APIKey *APIKey `json:"apiKey,omitempty"`

	// headers are extra, non-secret HTTP headers sent with every call.
	// +optional
	Headers map[string]string `json:"headers,omitempty"`

	// parameters are the sampling parameters (openai and anthropic only).
	// +optional
	Parameters *Parameters `json:"parameters,omitempty"`

	// rateLimit is this model's per-minute budget of requests, input tokens and
	// output tokens for the whole Evaluation, shared by all of its shards (and by
	// judge calls when the model is a judge). A limit that is unset or 0 is not
	// enforced up front but discovered: on 429 answers Proctor backs off as the
	// server asks and shrinks its window instead of failing samples. With
	// endpointRef, it caps the model's share of the endpoint's limits.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`

	// concurrency overrides spec.concurrency for this model.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Concurrency *int32 `json:"concurrency,omitempty"`

	// agent configures an agent model: required when provider is agent, and
	// refused otherwise.
	// +optional
	Agent *Agent `json:"agent,omitempty"`

	// pricing is what the model's tokens cost; with endpointRef it overrides
	// the ModelEndpoint's pricing of this model. An agent model's pricing
	// prices the calls its agent makes through agent.endpoints to models
	// that the ModelEndpoint's pricing does not list (an agent may call
	// several models); a call of a model priced by neither has an unknown
	// cost.
	// +optional
	Pricing *Pricing `json:"pricing,omitempty"`

	// batch runs the model's samples through its provider's batch API
	// (openai and anthropic; not for agents). On a judge model it judges
	// through the batch API too: each answer is kept, awaiting its verdict,
	// and the judge's batches are submitted once the models have answered.
	// +optional
	Batch *BatchMode `json:"batch,omitempty"`
}

// APIKey locates an API key. The key itself never appears in the spec.
type APIKey struct {
	// env is the environment variable that holds the key: read from proctor's own
	// environment in a local run, and set from secretKeyRef in runner pods. Default
	// OPENAI_API_KEY for openai and ANTHROPIC_API_KEY for anthropic; required for
	// an agent.
	// +optional
	// +kubebuilder:validation:Pattern=`^([A-Za-z_][A-Za-z0-9_]*)?$`
	Env string `json:"env,omitempty"`

	// secretKeyRef is the key of a Secret, in the Evaluation's namespace, that
	// holds the API key (cluster mode).
	// +optional
	SecretKeyRef *corev1.SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// Parameters are sampling parameters; unset ones are left to the server.
type Parameters struct {
	// temperature is between 0 and 2.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2
	Temperature *Number `json:"temperature,omitempty"`

	// topP (nucleus sampling), between 0 and 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	TopP *Number `json:"topP,omitempty"`

	// maxTokens caps the answer's length. Anthropic requires one: default 1024 there.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTokens *int32 `json:"maxTokens,omitempty"`

	// seed asks for reproducible sampling where the server supports it.
	// +optional
	Seed *int64 `json:"seed,omitempty"`

	// stop sequences: the model stops generating at the first of them. At most 16.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Stop []string `json:"stop,omitempty"`
}

// RateLimit is a per-minute budget; 0 means unlimited.
type RateLimit struct {
	// requestsPerMinute caps the model calls per minute across the whole
	// Evaluation. 0 or unset: no fixed limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`

	// inputTokensPerMinute caps the input (prompt) tokens sent per minute across
	// the whole Evaluation. Input tokens are estimated before each call and
	// corrected from the usage the server reports. 0 or unset: no fixed limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InputTokensPerMinute int64 `json:"inputTokensPerMinute,omitempty"`

	// outputTokensPerMinute caps the output (completion) tokens received per
	// minute across the whole Evaluation. 0 or unset: no fixed limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OutputTokensPerMinute int64 `json:"outputTokensPerMinute,omitempty"`

	// burst is how much of each limit the provider lets through at once, as
	// the time the limit takes to refill it. Providers enforce rate limits as
	// token buckets refilled continuously, and may enforce a per-minute limit
	// over shorter periods (Anthropic: a 60 RPM limit may be enforced as 1
	// request per second). Default 1s: a bucket holds a sixtieth of each limit,
	// at least one request, and every shard's calls together stay within it.
	// A provider whose buckets hold more may say so, up to 1m. A duration
	// between 1s and 1m.
	// +optional
	Burst *Burst `json:"burst,omitempty"`
}

// +kubebuilder:validation:XValidation:rule=`has(self.image) && self.image != ""`,message="agent.image is needed in a cluster: the image holding the agent CLI (Proctor copies its runner into it)"

// Agent runs a command-line agent once per sample, in a fresh workspace directory
// holding the declared files. Its standard output is the answer.
type Agent struct {
	// image holding the agent CLI (cluster mode); the proctor binary is injected into it.
	// +optional
	Image string `json:"image,omitempty"`

	// command is the argv; each element is a Go template over .Prompt, .System,
	// .Sample, .ID, .Workspace and .Slot (the sample's slot, see hooks). No shell is involved. The first element, the
	// program, must not be empty.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:items:MaxLength=131072
	// +kubebuilder:validation:XValidation:rule=`self.size() == 0 || self[0].trim() != ''`,message="agent.command's first element, the program to run, must not be empty"
	// +listType=atomic
	// +required
	Command []string `json:"command"`

	// stdin is a template written to the agent's standard input.
	// +optional
	Stdin string `json:"stdin,omitempty"`

	// files maps workspace-relative paths, such as task.md or src/input.txt, to
	// templates of their content. A path must stay inside the workspace.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k != '' && !k.startsWith('/') && !k.startsWith('\\') && !k.matches('(^|/)[.][.](/|$)') && k.matches('(^|/)([^/.]|[.][^/])'))`,message="agent.files keys must be relative paths inside the workspace, without '..'"
	Files map[string]string `json:"files,omitempty"`

	// env is the agent's environment, besides PATH, HOME, the model's API key
	// variable and the variables of agent.endpoints (which win over entries of
	// the same name). In a local run an entry without a value is taken from
	// proctor's own environment.
	// +optional
	// +listType=atomic
	Env []corev1.EnvVar `json:"env,omitempty"`

	// timeout bounds one agent run, overriding spec.timeoutPerSample. When it
	// expires the agent's whole process group is killed. A duration such as 10m, at
	// most 24h.
	// +optional
	Timeout *Timeout `json:"timeout,omitempty"`

	// endpoints are ModelEndpoints the agent calls by itself. For each, Proctor
	// serves a proxy on the pod's loopback (or, locally, the machine's) and
	// gives the agent its address in baseURLEnv and, in apiKeyEnv, a
	// placeholder key of the sample's own: the endpoint's key never enters the
	// agent's environment. Calls through the proxy are paced by the endpoint's
	// limits together with every other Evaluation calling through it, retried
	// on 429 and 5xx, and counted in the sample's record (agentCalls, and
	// their tokens in inputTokens and outputTokens). At most 8, each endpoint
	// once.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule=`self.all(e, self.exists_one(f, f.endpointRef.name == e.endpointRef.name))`,message="agent.endpoints may name each ModelEndpoint once"
	// +kubebuilder:validation:XValidation:rule=`self.all(e, self.exists_one(f, f.baseURLEnv == e.baseURLEnv || f.apiKeyEnv == e.apiKeyEnv || f.baseURLEnv == e.apiKeyEnv || f.apiKeyEnv == e.baseURLEnv))`,message="agent.endpoints must give each endpoint variables of its own: two entries name the same baseURLEnv or apiKeyEnv"
	// +listType=atomic
	Endpoints []AgentEndpoint `json:"endpoints,omitempty"`

	// outputFormat says what the agent prints. text (also when unset): its
	// standard output is the answer. claude-code: Claude Code's
	// --output-format json (or stream-json, whose last line is the result):
	// the answer is its result, and its usage and total_cost_usd are the
	// sample's tokens and cost. codex: codex exec --json events: the answer is
	// the last agent message, and the turns' usage is the sample's tokens.
	// Reported usage is priced at the model's pricing when it has one (else
	// Claude Code's reported cost is kept); with agent.endpoints the proxies'
	// counts are used instead, as they see every call.
	// +optional
	// +kubebuilder:validation:Enum=text;claude-code;codex
	OutputFormat AgentOutputFormat `json:"outputFormat,omitempty"`

	// resources of the agent's container (cluster mode), where the agent runs
	// beside the runner container (whose resources are spec.runner.resources).
	// What it leaves unset is taken from the operator's defaults (its Helm
	// values runner.defaultResources.agent); a limit set without a request
	// gets the limit as its request, as Kubernetes does.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// AgentOutputFormat is what an agent prints (Agent.outputFormat).
type AgentOutputFormat string

const (
	// AgentOutputText: the standard output is the answer.
	AgentOutputText AgentOutputFormat = "text"
	// AgentOutputClaudeCode: Claude Code's JSON result (--output-format json
	// or stream-json).
	AgentOutputClaudeCode AgentOutputFormat = "claude-code"
	// AgentOutputCodex: Codex's exec --json events.
	AgentOutputCodex AgentOutputFormat = "codex"
)

// ReportsUsage says the agent's output reports its tokens.
func (f AgentOutputFormat) ReportsUsage() bool {
	return f == AgentOutputClaudeCode || f == AgentOutputCodex
}

// AgentEndpoint is a ModelEndpoint an agent calls, and the variables through
// which the agent learns where and with what key.
// +kubebuilder:validation:XValidation:rule=`self.baseURLEnv != self.apiKeyEnv`,message="baseURLEnv and apiKeyEnv must be two variables"
type AgentEndpoint struct {
	// endpointRef names the ModelEndpoint, in the Evaluation's namespace; its
	// weight is the agent's share of the endpoint against the other models
	// calling through it.
	// +required
	EndpointRef EndpointReference `json:"endpointRef"`

	// baseURLEnv is the variable the agent reads the API's base URL from, such
	// as OPENAI_BASE_URL or ANTHROPIC_BASE_URL. It is set to the proxy's
	// address, with the path of the endpoint's baseURL (http://127.0.0.1:PORT/v1
	// for an OpenAI-compatible endpoint at https://api.openai.com/v1).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	BaseURLEnv string `json:"baseURLEnv"`

	// apiKeyEnv is the variable the agent reads its key from, such as
	// OPENAI_API_KEY or ANTHROPIC_API_KEY. It is set to a placeholder that
	// only the proxy accepts, and only while the sample runs.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	APIKeyEnv string `json:"apiKeyEnv"`
}

// Prompt turns a sample into a message.
type Prompt struct {
	// system prompt, a Go template like Template.
	// +optional
	System string `json:"system,omitempty"`

	// template is a Go text/template over .Sample (the record's fields), .Input,
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

// Normalizer is a text normalization applied before comparing: number writes
// a text that is a number as one (42.0, +42 and 4.2e1 are 42).
// +kubebuilder:validation:Enum=trim;lowercase;collapse_whitespace;strip_punctuation;number
type Normalizer string

// Scorer turns each answer into a score between 0 and 1; a metric is the mean.
// +kubebuilder:validation:XValidation:rule=`self.type != 'judge' || has(self.judge)`,message="a judge scorer needs judge.model"
// +kubebuilder:validation:XValidation:rule=`self.type == 'judge' || !has(self.judge)`,message="judge only applies to the judge scorer"
// +kubebuilder:validation:XValidation:rule=`self.type == 'regex' || !has(self.pattern) || size(self.pattern) == 0`,message="pattern only applies to the regex scorer"
// +kubebuilder:validation:XValidation:rule=`self.type == 'numeric' || !has(self.tolerance)`,message="tolerance only applies to the numeric scorer"
// +kubebuilder:validation:XValidation:rule=`self.type == 'tool_call' || !has(self.checkArguments)`,message="checkArguments only applies to the tool_call scorer"
type Scorer struct {
	// type of scorer: exact_match, contains, regex (pattern), numeric (tolerance),
	// json_match, tool_call (checkArguments) or judge (judge).
	// +required
	Type ScorerType `json:"type"`

	// name of the metric: letters, digits, '-', '_' and '.'. Default the type.
	// Metric names must be unique across spec.scoring.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
	Name string `json:"name,omitempty"`

	// normalize the answer and the expected text, in order, before comparing.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Normalize []Normalizer `json:"normalize,omitempty"`

	// pattern is the regex scorer's RE2 pattern; unset uses each sample's expected
	// value as the pattern. Only for the regex scorer.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule=`self == '' || ''.matches(self) || !''.matches(self)`,message="pattern must be a valid RE2 regular expression"
	Pattern string `json:"pattern,omitempty"`

	// tolerance is the numeric scorer's absolute tolerance, 0 or more; default 0.
	// Only for the numeric scorer.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Tolerance *Number `json:"tolerance,omitempty"`

	// checkArguments makes tool_call require the expected arguments too (a subset
	// match), not only the tool's name. Default true. Only for the tool_call scorer.
	// +optional
	CheckArguments *bool `json:"checkArguments,omitempty"`

	// judge configures the judge scorer: required for it, refused for the others.
	// +optional
	Judge *Judge `json:"judge,omitempty"`
}

// Judge has a model grade each answer.
type Judge struct {
	// model names the entry of spec.models used as the judge: an openai or
	// anthropic model, which is then not itself evaluated. Its calls share that
	// model's limits, retries and cache.
	// +kubebuilder:validation:MinLength=1
	// +required
	Model string `json:"model"`

	// rubric is a Go template over .Prompt, .Input, .Output, .Expected and .Sample.
	// The judge must end its reply with a line "VERDICT: CORRECT", "VERDICT: PARTIAL"
	// or "VERDICT: INCORRECT". Default: a short grading rubric.
	// +optional
	Rubric string `json:"rubric,omitempty"`
}

// RetryPolicy retries failed calls with exponential backoff and full jitter, on
// connection errors, timeouts, 408, 429 and 5xx answers; other 4xx answers are
// final. A server's retry-after is always honoured.
// An unset backoff counts as its default (initialBackoff 1s, maxBackoff 60s) when
// the two are compared.
// +kubebuilder:validation:XValidation:rule=`!(has(self.initialBackoff) ? self.initialBackoff : '1s').matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || !(has(self.maxBackoff) ? self.maxBackoff : '60s').matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || duration(has(self.maxBackoff) ? self.maxBackoff : '60s') < duration('0s') || duration(has(self.initialBackoff) ? self.initialBackoff : '1s') <= duration(has(self.maxBackoff) ? self.maxBackoff : '60s')`,message="retry.initialBackoff must not be longer than retry.maxBackoff (default 1s and 60s)"
type RetryPolicy struct {
	// maxAttempts per call, the first included. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// initialBackoff is the cap of the first backoff; it doubles per attempt. A
	// duration between 0s and 24h, not longer than maxBackoff. Default 1s.
	// +optional
	InitialBackoff *Backoff `json:"initialBackoff,omitempty"`

	// maxBackoff caps the backoff: a duration between 0s and 24h. Default 60s.
	// +optional
	MaxBackoff *Backoff `json:"maxBackoff,omitempty"`

	// maxThrottleWait is how long a model may answer nothing but 429 (rate
	// limited) before Proctor gives up on it. A 429 means "later", never "wrong":
	// it does not count as an attempt, it shrinks the calls in flight and holds
	// them for the server's retry-after (which maxBackoff does not cap, since
	// calling earlier only meets another 429). When a model has had no successful
	// call for this long, or a retry-after asks for longer than what is left of
	// it, its remaining samples are not run: the run fails with the reason, and a
	// resumed run takes them up again. A duration between 1s and 24h. Default 10m.
	// +optional
	MaxThrottleWait *ThrottleWait `json:"maxThrottleWait,omitempty"`
}

// Cache configures the response cache.
type Cache struct {
	// enabled reuses a cached response for a request identical in provider,
	// endpoint, model, parameters, messages and tools.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
}

// Runner configures runner pods (cluster mode).
type Runner struct {
	// image of the runner; default the operator's own image.
	// +optional
	Image string `json:"image,omitempty"`
	// resources of the runner container. What it leaves unset is taken from
	// the operator's defaults (its Helm values runner.defaultResources.runner);
	// a limit set without a request gets the limit as its request, as
	// Kubernetes does. For an agent model the agent runs in a container of its
	// own: see agent.resources.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// serviceAccountName overrides the per-Evaluation ServiceAccount.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// nodeSelector for runner pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// tolerations for runner pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// stallTimeout is how long the run may stay unable to start any runner pod
	// before it fails: pods that cannot be created (a ResourceQuota, Pod
	// Security), scheduled, pull their image or create their container (a
	// missing Secret key), while no shard runs. The problem is shown in status
	// at once; this is how long it has to be fixed. A duration such as 5m, at
	// most 24h. Default 5m. Editing it does not start a new run.
	// +optional
	StallTimeout *Timeout `json:"stallTimeout,omitempty"`
	// keepFor is how long a run's runner Jobs, their pods (and so their
	// logs) and its shard ConfigMaps are kept once it ended with its
	// records committed to a results store, which then holds everything
	// they did; then they are deleted, so that a large run leaves nothing
	// per shard in etcd. 0s deletes them at once. A Job that failed is kept,
	// as is everything of a run that stopped (it may go on), and nothing is
	// deleted without a results store. A duration of 0s to 720h. Default:
	// the manager's (the chart's runner.keepFor, 1h). Editing it does not
	// start a new run.
	// +optional
	KeepFor *Retention `json:"keepFor,omitempty"`
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
	// conditions are Progressing, Complete, Failed, Suspended and Degraded (runner
	// pods cannot start or failed; its reason says why), with observedGeneration.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// phase is Pending (waiting for references or planning), Running, Succeeded,
	// Failed or Suspended.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// run identifies the current run: a hash of the spec fields that decide the
	// results. Editing any of them starts a new run.
	// +optional
	Run string `json:"run,omitempty"`
	// observedGeneration is the generation of the spec the status describes;
	// -1 until the controller first saw the Evaluation, so that tools that
	// compare it with metadata.generation (kstatus: Flux, Helm) see a new
	// Evaluation as in progress, not as current.
	// +optional
	// +default=-1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// progress counts the samples done of the current run.
	// +optional
	Progress *Progress `json:"progress,omitempty"`
	// shards counts the current run's shards by state.
	// +optional
	Shards *ShardCounts `json:"shards,omitempty"`
	// storedBytes is what the current run's records hold in the cluster (their
	// JSON, before compression): what the manager's storage budgets of a run,
	// a namespace and the cluster count.
	// +optional
	StoredBytes int64 `json:"storedBytes,omitempty"`
	// results has one entry per model and dataset.
	// +optional
	// +listType=atomic
	Results []ModelResult `json:"results,omitempty"`
	// spend is what the current run has spent, and its budget.
	// +optional
	Spend *SpendStatus `json:"spend,omitempty"`
	// estimate is what the current run will cost at most, estimated by its
	// planner before any sample ran, when the run has a budget or a priced
	// model.
	// +optional
	Estimate *EstimateStatus `json:"estimate,omitempty"`
	// batches are the current run's batches, when a model runs in batch
	// mode.
	// +optional
	Batches *BatchesStatus `json:"batches,omitempty"`
	// score is the first model's first metric over all its datasets so far, for
	// `kubectl get`.
	// +optional
	Score string `json:"score,omitempty"`
	// reason is a CamelCase word for what is wrong, when something is: why the
	// run waits (SecretNotFound), cannot make progress (ImagePullBackOff,
	// CreateContainerConfigError, Unschedulable, FailedCreate...) or failed
	// (OOMKilled, ConfigurationError...). Empty while all is well.
	// +optional
	Reason string `json:"reason,omitempty"`
	// message explains the phase: what is missing, which shards failed.
	// +optional
	Message string `json:"message,omitempty"`
	// resultsConfigMap holds the summary and the per-sample records.
	// +optional
	ResultsConfigMap string `json:"resultsConfigMap,omitempty"`
	// resultsLocation is where the run's records were committed in the
	// cluster's results store (s3://BUCKET/PREFIX), when it has one: they
	// stay there after the Evaluation is deleted.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ResultsLocation string `json:"resultsLocation,omitempty"`
	// startTime is when the current run started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the current run ended.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// comparison compares the run with spec.baseline, once it ended.
	// +optional
	Comparison *ComparisonStatus `json:"comparison,omitempty"`
	// gate says whether the run met spec.gate, once it ended.
	// +optional
	Gate *GateStatus `json:"gate,omitempty"`
	// gated is a hash of the spec.baseline and spec.gate that comparison and
	// gate describe: after an edit of either, an ended run is compared and
	// gated again.
	// +optional
	Gated string `json:"gated,omitempty"`
}

// Progress counts finished samples over all models and datasets.
type Progress struct {
	// total is the number of samples to run, over every model and dataset.
	// +required
	Total int64 `json:"total"`
	// completed counts the samples done, errored ones included.
	// +required
	Completed int64 `json:"completed"`
	// errored counts the samples that ended in an error.
	// +required
	Errored int64 `json:"errored"`
	// text is "completed/total", for `kubectl get`.
	// +optional
	Text string `json:"text,omitempty"`
}

// ShardCounts counts shards by their state: a shard's success is its own, and
// the pod of a worker (a Job index) is its current shard's. Shards not
// counted in active, pending, succeeded or failed wait for their worker to
// reach them, for a retry, or for the Evaluation to be resumed.
type ShardCounts struct {
	// total is the number of shards.
	// +required
	Total int32 `json:"total"`
	// active shards have a running pod.
	// +required
	Active int32 `json:"active"`
	// pending shards have a pod that is not running yet: being scheduled,
	// pulling its image, or stuck (conditions say why).
	// +optional
	Pending int32 `json:"pending"`
	// succeeded shards have finished.
	// +required
	Succeeded int32 `json:"succeeded"`
	// failed shards failed for good (their retries are spent).
	// +required
	Failed int32 `json:"failed"`
}

// ModelResult is the outcome of one model on one dataset.
type ModelResult struct {
	// model is the evaluated model's name.
	// +required
	Model string `json:"model"`
	// dataset is the dataset's name.
	// +required
	Dataset string `json:"dataset"`
	// total is the dataset's number of samples (after its limit).
	// +required
	Total int64 `json:"total"`
	// completed counts the samples done, errored ones included.
	// +required
	Completed int64 `json:"completed"`
	// errored counts the samples that ended in an error (they score 0).
	// +required
	Errored int64 `json:"errored"`
	// metrics maps metric names to scores formatted with four decimals.
	// +optional
	Metrics map[string]string `json:"metrics,omitempty"`
	// intervals are the metrics' 95% confidence intervals (four decimals):
	// Wilson's for a metric scored 0 or 1, else Student's t.
	// +optional
	// +listType=map
	// +listMapKey=metric
	// +kubebuilder:validation:MaxItems=32
	Intervals []MetricInterval `json:"intervals,omitempty"`
	// latencyMillis summarizes the successful samples' latencies.
	// +optional
	LatencyMillis *LatencySummary `json:"latencyMillis,omitempty"`
	// tokens totals the tokens the samples used.
	// +optional
	Tokens *TokenUsage `json:"tokens,omitempty"`
	// cost is what the samples cost, in US dollars.
	// +optional
	Cost *CostSummary `json:"cost,omitempty"`
}

// MetricInterval is a confidence interval of a metric.
type MetricInterval struct {
	// metric is the metric's name.
	// +required
	Metric string `json:"metric"`
	// lo is its lower bound, with four decimals.
	// +required
	Lo string `json:"lo"`
	// hi is its upper bound, with four decimals.
	// +required
	Hi string `json:"hi"`
}

// LatencySummary summarizes per-sample latencies in milliseconds.
type LatencySummary struct {
	// p50 is the median.
	// +required
	P50 int64 `json:"p50"`
	// p95 is the 95th percentile.
	// +required
	P95 int64 `json:"p95"`
}

// TokenUsage totals tokens: the evaluated model's, and what judging its
// answers cost.
type TokenUsage struct {
	// input tokens the model read.
	// +required
	Input int64 `json:"input"`
	// output tokens the model wrote.
	// +required
	Output int64 `json:"output"`
	// judgeInput tokens the judges read, judging these answers.
	// +optional
	JudgeInput int64 `json:"judgeInput,omitempty"`
	// judgeOutput tokens the judges wrote.
	// +optional
	JudgeOutput int64 `json:"judgeOutput,omitempty"`
}

// Evaluation runs models over datasets and scores them.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=eval;evals,categories=proctor
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress.text`
// +kubebuilder:printcolumn:name="Score",type=string,JSONPath=`.status.score`
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.spend.cost`
// +kubebuilder:printcolumn:name="Batches",type=string,JSONPath=`.status.batches.text`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule=`!has(self.spec.baseline) || !has(self.spec.baseline.evaluation) || self.spec.baseline.evaluation != self.metadata.name`,message="spec.baseline.evaluation names this Evaluation: a run cannot be its own baseline (keep a copy of its results ConfigMap and name it in baseline.configMap)"
type Evaluation struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to evaluate and how.
	// +required
	Spec EvaluationSpec `json:"spec"`
	// status is what the controller observed of the current run. The API
	// server gives a new Evaluation status.observedGeneration -1.
	// +optional
	// +default={}
	Status EvaluationStatus `json:"status,omitempty,omitzero"`
}

// EvaluationList is a list of Evaluations.
//
// +kubebuilder:object:root=true
type EvaluationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Evaluation `json:"items"`
}
