// Package validation holds one table of Evaluation manifests for the two places
// that validate them: a local run (evalfile.Decode, which runs the CRD's own
// schema and CEL rules with the API server's libraries, internal/admission, then
// v1alpha1.ValidateLocal) and the API server.
// Cases must be refused by both, Accepted accepted by both, and Differences are the
// known disagreements. local_test.go runs the table against the loader;
// test/integration runs it against a real kube-apiserver.
package validation

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// Case is one Evaluation manifest and what each side says of it.
type Case struct {
	// Name identifies the case; it is also the manifest's metadata.name.
	Name string
	// Manifest is a whole Evaluation in YAML: Valid with a small edit.
	Manifest string
	// Local is a substring of the local loader's error; empty means that the local
	// loader accepts the manifest (in Cases only for what a local run has and a
	// cluster does not: a dataset or baseline file, an agent without an image).
	Local string
	// Admission is a substring of the API server's refusal; empty means that the
	// API server accepts the manifest.
	Admission string
}

// Valid is an Evaluation that both the local loader and the API server accept. Every
// other manifest is Valid with small edits.
const Valid = `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata:
  name: valid
spec:
  datasets:
  - name: arithmetic
    source:
      inline:
      - {id: q1, input: "What is 2 + 2?", expected: "4"}
      - {id: q2, input: "What is 3 * 3?", expected: "9"}
  models:
  - name: gpt
    provider: openai
    model: gpt-4.1-mini
  scoring:
  - type: exact_match
    normalize: [trim]
`

// Endpoints are the ModelEndpoints the cases' models refer to, which a local
// run's file holds beside the Evaluation (a cluster holds them as objects of
// their own; admission does not look them up).
const Endpoints = `apiVersion: proctor.dev/v1alpha1
kind: ModelEndpoint
metadata:
  name: team-openai
spec:
  provider: openai
  limits: {requestsPerMinute: 600}
---
apiVersion: proctor.dev/v1alpha1
kind: ModelEndpoint
metadata:
  name: team-anthropic
spec:
  provider: anthropic
  apiKey: {env: TEAM_ANTHROPIC_KEY}
---
apiVersion: proctor.dev/v1alpha1
kind: ModelEndpoint
metadata:
  name: team-key
spec:
  provider: openai
  baseURL: http://localhost:8080/v1
`

// Accepted are more manifests that both must accept: the edges of the rules that
// Cases tests from the other side. Local and Admission are empty.
var Accepted []Case

// Cases are the invalid manifests: both sides refuse them, with an error naming
// the field and the problem.
var Cases []Case

// Fragments used by several cases.
const (
	agentModel = `{name: coder, provider: agent, agent: {image: coder:1, command: [coder-cli, -p, "{{ .Prompt }}"]}}`
	judgeModel = `{name: judge, provider: anthropic, model: claude-sonnet-4-5}`
	judgeScore = `{type: judge, judge: {model: judge}}`
)

func init() {
	Accepted = []Case{
		ok("valid-everything",
			set("spec.datasets[1]", `{name: from-url, source: {url: "https://example.com/qs.jsonl#v2", sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}, format: jsonl, limit: 10}`),
			set("spec.datasets[2]", `{name: from-configmap, source: {configMap: {name: qs, key: qs.csv}}, format: csv, fields: {input: question, expected: answer}}`),
			set("spec.datasets[3]", `{name: from-pvc, source: {pvc: {claimName: data, path: ./sets/qs.json}}}`),
			set("spec.models[0].baseURL", `http://fakellm.default.svc:8080/v1`),
			set("spec.models[0].apiKey", `{env: "", secretKeyRef: {name: keys, key: openai}}`),
			set("spec.models[0].parameters", `{temperature: 0, topP: 1, maxTokens: 1, seed: -3, stop: ["\n"]}`),
			set("spec.models[0].rateLimit", `{requestsPerMinute: 0, inputTokensPerMinute: 100000, burst: 1m}`),
			set("spec.models[1]", judgeModel),
			set("spec.models[2]", `{name: coder, provider: agent, apiKey: {env: CODER_KEY}, concurrency: 1, agent: {image: coder:1, command: [" coder-cli", "{{ .Prompt }}"], files: {task.md: "{{ .Input }}", "src/./in.txt": x, "...": "yes", ".hidden": z}, env: [{name: _TOKEN_2, value: x}], timeout: 10m}}`),
			set("spec.scoring[1]", `{type: regex, name: re, pattern: "^[0-9]+$"}`),
			set("spec.scoring[2]", `{type: numeric, tolerance: 0.5}`),
			set("spec.scoring[3]", `{type: tool_call, checkArguments: false}`),
			set("spec.scoring[4]", judgeScore),
			set("spec.scoring[5]", `{type: exact_match, name: exact.strict, normalize: [trim, lowercase]}`),
			set("spec.retry", `{maxAttempts: 100, initialBackoff: 0s, maxBackoff: 0s}`),
			set("spec.timeoutPerSample", `24h`),
			set("spec.concurrency", `10000`),
			set("spec.parallelism", `1`),
			set("spec.shardSize", `1`),
		),
		ok("valid-pricing-and-budget",
			set("spec.models[0].pricing", `{inputPerMillion: 2.5, outputPerMillion: 10, cachedInputPerMillion: 1.25, cacheWriteInputPerMillion: 3.125, batchInputPerMillion: 1.25, batchOutputPerMillion: 5}`),
			set("spec.models[1]", `{name: judge, endpointRef: {name: team-anthropic}, model: claude-sonnet-4-5}`),
			set("spec.scoring[1]", judgeScore),
			set("spec.budget", `{maxCost: 25.50, maxTokens: 5000000, assumedOutputTokens: 512}`),
		),
		ok("valid-batch",
			set("spec.models[0].batch", `{maxRequests: 20000, maxInFlight: 2, completionWindow: 24h, pollInterval: 100ms, retryFailed: sync, deadline: 2h}`),
			set("spec.models[1]", judgeModel),
			set("spec.scoring[1]", judgeScore),
		),
		ok("valid-judge-in-batches",
			set("spec.models[1]", judgeModel), set("spec.models[1].batch", `{retryFailed: sync}`), set("spec.scoring[1]", judgeScore),
		),
		ok("valid-baseline-and-gate",
			set("spec.baseline", `{evaluation: nightly, model: gpt}`),
			set("spec.gate", `{significance: 0.01, rules: [{metric: exact_match, min: 0.8, maxDrop: 0.02}, {metric: exact_match, model: gpt, dataset: arithmetic, min: 0}]}`),
		),
		ok("valid-gate-configmap-baseline",
			set("spec.baseline", `{configMap: nightly-results}`),
			set("spec.gate", `{rules: [{metric: exact_match, maxDrop: 0}]}`),
		),
		ok("valid-own-results-store",
			set("spec.resultsStore", `{url: "s3://team-evals/nightly", endpoint: "http://minio.storage.svc:9000", region: eu-west-1, credentialsSecret: team-s3}`)),
		ok("valid-own-results-store-bucket-only",
			set("spec.resultsStore", `{url: "s3://team.evals", credentialsSecret: team-s3}`)),
		ok("valid-tokens-budget-unpriced",
			set("spec.budget", `{maxTokens: 1}`),
		),
		ok("valid-endpoint-refs",
			set("spec.models[0]", `{name: gpt, endpointRef: {name: team-openai, weight: 1000}, model: gpt-4.1-mini, rateLimit: {requestsPerMinute: 100}, parameters: {temperature: 0}}`),
			set("spec.models[1]", `{name: judge, endpointRef: {name: team-anthropic}, model: claude-sonnet-4-5}`),
			set("spec.scoring[1]", judgeScore),
		),
		ok("valid-agent-endpoints",
			set("spec.models[1]", agentModel),
			set("spec.models[1].agent.endpoints", `[{endpointRef: {name: team-openai, weight: 3}, baseURLEnv: OPENAI_BASE_URL, apiKeyEnv: OPENAI_API_KEY}, {endpointRef: {name: team-anthropic}, baseURLEnv: ANTHROPIC_BASE_URL, apiKeyEnv: ANTHROPIC_API_KEY}]`),
		),
		ok("valid-services-and-hooks",
			set("spec.models[1]", agentModel),
			set("spec.services", `[{name: crm-db, image: "proctor-postgres:15", command: [sh, -c, "exec postgres -D $PROCTOR_SERVICE_DIR/data"], env: [{name: PGPORT, value: "5432"}], ports: [{name: pg, containerPort: 5432}], readinessProbe: {tcpSocket: {port: pg}, periodSeconds: 1, failureThreshold: 30}, resources: {limits: {memory: 256Mi}}}, {name: mock-api, image: "mock:1", readinessProbe: {httpGet: {path: /healthz, port: 8081}}}]`),
			set("spec.hooks", `{image: "proctor-postgres:15", env: [{name: PGUSER, value: owner}], setup: {command: [sh, -c, "createdb crm"]}, beforeSample: {command: [psql, "-d", "crm_{{ .Slot }}", "-f", "-"], stdin: "{{ .Sample.seed }}", timeout: 30s}, afterSample: {command: ["true"], timeout: 24h}, repairTimeout: 1h}`),
		),
		ok("valid-durations",
			set("spec.retry", `{initialBackoff: 1.5s, maxBackoff: 1m30s, maxThrottleWait: 1h}`),
			set("spec.timeoutPerSample", `1h30m`),
		),
		ok("valid-backoff-defaults", set("spec.retry", `{initialBackoff: 60s}`)),
		ok("valid-keep-for", set("spec.runner", `{keepFor: 0s}`)),
		ok("valid-keep-for-longest", set("spec.runner", `{keepFor: 720h}`)),
		ok("valid-edges",
			set("spec.datasets[0].source", `{url: "HTTP://[::1]:8080/qs.jsonl?v=2"}`),
			set("spec.datasets[1]", `{name: pvc, source: {pvc: {claimName: data, path: "sets//qs.jsonl/"}}}`),
			set("spec.models[1]", agentModel),
			set("spec.models[1].agent.files", `{"./.hidden": x, "a//b/": x, "..x/x..": x}`),
			set("spec.models[1].agent.timeout", `.5s`),
			set("spec.retry", `{initialBackoff: "0", maxBackoff: 1µs}`),
			set("spec.timeoutPerSample", `1h0m0.5s`),
			set("spec.scoring[1]", `{type: regex, pattern: "(?<n>[0-9]+)\\p{Greek}*"}`),
		),
		ok("valid-empty-optional-strings",
			set("spec.datasets[0].source.sha256", `""`),
			set("spec.models[0].baseURL", `""`),
			set("spec.models[0].apiKey", `{env: ""}`),
			set("spec.scoring[0].name", `""`),
			set("spec.scoring[1]", `{type: regex, pattern: ""}`),
		),
		ok("valid-judge-also-rated-by-others",
			set("spec.models[1]", judgeModel),
			set("spec.scoring[1]", judgeScore),
			set("spec.scoring[2]", `{type: judge, name: judge-again, judge: {model: judge}}`),
		),
	}

	Cases = []Case{
		// Datasets.
		bad("no-datasets",
			"spec.datasets in body should have at least 1 items", set("spec.datasets", `[]`)),
		bad("datasets-missing",
			"spec.datasets: Required value", del("spec.datasets")),
		bad("duplicate-dataset-names",
			"spec.datasets[1]: Duplicate value", set("spec.datasets[1]", `{name: arithmetic, source: {url: "https://example.com/qs.jsonl"}}`)),
		bad("bad-dataset-name",
			"spec.datasets[0].name in body should match", set("spec.datasets[0].name", `Arithmetic`)),
		bad("dataset-name-too-long",
			"spec.datasets[0].name: Too long", set("spec.datasets[0].name", strings.Repeat("d", 64))),
		bad("unknown-dataset-format",
			`spec.datasets[0].format: Unsupported value: "xml"`, set("spec.datasets[0].format", `xml`)),
		bad("negative-dataset-limit",
			"spec.datasets[0].limit in body should be greater than or equal to 0", set("spec.datasets[0].limit", `-1`)),
		bad("no-source",
			"spec.datasets[0].source: Invalid value: exactly one of inline, configMap, url, pvc or file must be set",
			set("spec.datasets[0].source", `{}`)),
		bad("two-sources",
			"spec.datasets[0].source: Invalid value: exactly one of inline, configMap, url, pvc or file must be set",
			set("spec.datasets[0].source.url", `https://example.com/qs.jsonl`)),
		bad("configmap-and-pvc",
			"exactly one of inline, configMap, url, pvc or file must be set",
			set("spec.datasets[0].source", `{configMap: {name: qs, key: qs.jsonl}, pvc: {claimName: data, path: qs.jsonl}}`)),
		bad("empty-inline",
			"spec.datasets[0].source.inline in body should have at least 1 items", set("spec.datasets[0].source.inline", `[]`)),
		{
			// A file source is what local runs read; a cluster cannot, so only the API
			// server refuses it.
			Name:      "file-source-in-cluster",
			Manifest:  build("file-source-in-cluster", set("spec.datasets[0].source", `{file: data/qs.jsonl}`)),
			Admission: "spec.datasets[0].source.file: Invalid value: \"data/qs.jsonl\": file is for local runs (proctor run) only: in a cluster, use configMap, url or pvc",
		},
		{
			// Locally an agent runs on the machine; a cluster runs it in an image.
			Name:      "agent-without-image-in-cluster",
			Manifest:  build("agent-without-image-in-cluster", set("spec.models[0]", `{name: coder, provider: agent, agent: {command: [coder-cli]}}`)),
			Admission: "agent.image is needed in a cluster",
		},
		bad("file-and-url",
			"exactly one of inline, configMap, url, pvc or file must be set",
			set("spec.datasets[0].source", `{file: qs.jsonl, url: "https://example.com/qs.jsonl"}`)),
		bad("sha256-without-url",
			"spec.datasets[0].source: Invalid value: sha256 only applies to a url source",
			set("spec.datasets[0].source.sha256", strings.Repeat("ab", 32))),
		bad("sha256-not-hex",
			"spec.datasets[0].source.sha256 in body should match",
			set("spec.datasets[0].source", `{url: "https://example.com/qs.jsonl", sha256: abc}`)),
		bad("url-not-http",
			"spec.datasets[0].source.url: Invalid value: \"ftp://example.com/qs.jsonl\": url must be an http or https URL",
			set("spec.datasets[0].source", `{url: "ftp://example.com/qs.jsonl"}`)),
		bad("url-relative",
			"url must be an http or https URL", set("spec.datasets[0].source", `{url: data/qs.jsonl}`)),
		bad("url-without-host",
			"url must be an http or https URL", set("spec.datasets[0].source", `{url: "https:///qs.jsonl"}`)),
		bad("url-scheme-relative",
			"url must be an http or https URL", set("spec.datasets[0].source", `{url: "//example.com/qs.jsonl"}`)),
		bad("configmap-without-key",
			"spec.datasets[0].source.configMap.key: Required value", set("spec.datasets[0].source", `{configMap: {name: qs}}`)),
		bad("pvc-without-claim",
			"spec.datasets[0].source.pvc.claimName: Required value", set("spec.datasets[0].source", `{pvc: {path: qs.jsonl}}`)),
		bad("pvc-absolute-path",
			"spec.datasets[0].source.pvc.path: Invalid value: \"/data/qs.jsonl\": pvc.path must be a relative path inside the volume",
			set("spec.datasets[0].source", `{pvc: {claimName: data, path: /data/qs.jsonl}}`)),
		bad("pvc-path-escapes",
			"pvc.path must be a relative path inside the volume",
			set("spec.datasets[0].source", `{pvc: {claimName: data, path: sets/../../qs.jsonl}}`)),
		bad("pvc-path-is-the-root",
			"pvc.path must be a relative path inside the volume",
			set("spec.datasets[0].source", `{pvc: {claimName: data, path: ./}}`)),

		// Models.
		bad("no-models",
			"spec.models in body should have at least 1 items", set("spec.models", `[]`)),
		bad("models-missing",
			"spec.models: Required value", del("spec.models")),
		bad("duplicate-model-names",
			"spec.models[1]: Duplicate value", set("spec.models[1]", `{name: gpt, provider: anthropic, model: claude-sonnet-4-5}`)),
		bad("bad-model-name",
			"spec.models[0].name in body should match", set("spec.models[0].name", `GPT_4`)),
		bad("model-name-too-long",
			"spec.models[0].name: Too long", set("spec.models[0].name", strings.Repeat("m", 41))),
		bad("unknown-provider",
			`spec.models[0].provider: Unsupported value: "gemini"`, set("spec.models[0].provider", `gemini`)),
		bad("provider-missing",
			"a model needs exactly one of provider (with its baseURL and apiKey) or endpointRef", del("spec.models[0].provider")),
		bad("endpoint-and-provider",
			"a model needs exactly one of provider (with its baseURL and apiKey) or endpointRef",
			set("spec.models[0].endpointRef", `{name: team-key}`)),
		bad("endpoint-with-base-url",
			"a model with endpointRef takes baseURL, apiKey and headers from its ModelEndpoint",
			set("spec.models[0]", `{name: gpt, endpointRef: {name: team-key}, model: gpt-4.1-mini, baseURL: "http://x:1/v1"}`)),
		bad("endpoint-with-api-key",
			"a model with endpointRef takes baseURL, apiKey and headers from its ModelEndpoint",
			set("spec.models[0]", `{name: gpt, endpointRef: {name: team-key}, model: gpt-4.1-mini, apiKey: {env: KEY}}`)),
		bad("endpoint-without-model",
			"model is required for provider openai or anthropic, and with endpointRef",
			set("spec.models[0]", `{name: gpt, endpointRef: {name: team-key}}`)),
		bad("endpoint-bad-name",
			"spec.models[0].endpointRef.name in body should match",
			set("spec.models[0]", `{name: gpt, endpointRef: {name: Team_Key}, model: gpt-4.1-mini}`)),
		bad("endpoint-weight-zero",
			"spec.models[0].endpointRef.weight in body should be greater than or equal to 1",
			set("spec.models[0]", `{name: gpt, endpointRef: {name: team-key, weight: 0}, model: gpt-4.1-mini}`)),
		bad("endpoint-weight-too-high",
			"spec.models[0].endpointRef.weight in body should be less than or equal to 1000",
			set("spec.models[0]", `{name: gpt, endpointRef: {name: team-key, weight: 1001}, model: gpt-4.1-mini}`)),
		bad("openai-without-model",
			"spec.models[0]: Invalid value: model is required for provider openai or anthropic",
			del("spec.models[0].model")),
		bad("anthropic-without-model",
			"model is required for provider openai or anthropic",
			set("spec.models[0]", `{name: claude, provider: anthropic, model: ""}`)),
		bad("agent-without-agent",
			"spec.models[0]: Invalid value: a model with provider agent needs agent.command",
			set("spec.models[0]", `{name: coder, provider: agent}`)),
		bad("agent-on-openai",
			"spec.models[0]: Invalid value: agent only applies to provider agent",
			set("spec.models[0].agent", `{command: [coder-cli]}`)),
		bad("agent-with-parameters",
			"parameters do not apply to an agent model: agents take no sampling parameters",
			set("spec.models[0]", agentModel), set("spec.models[0].parameters", `{temperature: 0}`)),
		bad("agent-with-base-url",
			"baseURL does not apply to an agent model: agents call no API themselves",
			set("spec.models[0]", agentModel), set("spec.models[0].baseURL", `https://api.openai.com/v1`)),
		bad("agent-api-key-without-env",
			"an agent model's apiKey needs env",
			set("spec.models[0]", agentModel), set("spec.models[0].apiKey", `{secretKeyRef: {name: keys, key: coder}}`)),
		bad("agent-api-key-empty-env",
			"an agent model's apiKey needs env",
			set("spec.models[0]", agentModel), set("spec.models[0].apiKey", `{env: ""}`)),
		bad("base-url-not-http",
			"spec.models[0].baseURL: Invalid value: \"api.openai.com/v1\": baseURL must be an http or https URL",
			set("spec.models[0].baseURL", `api.openai.com/v1`)),
		bad("base-url-unix",
			"baseURL must be an http or https URL", set("spec.models[0].baseURL", `unix:///run/llm.sock`)),
		bad("api-key-env-not-a-name",
			"spec.models[0].apiKey.env in body should match", set("spec.models[0].apiKey", `{env: OPENAI-KEY}`)),
		bad("temperature-too-high",
			"spec.models[0].parameters.temperature in body should be less than or equal to 2",
			set("spec.models[0].parameters", `{temperature: 2.5}`)),
		bad("temperature-negative",
			"spec.models[0].parameters.temperature in body should be greater than or equal to 0",
			set("spec.models[0].parameters", `{temperature: -0.1}`)),
		bad("top-p-too-high",
			"spec.models[0].parameters.topP in body should be less than or equal to 1",
			set("spec.models[0].parameters", `{topP: 1.01}`)),
		bad("max-tokens-zero",
			"spec.models[0].parameters.maxTokens in body should be greater than or equal to 1",
			set("spec.models[0].parameters", `{maxTokens: 0}`)),
		bad("negative-rate",
			"spec.models[0].rateLimit.requestsPerMinute in body should be greater than or equal to 0",
			set("spec.models[0].rateLimit", `{requestsPerMinute: -60}`)),
		bad("burst-too-short",
			"spec.models[0].rateLimit.burst: Invalid value: \"500ms\": must be a duration of 1s to 1m, such as 1s or 10s", set("spec.models[0].rateLimit", `{requestsPerMinute: 60, burst: 500ms}`)),
		bad("burst-too-long",
			"spec.models[0].rateLimit.burst: Invalid value: \"2m\": must be a duration of 1s to 1m, such as 1s or 10s", set("spec.models[0].rateLimit", `{requestsPerMinute: 60, burst: 2m}`)),
		bad("negative-token-rate",
			"spec.models[0].rateLimit.outputTokensPerMinute in body should be greater than or equal to 0",
			set("spec.models[0].rateLimit", `{outputTokensPerMinute: -1}`)),
		bad("model-concurrency-zero",
			"spec.models[0].concurrency in body should be greater than or equal to 1",
			set("spec.models[0].concurrency", `0`)),
		bad("agent-endpoint-twice",
			"agent.endpoints may name each ModelEndpoint once",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.endpoints", `[{endpointRef: {name: team-openai}, baseURLEnv: A_URL, apiKeyEnv: A_KEY}, {endpointRef: {name: team-openai}, baseURLEnv: B_URL, apiKeyEnv: B_KEY}]`)),
		bad("agent-endpoints-share-a-variable",
			"agent.endpoints must give each endpoint variables of its own",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.endpoints", `[{endpointRef: {name: a}, baseURLEnv: A_URL, apiKeyEnv: OPENAI_API_KEY}, {endpointRef: {name: b}, baseURLEnv: B_URL, apiKeyEnv: OPENAI_API_KEY}]`)),
		bad("agent-endpoint-one-variable",
			"baseURLEnv and apiKeyEnv must be two variables",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.endpoints", `[{endpointRef: {name: a}, baseURLEnv: OPENAI_API_KEY, apiKeyEnv: OPENAI_API_KEY}]`)),
		bad("agent-endpoint-without-base-url-env",
			"spec.models[0].agent.endpoints[0].baseURLEnv: Required value",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.endpoints", `[{endpointRef: {name: a}, apiKeyEnv: OPENAI_API_KEY}]`)),
		bad("agent-endpoint-bad-variable",
			"spec.models[0].agent.endpoints[0].baseURLEnv in body should match",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.endpoints", `[{endpointRef: {name: a}, baseURLEnv: OPENAI-BASE-URL, apiKeyEnv: OPENAI_API_KEY}]`)),
		bad("service-name-taken",
			"spec.services[0].name: Invalid value: service names runner, agent, hooks and install-proctor are taken",
			set("spec.services", `[{name: runner, image: "pg:1"}]`)),
		bad("service-port-of-the-runner-metrics",
			"spec.services[0].ports[0].containerPort: Invalid value: port 9464 is taken in runner pods",
			set("spec.services", `[{name: db, image: "pg:1", ports: [{name: pg, containerPort: 9464}]}]`)),
		bad("scheduling-min-parallelism-over-parallelism",
			"spec.scheduling.minParallelism: Invalid value: scheduling.minParallelism must be at most spec.parallelism",
			set("spec.parallelism", "2"), set("spec.scheduling", `{queueName: team-a, minParallelism: 3}`)),
		bad("scheduling-queue-name-not-a-name",
			"spec.scheduling.queueName in body should match",
			set("spec.scheduling", `{queueName: "Team A"}`)),
		ok("scheduling-kueue-queue",
			set("spec.scheduling", `{queueName: team-a, priorityClassName: evals-low, minParallelism: 2}`)),
		bad("tracing-endpoint-not-a-url",
			`spec.tracing.endpoint: Invalid value: "otel-collector:4318": tracing.endpoint must be an http:// or https:// URL`,
			set("spec.tracing", `{endpoint: "otel-collector:4318"}`)),
		bad("tracing-protocol-unknown",
			`spec.tracing.protocol: Unsupported value: "http/json"`,
			set("spec.tracing", `{endpoint: "http://otel-collector:4318", protocol: http/json}`)),
		ok("tracing-to-langfuse",
			set("spec.tracing", `{endpoint: "https://cloud.langfuse.com/api/public/otel", headersSecretRef: {name: langfuse, key: otlp-headers}, captureContent: true}`)),
		bad("service-name-twice",
			`spec.services[1]: Duplicate value: {"name":"db"}`,
			set("spec.services", `[{name: db, image: "pg:1"}, {name: db, image: "pg:2"}]`)),
		bad("service-name-not-a-label",
			"spec.services[0].name in body should match",
			set("spec.services", `[{name: CRM_db, image: "pg:1"}]`)),
		bad("service-without-image",
			"spec.services[0].image: Required value",
			set("spec.services", `[{name: db, command: [postgres]}]`)),
		bad("service-port-out-of-range",
			"spec.services[0].ports[0].containerPort in body should be less than or equal to 65535",
			set("spec.services", `[{name: db, image: "pg:1", ports: [{containerPort: 70000}]}]`)),
		bad("service-probe-two-handlers",
			"readinessProbe needs exactly one of exec, httpGet, tcpSocket or grpc",
			set("spec.services", `[{name: db, image: "pg:1", ports: [{containerPort: 5432}], readinessProbe: {exec: {command: [pg_isready]}, tcpSocket: {port: 5432}}}]`)),
		bad("hooks-without-an-image",
			"hooks need hooks.image, the image they run in (with their tools), unless every model under evaluation is an agent",
			set("spec.hooks", `{beforeSample: {command: [psql]}}`)),
		bad("hook-command-empty",
			"spec.hooks.beforeSample.command in body should have at least 1 items",
			set("spec.hooks", `{beforeSample: {command: []}}`)),
		bad("hook-command-blank-program",
			"a hook's command must start with the program to run",
			set("spec.hooks", `{setup: {command: ["", x]}}`)),
		bad("hook-timeout-zero",
			"spec.hooks.afterSample.timeout: Invalid value: \"0s\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m",
			set("spec.hooks", `{afterSample: {command: ["true"], timeout: 0s}}`)),
		bad("hooks-repair-timeout-too-long",
			"spec.hooks.repairTimeout: Invalid value: \"25h\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m",
			set("spec.hooks", `{repairTimeout: 25h}`)),
		bad("agent-command-empty",
			"spec.models[0].agent.command in body should have at least 1 items",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.command", `[]`)),
		bad("agent-command-missing",
			"spec.models[0].agent.command: Required value",
			set("spec.models[0]", agentModel), del("spec.models[0].agent.command")),
		bad("agent-command-blank-program",
			"spec.models[0].agent.command: Invalid value: agent.command's first element, the program to run, must not be empty",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.command", `[" ", "{{ .Prompt }}"]`)),
		bad("agent-file-absolute",
			"spec.models[0].agent.files: Invalid value: agent.files keys must be relative paths inside the workspace",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.files", `{/etc/task.md: x}`)),
		bad("agent-file-escapes",
			"agent.files keys must be relative paths inside the workspace",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.files", `{task.md: x, ../task.md: x}`)),
		bad("agent-file-escapes-deeper",
			"agent.files keys must be relative paths inside the workspace",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.files", `{"src/../../task.md": x}`)),
		bad("agent-file-is-the-workspace",
			"agent.files keys must be relative paths inside the workspace",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.files", `{".": x}`)),
		bad("agent-file-empty-name",
			"agent.files keys must be relative paths inside the workspace",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.files", `{"": x}`)),
		bad("agent-file-backslash",
			"agent.files keys must be relative paths inside the workspace",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.files", `{"\\tmp\\task.md": x}`)),
		bad("agent-timeout-zero",
			"spec.models[0].agent.timeout: Invalid value: \"0s\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.timeout", `0s`)),
		bad("agent-timeout-too-long",
			"spec.models[0].agent.timeout: Invalid value: \"25h\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.timeout", `25h`)),
		bad("agent-timeout-not-a-duration",
			"spec.models[0].agent.timeout: Invalid value: \"ten minutes\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.timeout", `ten minutes`)),

		// Spend.
		bad("pricing-negative",
			"spec.models[0].pricing.outputPerMillion in body should be greater than or equal to 0",
			set("spec.models[0].pricing", `{inputPerMillion: 1, outputPerMillion: -1}`)),
		bad("pricing-without-output",
			"spec.models[0].pricing.outputPerMillion: Required value",
			set("spec.models[0].pricing", `{inputPerMillion: 1}`)),
		bad("pricing-one-batch-price",
			"pricing.batchInputPerMillion is needed with batchOutputPerMillion: give both batch prices, or neither",
			set("spec.models[0].pricing", `{inputPerMillion: 1, outputPerMillion: 2, batchOutputPerMillion: 1}`)),
		bad("budget-empty",
			"a budget needs maxCost, maxTokens or both",
			set("spec.budget", `{assumedOutputTokens: 100}`)),
		bad("budget-cost-unpriced-model",
			"spec.budget: Invalid value: spec.budget.maxCost needs every model's pricing",
			set("spec.budget", `{maxCost: 10}`)),
		bad("budget-agent-without-endpoints",
			"spec.budget cannot bound an agent that calls its API itself",
			set("spec.models[1]", agentModel), set("spec.budget", `{maxTokens: 1000}`)),

		bad("results-store-not-s3",
			"resultsStore.url: want s3://BUCKET or s3://BUCKET/PREFIX",
			set("spec.resultsStore", `{url: "https://team-evals/nightly", credentialsSecret: team-s3}`)),
		bad("results-store-dot-dot",
			"no empty, . or .. prefix segment",
			set("spec.resultsStore", `{url: "s3://team-evals/a/../b", credentialsSecret: team-s3}`)),
		bad("results-store-without-credentials",
			"credentialsSecret",
			set("spec.resultsStore", `{url: "s3://team-evals/nightly"}`)),
		bad("results-store-endpoint-not-a-url",
			"spec.resultsStore.endpoint",
			set("spec.resultsStore", `{url: "s3://team-evals", endpoint: "minio:9000", credentialsSecret: team-s3}`)),
		bad("baseline-two-sources",
			"baseline: exactly one of evaluation, configMap or path must be set",
			set("spec.baseline", `{evaluation: a, configMap: b}`)),
		bad("baseline-none",
			"baseline: exactly one of evaluation, configMap or path must be set",
			set("spec.baseline", `{model: gpt}`)),
		{
			// A local run compares against a directory; a cluster has none.
			Name:      "baseline-path-in-cluster",
			Manifest:  build("baseline-path-in-cluster", set("spec.baseline", `{path: results/nightly}`)),
			Admission: "baseline.path is for local runs (proctor run) only",
		},
		bad("gate-max-drop-without-baseline",
			"gate.rules[].maxDrop needs spec.baseline",
			set("spec.gate", `{rules: [{metric: exact_match, maxDrop: 0.02}]}`)),
		bad("gate-unknown-metric",
			"gate.rules[].metric must name a metric of spec.scoring",
			set("spec.gate", `{rules: [{metric: accuracy, min: 0.5}]}`)),
		bad("gate-unknown-model",
			"gate.rules[].model must name an entry of spec.models",
			set("spec.gate", `{rules: [{metric: exact_match, model: claude, min: 0.5}]}`)),
		bad("gate-unknown-dataset",
			"gate.rules[].dataset must name an entry of spec.datasets",
			set("spec.gate", `{rules: [{metric: exact_match, dataset: math, min: 0.5}]}`)),
		bad("gate-rule-empty",
			"a gate rule needs min or maxDrop",
			set("spec.gate", `{rules: [{metric: exact_match}]}`)),
		bad("gate-no-rules",
			"spec.gate.rules in body should have at least 1 items",
			set("spec.gate", `{rules: []}`)),
		bad("gate-significance-out-of-range",
			"spec.gate.significance in body should be less than or equal to 0.5",
			set("spec.gate", `{significance: 0.7, rules: [{metric: exact_match, min: 0.5}]}`)),
		bad("gate-impossible-min",
			"spec.gate.rules[0].min in body should be less than or equal to 1",
			set("spec.gate", `{rules: [{metric: exact_match, min: 1.5}]}`)),
		bad("gate-negative-drop",
			"spec.gate.rules[0].maxDrop in body should be greater than or equal to 0",
			set("spec.baseline", `{evaluation: nightly}`), set("spec.gate", `{rules: [{metric: exact_match, maxDrop: -0.1}]}`)),

		bad("agent-output-format-unknown",
			`spec.models[1].agent.outputFormat: Unsupported value: "json"`,
			set("spec.models[1]", agentModel), set("spec.models[1].agent.outputFormat", `json`)),

		bad("batch-for-an-agent",
			"batch does not apply to an agent model",
			set("spec.models[1]", agentModel), set("spec.models[1].batch", `{}`)),
		bad("batch-poll-too-often",
			"spec.models[0].batch.pollInterval: Invalid value: \"10ms\": must be a duration of 100ms to 1h, such as 30s",
			set("spec.models[0].batch", `{pollInterval: 10ms}`)),
		bad("batch-retry-unknown",
			`spec.models[0].batch.retryFailed: Unsupported value: "later"`,
			set("spec.models[0].batch", `{retryFailed: later}`)),
		bad("batch-window-unknown",
			`spec.models[0].batch.completionWindow: Unsupported value: "1h"`,
			set("spec.models[0].batch", `{completionWindow: 1h}`)),
		bad("batch-deadline-zero",
			"spec.models[0].batch.deadline: Invalid value: \"0s\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m",
			set("spec.models[0].batch", `{deadline: 0s}`)),
		bad("batch-with-hooks",
			"hooks do not apply to a model with batch",
			set("spec.models[0].batch", `{}`), set("spec.hooks", `{image: "tools:1", beforeSample: {command: ["true"]}}`)),

		// Scoring.
		bad("unknown-scorer-type",
			`spec.scoring[0].type: Unsupported value: "fuzzy"`, set("spec.scoring[0].type", `fuzzy`)),
		bad("scorer-type-missing",
			"spec.scoring[0].type: Required value", set("spec.scoring[0]", `{name: exact}`)),
		bad("unknown-normalizer",
			`spec.scoring[0].normalize[0]: Unsupported value: "stem"`, set("spec.scoring[0].normalize", `[stem]`)),
		bad("bad-metric-name",
			"spec.scoring[0].name in body should match", set("spec.scoring[0].name", `-exact`)),
		bad("duplicate-metric-types",
			"spec.scoring: Invalid value: metric names must be unique",
			set("spec.scoring[1]", `{type: exact_match, normalize: [lowercase]}`)),
		bad("duplicate-metric-name-and-type",
			"metric names must be unique", set("spec.scoring[1]", `{type: contains, name: exact_match}`)),
		bad("duplicate-metric-names",
			"metric names must be unique",
			set("spec.scoring[0].name", `score`), set("spec.scoring[1]", `{type: contains, name: score}`)),
		bad("judge-scorer-without-judge",
			"spec.scoring[0]: Invalid value: a judge scorer needs judge.model",
			set("spec.models[1]", judgeModel), set("spec.scoring[0]", `{type: judge}`)),
		bad("judge-without-model",
			"spec.scoring[0].judge.model: Required value",
			set("spec.models[1]", judgeModel), set("spec.scoring[0]", `{type: judge, judge: {rubric: "Is it right?"}}`)),
		bad("judge-on-exact-match",
			"spec.scoring[0]: Invalid value: judge only applies to the judge scorer",
			set("spec.models[1]", judgeModel), set("spec.scoring[0].judge", `{model: judge}`)),
		bad("judge-model-unknown",
			"spec.scoring: Invalid value: a judge scorer's judge.model must name an entry of spec.models",
			set("spec.scoring[0]", `{type: judge, judge: {model: grader}}`)),
		bad("judge-model-is-agent",
			"spec.scoring: Invalid value: a judge scorer's judge.model must name an openai or anthropic model, not an agent",
			set("spec.models[1]", agentModel), set("spec.scoring[0]", `{type: judge, judge: {model: coder}}`)),
		bad("every-model-is-a-judge",
			"spec.models: Invalid value: every model is a judge",
			set("spec.scoring[1]", `{type: judge, judge: {model: gpt}}`)),
		bad("pattern-on-contains",
			"spec.scoring[0]: Invalid value: pattern only applies to the regex scorer",
			set("spec.scoring[0].pattern", `^4$`)),
		bad("pattern-not-a-regex",
			"spec.scoring[1].pattern: Invalid value: \"string\": error parsing regexp: missing closing ): `([0-9]+` evaluating rule: pattern must be a valid RE2 regular expression",
			set("spec.scoring[1]", `{type: regex, pattern: "([0-9]+"}`)),
		bad("pattern-not-re2",
			"pattern must be a valid RE2 regular expression",
			set("spec.scoring[1]", `{type: regex, pattern: "(?=x)"}`)),
		bad("tolerance-on-exact-match",
			"spec.scoring[0]: Invalid value: tolerance only applies to the numeric scorer",
			set("spec.scoring[0].tolerance", `0.1`)),
		bad("negative-tolerance",
			"spec.scoring[1].tolerance in body should be greater than or equal to 0",
			set("spec.scoring[1]", `{type: numeric, tolerance: -0.5}`)),
		bad("check-arguments-on-exact-match",
			"spec.scoring[0]: Invalid value: checkArguments only applies to the tool_call scorer",
			set("spec.scoring[0].checkArguments", `true`)),

		// Spec-wide settings.
		bad("concurrency-zero",
			"spec.concurrency in body should be greater than or equal to 1", set("spec.concurrency", `0`)),
		bad("concurrency-too-high",
			"spec.concurrency in body should be less than or equal to 10000", set("spec.concurrency", `10001`)),
		bad("parallelism-zero",
			"spec.parallelism in body should be greater than or equal to 1", set("spec.parallelism", `0`)),
		bad("shard-size-zero",
			"spec.shardSize in body should be greater than or equal to 1", set("spec.shardSize", `0`)),
		bad("max-attempts-zero",
			"spec.retry.maxAttempts in body should be greater than or equal to 1", set("spec.retry", `{maxAttempts: 0}`)),
		bad("max-attempts-101",
			"spec.retry.maxAttempts in body should be less than or equal to 100", set("spec.retry", `{maxAttempts: 101}`)),
		bad("initial-backoff-longer-than-max",
			"spec.retry: Invalid value: retry.initialBackoff must not be longer than retry.maxBackoff",
			set("spec.retry", `{initialBackoff: 5s, maxBackoff: 2s}`)),
		bad("initial-backoff-longer-than-default-max",
			"retry.initialBackoff must not be longer than retry.maxBackoff", set("spec.retry", `{initialBackoff: 2m}`)),
		bad("max-backoff-shorter-than-default-initial",
			"retry.initialBackoff must not be longer than retry.maxBackoff", set("spec.retry", `{maxBackoff: 500ms}`)),
		bad("negative-initial-backoff",
			"spec.retry.initialBackoff: Invalid value: \"-1s\": must be a duration of 0s to 24h, such as 1s or 60s",
			set("spec.retry", `{initialBackoff: -1s}`)),
		bad("negative-max-backoff",
			"spec.retry.maxBackoff: Invalid value: \"-1m\": must be a duration of 0s to 24h, such as 1s or 60s", set("spec.retry", `{initialBackoff: 0s, maxBackoff: -1m}`)),
		bad("max-backoff-too-long",
			"spec.retry.maxBackoff: Invalid value: \"25h\": must be a duration of 0s to 24h, such as 1s or 60s", set("spec.retry", `{maxBackoff: 25h}`)),
		bad("keep-for-negative",
			"spec.runner.keepFor: Invalid value: \"-1s\": must be a duration of 0s to 720h, such as 0s, 30m or 24h", set("spec.runner", `{keepFor: -1s}`)),
		bad("keep-for-too-long",
			"spec.runner.keepFor: Invalid value: \"721h\": must be a duration of 0s to 720h, such as 0s, 30m or 24h", set("spec.runner", `{keepFor: 721h}`)),
		bad("max-throttle-wait-too-short",
			"spec.retry.maxThrottleWait: Invalid value: \"500ms\": must be a duration of 1s to 24h, such as 90s, 10m or 1h30m", set("spec.retry", `{maxThrottleWait: 500ms}`)),
		bad("max-throttle-wait-too-long",
			"spec.retry.maxThrottleWait: Invalid value: \"25h\": must be a duration of 1s to 24h, such as 90s, 10m or 1h30m", set("spec.retry", `{maxThrottleWait: 25h}`)),
		bad("max-throttle-wait-not-a-duration",
			"spec.retry.maxThrottleWait: Invalid value: \"1 hour\": must be a duration of 1s to 24h, such as 90s, 10m or 1h30m", set("spec.retry", `{maxThrottleWait: 1 hour}`)),
		bad("backoff-not-a-duration",
			"spec.retry.initialBackoff: Invalid value: \"1 second\": must be a duration of 0s to 24h, such as 1s or 60s", set("spec.retry", `{initialBackoff: 1 second}`)),
		bad("timeout-zero",
			"spec.timeoutPerSample: Invalid value: \"0\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m",
			set("spec.timeoutPerSample", `"0"`)),
		bad("timeout-negative",
			"spec.timeoutPerSample: Invalid value: \"-2m\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m", set("spec.timeoutPerSample", `-2m`)),
		bad("timeout-too-long",
			"spec.timeoutPerSample: Invalid value: \"24h1ms\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m", set("spec.timeoutPerSample", `24h1ms`)),
		bad("timeout-in-days",
			"spec.timeoutPerSample: Invalid value: \"1d\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m", set("spec.timeoutPerSample", `1d`)),
		bad("timeout-without-unit",
			"spec.timeoutPerSample: Invalid value: \"120\": must be a duration longer than 0s and at most 24h, such as 90s, 2m or 1h30m", set("spec.timeoutPerSample", `"120"`)),
		// Once the local loader ran Go that mirrored the rules and disagreed on
		// these; it runs the rules themselves now.
		bad("pvc-path-dotdot-inside",
			"pvc.path must be a relative path inside the volume, without '..'",
			set("spec.datasets[0].source", `{pvc: {claimName: data, path: sets/../qs.jsonl}}`)),
		bad("agent-file-dotdot-inside",
			"agent.files keys must be relative paths inside the workspace, without '..'",
			set("spec.models[1]", agentModel), set("spec.models[1].agent.files", `{src/../task.md: x}`)),
		bad("empty-inline-beside-url",
			"spec.datasets[0].source.inline in body should have at least 1 items",
			set("spec.datasets[0].source", `{inline: [], url: "https://example.com/qs.jsonl"}`)),
		bad("baseline-is-itself",
			"a run cannot be its own baseline",
			set("spec.baseline", `{evaluation: baseline-is-itself}`)),
		bad("empty-format",
			`spec.datasets[0].format: Unsupported value: ""`,
			set("spec.datasets[0].format", `""`)),
		bad("quoted-temperature",
			`spec.models[0].parameters.temperature: Invalid value: "string": spec.models[0].parameters.temperature in body must be of type number`,
			set("spec.models[0].parameters", `{temperature: "0.5"}`)),
		bad("inline-sample-not-an-object",
			`spec.datasets[0].source.inline[0]: Invalid value: "integer": spec.datasets[0].source.inline[0] in body must be of type object`,
			set("spec.datasets[0].source.inline", `[42]`)),
		bad("too-many-stop-sequences",
			"spec.models[0].parameters.stop: Too many: 17: must have at most 16 items",
			set("spec.models[0].parameters", "{stop: ["+strings.Repeat("STOP, ", 16)+"STOP]}")),
		bad("url-too-long",
			"spec.datasets[0].source.url: Too long: may not be more than 4096 bytes",
			set("spec.datasets[0].source", `{url: "https://example.com/`+strings.Repeat("q", 4077)+`"}`)),
		bad("metric-name-too-long",
			"spec.scoring[0].name: Too long",
			set("spec.scoring[0].name", strings.Repeat("n", 64))),
		bad("secret-key-ref-without-key",
			"spec.models[0].apiKey.secretKeyRef.key: Required value",
			set("spec.models[0].apiKey", `{secretKeyRef: {name: keys}}`)),
	}
}

// Differences are manifests on which the local loader and the API server knowingly
// disagree: an empty Local or Admission means that side accepts the manifest.
// The loader runs the CRD's own schema and rules (internal/admission), so what is
// left are the checks only Go makes, and the words of the loader's own checks.
// They are tested as they are so that a change on either side shows; each says
// why it cannot agree.
var Differences = []Case{
	// corev1.EnvVar's name has no maxLength, and the API server will not run a regex
	// over a string of unbounded length in a list of unbounded length (the CEL cost
	// budget), so only the local check sees agent.env names.
	{
		Name: "agent-env-not-a-name",
		Manifest: build("agent-env-not-a-name",
			set("spec.models[0]", agentModel), set("spec.models[0].agent.env", `[{name: 1PASSWORD, value: x}]`)),
		Local: `spec.models[0].agent.env[0].name: Invalid value: "1PASSWORD": must be an environment variable name`,
	},
	// The status is Proctor's: a local file must not set it, and the API server drops
	// it on create (the status subresource).
	{
		Name:     "status-set",
		Manifest: build("status-set", set("status", `{phase: Succeeded}`)),
		Local:    "status: set by Proctor, not by the file; remove it",
	},
	// Both refuse a name that is no DNS-1123 subdomain: the local loader because
	// the name becomes the output directory (results/NAME), with its own words.
	{
		Name:      "bad-metadata-name",
		Manifest:  build("bad-metadata-name", set("metadata.name", `Not_A_Name`)),
		Local:     `metadata.name: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain`,
		Admission: "metadata.name: Invalid value",
	},
}

// bad is a case: Valid with edits, refused with msg by both (the local loader
// runs the CRD's own schema and rules: internal/admission).
func bad(name, msg string, edits ...edit) Case {
	return Case{Name: name, Manifest: build(name, edits...), Local: msg, Admission: msg}
}

// ok is a manifest both must accept: Valid with edits.
func ok(name string, edits ...edit) Case {
	return Case{Name: name, Manifest: build(name, edits...)}
}

// An edit changes the decoded Valid manifest.
type edit func(doc any) (any, error)

// set sets the value at path (keys between dots, [i] for a list's items; the item
// just past a list's end appends) to value, a YAML fragment. Missing maps and lists
// on the way are created.
func set(path, value string) edit {
	return func(doc any) (any, error) {
		var v any
		if err := yaml.Unmarshal([]byte(value), &v); err != nil {
			return nil, fmt.Errorf("%s: value %q: %w", path, value, err)
		}
		return update(doc, path, steps(path), func(any, bool) (any, bool, error) { return v, true, nil })
	}
}

// del removes the map key at path.
func del(path string) edit {
	return func(doc any) (any, error) {
		return update(doc, path, steps(path), func(_ any, present bool) (any, bool, error) {
			if !present {
				return nil, false, fmt.Errorf("%s: nothing to delete", path)
			}
			return nil, false, nil
		})
	}
}

// A step of a path: a map key, or a list index when key is "".
type step struct {
	key   string
	index int
}

func steps(path string) []step {
	var out []step
	for _, part := range strings.Split(path, ".") {
		key, rest, _ := strings.Cut(part, "[")
		out = append(out, step{key: key})
		for rest != "" {
			i := step{index: -1}
			idx, after, _ := strings.Cut(rest, "]")
			if _, err := fmt.Sscan(idx, &i.index); err != nil {
				i.index = -1
			}
			out = append(out, i)
			_, rest, _ = strings.Cut(after, "[")
		}
	}
	return out
}

// update returns cur with the value at path changed by op, which gets the old
// value and whether it is there, and returns the new value and whether to keep it
// (false deletes a map key).
func update(cur any, path string, s []step, op func(old any, present bool) (any, bool, error)) (any, error) {
	if s[0].key == "" {
		l, ok := cur.([]any)
		if cur != nil && !ok {
			return nil, fmt.Errorf("%s: not a list", path)
		}
		i := s[0].index
		if i < 0 || i > len(l) {
			return nil, fmt.Errorf("%s: index out of range", path)
		}
		var old any
		present := i < len(l)
		if present {
			old = l[i]
		}
		var v any
		var err error
		if len(s) == 1 {
			var keep bool
			v, keep, err = op(old, present)
			if err == nil && !keep {
				err = fmt.Errorf("%s: only map keys can be deleted", path)
			}
		} else {
			v, err = update(old, path, s[1:], op)
		}
		if err != nil {
			return nil, err
		}
		if present {
			l[i] = v
		} else {
			l = append(l, v)
		}
		return l, nil
	}
	m, ok := cur.(map[string]any)
	if cur == nil {
		m = map[string]any{}
	} else if !ok {
		return nil, fmt.Errorf("%s: %q is not in a mapping", path, s[0].key)
	}
	old, present := m[s[0].key]
	if len(s) == 1 {
		v, keep, err := op(old, present)
		if err != nil {
			return nil, err
		}
		if keep {
			m[s[0].key] = v
		} else {
			delete(m, s[0].key)
		}
		return m, nil
	}
	v, err := update(old, path, s[1:], op)
	if err != nil {
		return nil, err
	}
	m[s[0].key] = v
	return m, nil
}

// build returns Valid with metadata.name set to name and the edits applied. It
// panics on a bad edit: the table is fixed, and a typo must not pass unnoticed.
func build(name string, edits ...edit) string {
	var doc any
	if err := yaml.Unmarshal([]byte(Valid), &doc); err != nil {
		panic(err)
	}
	edits = append([]edit{set("metadata.name", name)}, edits...)
	for _, e := range edits {
		var err error
		if doc, err = e(doc); err != nil {
			panic(fmt.Sprintf("case %s: %v", name, err))
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return string(out)
}
