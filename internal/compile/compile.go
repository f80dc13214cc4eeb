// Package compile turns an Evaluation into an engine plan: it resolves datasets,
// API keys and providers, parses every template, and checks what can only be checked
// against real data (a template naming a field the samples lack) before any model
// is called. Errors name the spec field they are about.
package compile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/source"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/agent"
	"github.com/proctor-dev/proctor/runner/provider/anthropic"
	"github.com/proctor-dev/proctor/runner/provider/openai"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// Env is what a plan is compiled against: the machine it runs on.
type Env struct {
	// BaseDir resolves relative file: sources (the Evaluation file's directory).
	BaseDir string
	// LookupEnv reads environment variables (API keys, agent variables).
	LookupEnv func(string) (string, bool)
	// HTTPClient downloads url: datasets; nil means http.DefaultClient.
	HTTPClient *http.Client
	// DataDir is where downloaded datasets are kept.
	DataDir string
	// CacheDir holds the response cache, when the spec enables it.
	CacheDir string
	// WorkspaceRoot is the parent of agent workspaces; "" means the temp dir.
	WorkspaceRoot  string
	KeepWorkspaces bool
	// Concurrency, when positive, overrides every model's concurrency.
	Concurrency int
	// ResolveSource maps a cluster-only source (configMap, pvc) to a local file.
	// Nil in local runs, where those sources are an error.
	ResolveSource func(ds *v1alpha1.Dataset) (string, error)
	// Cluster is set in runner pods: API keys are read from APIKeyEnv's variable
	// (set from the model's secretKeyRef), and agent env entries with valueFrom are
	// taken from the pod's environment, where Kubernetes put them.
	Cluster bool
	// Datasets, when set, limits compilation to the named datasets (a shard needs
	// only its own, and must not download the others).
	Datasets []string
	// Models, when set, limits compilation to the named models: a runner pod has
	// the API keys of its own model and of the judges only.
	Models []string
	// Cache, when set, is the response cache to use when the spec enables one,
	// instead of a directory under CacheDir.
	Cache runner.Cache
	// Endpoints are the limits of the ModelEndpoints models call through, by
	// name, for a local run, where the engine paces each endpoint's models
	// together. Nil in runner pods, which take each model's share from the
	// endpoint's budget instead.
	Endpoints map[string]ratelimit.Limits
	// ModelEndpoints are the ModelEndpoints agents call (agent.endpoints), by
	// name, as read. In runner pods their keys are in EndpointKeyEnv's
	// variables, set from their Secrets.
	ModelEndpoints map[string]*v1alpha1.ModelEndpointSpec
	// AgentExecutor, when set (with Cluster), is the Unix socket of the
	// executor that runs agents in their own container (`proctor agent-exec`).
	// The agent's key and agent.env valueFrom entries are then in that
	// container's environment, not in LookupEnv's: Build asks the executor
	// whether they are set, and never learns their values.
	AgentExecutor string
	// HookExecutor, when set (with Cluster), is the Unix socket of the
	// executor of the hooks' container, which has hooks.env.
	HookExecutor string
}

// agentBaseEnv is what an agent inherits from proctor's environment besides what
// its model declares: enough to find programs and a home, nothing secret.
var agentBaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "TERM", "SHELL", "TZ"}

// Build compiles ev for env.
func Build(ctx context.Context, ev *v1alpha1.Evaluation, env Env) (*runner.Plan, error) {
	if env.LookupEnv == nil {
		env.LookupEnv = os.LookupEnv
	}
	if env.HTTPClient == nil {
		env.HTTPClient = http.DefaultClient
	}
	spec := &ev.Spec
	plan := &runner.Plan{
		Retry: retry.Policy{
			MaxAttempts:     int(*spec.Retry.MaxAttempts),
			Initial:         spec.Retry.InitialBackoff.Duration,
			Max:             spec.Retry.MaxBackoff.Duration,
			MaxThrottleWait: spec.Retry.MaxThrottleWait.Duration,
		},
		Timeout: spec.TimeoutPerSample.Duration,
	}
	var err error
	if plan.Prompt, err = runner.NewPrompt(spec.Prompt.System, spec.Prompt.Template); err != nil {
		return nil, promptError(err, "")
	}
	judges := spec.JudgeModels()
	for i := range spec.Models {
		if len(env.Models) > 0 && !slices.Contains(env.Models, spec.Models[i].Name) {
			continue
		}
		m, secrets, err := buildModel(ctx, spec, &spec.Models[i], fmt.Sprintf("spec.models[%d]", i), env)
		if err != nil {
			return nil, err
		}
		m.JudgeOnly = judges[m.Name]

		endpoints := []string{m.Endpoint}
		for _, a := range m.AgentEndpoints {
			endpoints = append(endpoints, a.Endpoint)
		}
		for _, name := range endpoints {
			if l, ok := env.Endpoints[name]; ok && name != "" {
				if plan.Endpoints == nil {
					plan.Endpoints = map[string]ratelimit.Limits{}
				}
				plan.Endpoints[name] = l
				if ep := env.ModelEndpoints[name]; ep != nil && ep.Limits != nil && ep.Limits.Burst != nil {
					if plan.EndpointBursts == nil {
						plan.EndpointBursts = map[string]time.Duration{}
					}
					plan.EndpointBursts[name] = ep.Limits.Burst.Duration
				}
			}
		}
		plan.Models = append(plan.Models, m)
		plan.Secrets = append(plan.Secrets, secrets...)
	}
	for i := range spec.Scoring {
		s := &spec.Scoring[i]
		cfg := score.Config{
			Type:           string(s.Type),
			Name:           s.MetricName(),
			Pattern:        s.Pattern,
			CheckArguments: s.CheckArguments == nil || *s.CheckArguments,
		}
		for _, n := range s.Normalize {
			cfg.Normalize = append(cfg.Normalize, string(n))
		}
		if s.Tolerance != nil {
			cfg.Tolerance, _ = s.Tolerance.Float64()
		}
		sc := runner.Scorer{Config: cfg}
		if s.Judge != nil {
			sc.JudgeModel = s.Judge.Model
			sc.Config.Rubric = s.Judge.Rubric
		}
		// Built once, here, so that a bad rubric is reported against its field;
		// the engine gives a judge scorer its judge with each call.
		if sc.Built, err = score.New(sc.Config, unboundJudge); err != nil {
			return nil, fmt.Errorf("spec.scoring[%d]: %w", i, err)
		}
		plan.Scorers = append(plan.Scorers, sc)
	}
	if err := buildHooks(ctx, spec, plan, env); err != nil {
		return nil, err
	}
	if err := checkBudget(spec, plan); err != nil {
		return nil, err
	}
	plan.Prompt.EmptyIsError = needsPrompt(spec, plan)
	// Datasets last: they may be large downloads, and every cheaper mistake
	// (a missing key, a bad rubric) should be reported before one starts.
	for i := range spec.Datasets {
		if len(env.Datasets) > 0 && !slices.Contains(env.Datasets, spec.Datasets[i].Name) {
			continue
		}
		d, err := buildDataset(ctx, &spec.Datasets[i], fmt.Sprintf("spec.datasets[%d]", i), env)
		if err != nil {
			return nil, err
		}
		if err := checkData(spec, &spec.Datasets[i], fmt.Sprintf("spec.datasets[%d]", i), d, plan.Prompt); err != nil {
			return nil, err
		}
		plan.Datasets = append(plan.Datasets, d)
	}
	if spec.Cache.Enabled {
		if env.Cache != nil {
			plan.Cache = env.Cache
		} else if plan.Cache, err = cache.New(env.CacheDir); err != nil {
			return nil, fmt.Errorf("spec.cache: %w", err)
		}
	}
	if err := preflight(spec, plan, env); err != nil {
		return nil, err
	}
	return plan, nil
}

func buildModel(ctx context.Context, spec *v1alpha1.EvaluationSpec, m *v1alpha1.Model, path string, env Env) (*runner.Model, []string, error) {
	concurrency := int(*spec.Concurrency)
	if m.Concurrency != nil {
		concurrency = int(*m.Concurrency)
	}
	if env.Concurrency > 0 {
		concurrency = env.Concurrency
	}
	out := &runner.Model{
		Name:        m.Name,
		Agent:       m.Provider == v1alpha1.ProviderAgent,
		Concurrency: concurrency,
	}
	out.Limits = apiconv.LimitsOf(m.RateLimit)
	if m.RateLimit != nil && m.RateLimit.Burst != nil {
		out.Burst = m.RateLimit.Burst.Duration
	}
	if r := m.EndpointRef; r != nil {
		if m.Provider == "" {
			// The loader (locally) or the runner pod resolves endpoints first.
			return nil, nil, fmt.Errorf("%s.endpointRef: ModelEndpoint %q was not resolved", path, r.Name)
		}
		out.Endpoint, out.EndpointWeight = r.Name, r.EndpointWeight()
		if ep := env.ModelEndpoints[r.Name]; ep != nil && ep.Limits != nil && ep.Limits.Burst != nil && out.Burst == 0 {
			out.Burst = ep.Limits.Burst.Duration
		}
	}
	remoteAgent := m.Provider == v1alpha1.ProviderAgent && env.Cluster && env.AgentExecutor != ""
	var key string
	var err error
	if !remoteAgent {
		// A remote agent's key is in its own container; the executor checks it.
		if key, err = apiKey(m, path, env); err != nil {
			return nil, nil, err
		}
	}
	var secrets []string
	if key != "" {
		secrets = append(secrets, key)
	}
	params, err := parameters(m)
	if err != nil {
		return nil, nil, fmt.Errorf("%s.parameters: %w", path, err)
	}
	if err := provider.CheckHeaders(m.Headers); err != nil {
		return nil, nil, fmt.Errorf("%s.headers: %w", path, err)
	}
	if m.Provider == v1alpha1.ProviderAnthropic && params.MaxTokens == 0 {
		// The API requires a cap; the default is part of what identifies answers.
		params.MaxTokens = v1alpha1.DefaultAnthropicMaxToken
	}
	out.MaxTokens = params.MaxTokens
	if out.Price, err = Price(m.Pricing); err != nil {
		return nil, nil, fmt.Errorf("%s.pricing.%w", path, err)
	}
	out.Batch = batchConfig(m.Batch)
	out.GenAI = genAI(m, params)
	fp := fingerprint{Provider: string(m.Provider), BaseURL: m.BaseURL, Model: m.Model, Params: params, Headers: m.Headers}
	switch m.Provider {
	case v1alpha1.ProviderOpenAI:
		out.Provider, err = openai.New(openai.Config{
			BaseURL: m.BaseURL, APIKey: key, Model: m.Model, Params: params, Headers: m.Headers,
			HTTPClient: provider.NewHTTPClient(concurrency),
		})
	case v1alpha1.ProviderAnthropic:
		out.Provider, err = anthropic.New(anthropic.Config{
			BaseURL: m.BaseURL, APIKey: key, Model: m.Model, Params: params, Headers: m.Headers,
			HTTPClient: provider.NewHTTPClient(concurrency),
		})
	case v1alpha1.ProviderAgent:
		a := m.Agent
		cfg := agent.Config{
			Command: a.Command, Stdin: a.Stdin, Files: a.Files, BaseDir: env.BaseDir,
			WorkspaceRoot: env.WorkspaceRoot, KeepWorkspaces: env.KeepWorkspaces,
			OutputFormat: agent.Format(a.OutputFormat),
		}
		out.AgentReportsUsage = a.OutputFormat.ReportsUsage()
		if remoteAgent {
			vars, err := remoteAgentEnvironment(m, path)
			if err != nil {
				return nil, nil, err
			}
			cfg.Executor = &agent.ExecutorConfig{Socket: env.AgentExecutor, Env: vars}
		} else if cfg.Env, secrets, err = agentEnvironment(m, path, key, env); err != nil {
			return nil, nil, err
		}
		if a.Timeout != nil {
			out.Timeout = a.Timeout.Duration
		}
		fp.Agent = &agentFingerprint{Image: a.Image, Command: a.Command, Stdin: a.Stdin, Files: a.Files}
		if out.AgentReportsUsage {
			// The answer is read from the output: a different answer.
			fp.Agent.OutputFormat = string(a.OutputFormat)
		}
		for _, e := range a.Env {
			fp.Agent.Env = append(fp.Agent.Env, e.Name+"="+e.Value)
		}
		var keys []string
		if out.AgentEndpoints, keys, err = agentEndpoints(m, path, env); err != nil {
			return nil, nil, err
		}
		secrets = append(secrets, keys...)
		for _, ae := range out.AgentEndpoints {
			fp.Agent.Endpoints = append(fp.Agent.Endpoints, strings.Join([]string{ae.Endpoint, ae.BaseURL.String(), ae.BaseURLEnv, ae.APIKeyEnv}, " "))
		}
		p, err := agent.New(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.agent.%w", path, err)
		}
		if remoteAgent {
			if err := p.Connect(ctx); err != nil {
				return nil, nil, executorError(m, path, err)
			}
		}
		out.Provider = p
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	out.Fingerprint = hashJSON(fp)
	return out, secrets, nil
}

// genAI is what m's calls' spans say of it, as the OpenTelemetry GenAI
// conventions name it.
func genAI(m *v1alpha1.Model, params provider.Params) telemetry.GenAI {
	if m.Provider == v1alpha1.ProviderAgent {
		return telemetry.GenAI{Operation: telemetry.OperationInvokeAgent, AgentName: m.Name}
	}
	return telemetry.GenAI{
		Operation: telemetry.OperationChat, Provider: string(m.Provider), RequestModel: m.Model, BaseURL: m.BaseURL,
		Temperature: params.Temperature, TopP: params.TopP, MaxTokens: params.MaxTokens, Seed: params.Seed, Stop: params.Stop,
	}
}

// agentEndpoints are the proxies of m's agent.endpoints, and their keys.
func agentEndpoints(m *v1alpha1.Model, path string, env Env) ([]*runner.AgentEndpoint, []string, error) {
	var out []*runner.AgentEndpoint
	var keys []string
	for j := range m.Agent.Endpoints {
		a := &m.Agent.Endpoints[j]
		name := a.EndpointRef.Name
		p := fmt.Sprintf("%s.agent.endpoints[%d].endpointRef", path, j)
		spec := env.ModelEndpoints[name]
		if spec == nil {
			// The loader (locally) or the runner pod reads them first.
			return nil, nil, fmt.Errorf("%s: ModelEndpoint %q was not resolved", p, name)
		}
		// What a model calling through the endpoint would be given.
		via := v1alpha1.Model{Name: m.Name, Model: "-"}
		via.UseEndpoint(spec)
		var key string
		var err error
		if env.Cluster {
			key, err = endpointKey(&via, p, name, env)
		} else {
			key, err = apiKey(&via, "ModelEndpoint "+name+": spec", env)
		}
		if err != nil {
			return nil, nil, err
		}
		if err := provider.CheckHeaders(via.Headers); err != nil {
			return nil, nil, fmt.Errorf("ModelEndpoint %s: spec.headers: %w", name, err)
		}
		base, err := provider.BaseURL("ModelEndpoint "+name+": spec.baseURL", via.BaseURL)
		if err != nil {
			return nil, nil, err
		}
		if key != "" {
			keys = append(keys, key)
		}
		prices, err := endpointPrices(name, spec)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, &runner.AgentEndpoint{
			Prices:   prices,
			Endpoint: name, Caller: apiconv.AgentCallerName(m.Name, name),
			Anthropic: via.Provider == v1alpha1.ProviderAnthropic,
			BaseURL:   base, APIKey: key, Headers: via.Headers,
			BaseURLEnv: a.BaseURLEnv, APIKeyEnv: a.APIKeyEnv, Weight: a.EndpointRef.EndpointWeight(),
		})
	}
	return out, keys, nil
}

// endpointPrices are a ModelEndpoint's prices by model id.
func endpointPrices(name string, spec *v1alpha1.ModelEndpointSpec) (map[string]*spend.Price, error) {
	if len(spec.Pricing) == 0 {
		return nil, nil
	}
	out := make(map[string]*spend.Price, len(spec.Pricing))
	for i := range spec.Pricing {
		p, err := Price(&spec.Pricing[i].Pricing)
		if err != nil {
			return nil, fmt.Errorf("ModelEndpoint %s: spec.pricing[%d].pricing: %w", name, i, err)
		}
		out[spec.Pricing[i].Model] = p
	}
	return out, nil
}

// endpointKey reads, in a runner pod, the key of a ModelEndpoint an agent
// calls: the controller put it in EndpointKeyEnv's variable from the
// endpoint's Secret.
func endpointKey(via *v1alpha1.Model, path, name string, env Env) (string, error) {
	if !via.NeedsAPIKey() {
		return "", nil
	}
	if via.APIKey == nil || via.APIKey.SecretKeyRef == nil {
		return "", fmt.Errorf("%s: ModelEndpoint %s needs an API key, which a cluster takes from a Secret (its spec.apiKey.secretKeyRef)", path, name)
	}
	key, ok := env.LookupEnv(cluster.EndpointKeyEnv(name))
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return "", fmt.Errorf("%s: the key of ModelEndpoint %s (Secret %s) is empty or missing", path, name, via.APIKey.SecretKeyRef.Name)
	}
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("%s: the key of ModelEndpoint %s (Secret %s) %w", path, name, via.APIKey.SecretKeyRef.Name, err)
	}
	return key, nil
}

// apiKey reads a model's key from the environment. A model that declares apiKey
// must find its variable set; one that does not needs a key only when it talks to
// the provider's own API (a local OpenAI-compatible server usually needs none).
func apiKey(m *v1alpha1.Model, path string, env Env) (string, error) {
	if !m.NeedsAPIKey() {
		return "", nil
	}
	name := v1alpha1.DefaultAPIKeyEnv(m.Provider)
	if m.APIKey != nil && m.APIKey.Env != "" {
		name = m.APIKey.Env
	}
	// Where the key was declared: a model calling through a ModelEndpoint
	// has the endpoint's (UseEndpoint), which the user wrote there.
	at, whose := path+".apiKey", fmt.Sprintf("model %q", m.Name)
	if m.EndpointRef != nil {
		at = fmt.Sprintf("ModelEndpoint %s: spec.apiKey", m.EndpointRef.Name)
		whose = fmt.Sprintf("ModelEndpoint %q (which model %q calls through)", m.EndpointRef.Name, m.Name)
	}
	if env.Cluster {
		if m.APIKey == nil || m.APIKey.SecretKeyRef == nil {
			return "", fmt.Errorf("%s.secretKeyRef: %s needs an API key, which a cluster takes from a Secret", at, whose)
		}
		key, ok := env.LookupEnv(cluster.APIKeyEnv(m.Name))
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return "", fmt.Errorf("%s.secretKeyRef: the key of Secret %s is empty or missing", at, m.APIKey.SecretKeyRef.Name)
		}
		if err := checkKey(key); err != nil {
			return "", fmt.Errorf("%s.secretKeyRef: the key of Secret %s %w", at, m.APIKey.SecretKeyRef.Name, err)
		}
		return key, nil
	}
	if name == "" {
		return "", fmt.Errorf("%s.env: name the environment variable that holds the key", at)
	}
	key, ok := env.LookupEnv(name)
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return "", fmt.Errorf("%s.env: environment variable %s is not set (%s needs an API key; "+
			"export it, or for a server that needs no key set baseURL and leave apiKey out)", at, name, whose)
	}
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("%s.env: environment variable %s %w", at, name, err)
	}
	return key, nil
}

// checkKey refuses a key that cannot go into an HTTP header. Surrounding white
// space is removed before (a key read from a file with `$(cat key)`, `echo` into
// a file, or a Secret made with --from-file ends in a newline); a key with
// space or control characters inside would fail every call, so it fails now.
func checkKey(key string) error { return agent.CheckKey(key) }

// CountDatasets counts the samples of each dataset (after its limit), reading
// every source as Build would. The cluster's planner uses it.
func CountDatasets(ctx context.Context, ev *v1alpha1.Evaluation, env Env) (map[string]int, error) {
	totals := map[string]int{}
	for i := range ev.Spec.Datasets {
		d, err := buildDataset(ctx, &ev.Spec.Datasets[i], fmt.Sprintf("spec.datasets[%d]", i), env)
		if err != nil {
			return nil, err
		}
		totals[d.Name] = d.Total
	}
	return totals, nil
}

func parameters(m *v1alpha1.Model) (provider.Params, error) {
	var p provider.Params
	prm := m.Parameters
	if prm == nil {
		return p, nil
	}
	for _, f := range []struct {
		n   *v1alpha1.Number
		dst **float64
	}{{prm.Temperature, &p.Temperature}, {prm.TopP, &p.TopP}} {
		if f.n == nil {
			continue
		}
		v, err := f.n.Float64()
		if err != nil {
			return p, err
		}
		*f.dst = &v
	}
	if prm.MaxTokens != nil {
		p.MaxTokens = int(*prm.MaxTokens)
	}
	p.Seed = prm.Seed
	p.Stop = prm.Stop
	return p, nil
}

// agentEnvironment is the exact environment of an agent process, and the values in
// it that must never be written out.
func agentEnvironment(m *v1alpha1.Model, path, key string, env Env) ([]string, []string, error) {
	if key == "" {
		return localEnvironment(m.Agent.Env, path+".agent.env", env)
	}
	// The agent reads its key under the name the model declares.
	out, secrets, err := localEnvironment(m.Agent.Env, path+".agent.env", env, m.APIKey.Env+"="+key)
	return out, append(secrets, key), err
}

// remoteAgentEnvironment is the environment of an agent run by an executor in
// its own container: the same variables as agentEnvironment's, but the key and
// the values the pod sets (agent.env valueFrom, or entries without a value)
// are taken by the executor from its container, where the pod put them. This
// process never holds them.
func remoteAgentEnvironment(m *v1alpha1.Model, path string) ([]agent.EnvVar, error) {
	var out []agent.EnvVar
	for _, name := range agentBaseEnv {
		out = append(out, agent.EnvVar{Name: name, FromExecutor: true})
	}
	if m.APIKey != nil {
		if m.APIKey.SecretKeyRef == nil {
			return nil, fmt.Errorf("%s.apiKey.secretKeyRef: model %q needs an API key, which a cluster takes from a Secret", path, m.Name)
		}
		out = append(out, agent.EnvVar{Name: m.APIKey.Env, FromExecutor: true, Key: true})
	}
	for _, e := range m.Agent.Env {
		if e.Value != "" {
			out = append(out, agent.EnvVar{Name: e.Name, Value: e.Value})
			continue
		}
		// Passed-through variables are usually credentials: kept out of records.
		out = append(out, agent.EnvVar{Name: e.Name, FromExecutor: true, Required: true, Secret: true})
	}
	return out, nil
}

// executorError names the spec field behind what Connect found wrong with an
// agent's environment in its container.
func executorError(m *v1alpha1.Model, path string, err error) error {
	var envErr *agent.EnvError
	if !errors.As(err, &envErr) {
		return fmt.Errorf("%s.agent: %w", path, err)
	}
	if m.APIKey != nil && envErr.Name == m.APIKey.Env {
		secret := m.APIKey.SecretKeyRef.Name
		if envErr.Missing {
			return fmt.Errorf("%s.apiKey.secretKeyRef: the key of Secret %s is empty or missing", path, secret)
		}
		return fmt.Errorf("%s.apiKey.secretKeyRef: the key of Secret %s %w", path, secret, envErr.Invalid)
	}
	for i, e := range m.Agent.Env {
		if e.Name == envErr.Name && e.Value == "" {
			return fmt.Errorf("%s.agent.env[%d]: %s has no value in the agent's container", path, i, e.Name)
		}
	}
	return fmt.Errorf("%s.agent: %w", path, err)
}

// fingerprint is what identifies a model's answers. It holds no secret.
type fingerprint struct {
	Provider string            `json:"provider"`
	BaseURL  string            `json:"baseURL,omitempty"`
	Model    string            `json:"model,omitempty"`
	Params   provider.Params   `json:"params"`
	Headers  map[string]string `json:"headers,omitempty"`
	Agent    *agentFingerprint `json:"agent,omitempty"`
}

type agentFingerprint struct {
	Image   string            `json:"image,omitempty"`
	Command []string          `json:"command"`
	Stdin   string            `json:"stdin,omitempty"`
	Files   map[string]string `json:"files,omitempty"`
	// Env holds declared values only; passed-through ones are named, not valued.
	Env []string `json:"env,omitempty"`
	// Endpoints are the ModelEndpoints the agent calls (name and baseURL)
	// and the variables it learns them from.
	Endpoints []string `json:"endpoints,omitempty"`
	// OutputFormat, when not text, is how the answer is read.
	OutputFormat string `json:"outputFormat,omitempty"`
}

func hashJSON(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// buildDataset resolves a dataset's source, counts its samples and fingerprints
// its content (a checkpoint must never mix samples of different data).
func buildDataset(ctx context.Context, d *v1alpha1.Dataset, path string, env Env) (*runner.Dataset, error) {
	m := dataset.Mapping{}
	if f := d.Fields; f != nil {
		m = dataset.Mapping{ID: f.ID, Input: f.Input, Expected: f.Expected, Messages: f.Messages, Tools: f.Tools}
	}
	out := &runner.Dataset{Name: d.Name}
	limit := d.Limited
	kind := source.Of(&d.Source)
	if k, ok := kind.(source.Itemized); ok {
		items := k.Items(d)
		out.Total = limit(len(items))
		out.Fingerprint = hashJSON(struct {
			Items   []json.RawMessage
			Mapping dataset.Mapping
		}{items, m})
		out.Open = func() (dataset.Reader, io.Closer, error) {
			return dataset.Inline(items, m), io.NopCloser(nil), nil
		}
		return out, nil
	}
	k, ok := kind.(source.Fetcher)
	if !ok {
		return nil, fmt.Errorf("%s.source: no source", path)
	}
	fetched, err := k.Fetch(ctx, d, path, source.Env{BaseDir: env.BaseDir, DataDir: env.DataDir, HTTPClient: env.HTTPClient, Resolve: env.ResolveSource})
	if err != nil {
		return nil, err
	}
	file, name, srcPath := fetched.Path, fetched.Name, path+".source."+kind.Field()
	format := dataset.Format(d.Format)
	if format == "" {
		format = dataset.FormatFromName(name)
	}
	n, sum, err := countAndHash(ctx, file, format)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", srcPath, name, err)
	}
	out.Total = limit(n)
	out.File = file
	out.Fingerprint = hashJSON(struct {
		SHA256  string
		Format  dataset.Format
		Mapping dataset.Mapping
	}{sum, format, m})
	out.Open = func() (dataset.Reader, io.Closer, error) {
		f, err := os.Open(file)
		if err != nil {
			return nil, nil, err
		}
		data, err := dataset.Decompress(f)
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		r, err := dataset.NewReader(data, format, m)
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		return r, f, nil
	}
	return out, nil
}

// countAndHash reads a data file once, counting its samples and hashing its bytes.
// Reading a large file takes a while: ctx stops it.
func countAndHash(ctx context.Context, file string, format dataset.Format) (int, string, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	tee := io.TeeReader(ctxReader{ctx, f}, h)
	data, err := dataset.Decompress(tee)
	if err != nil {
		return 0, "", err
	}
	n, err := dataset.Count(data, format)
	if err != nil {
		return 0, "", err
	}
	// Hash whatever the counter did not need to read (a compressed trailer).
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops reading once its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// preflight renders each dataset's first readable sample through every template
// that will see it, so a template naming a field the data lacks fails now, before
// any call, rather than on every sample.
func preflight(spec *v1alpha1.EvaluationSpec, plan *runner.Plan, env Env) error {
	for i, d := range plan.Datasets {
		s, ok, err := firstSample(d)
		if err != nil {
			return fmt.Errorf("spec.datasets[%d]: %w", i, err)
		}
		if !ok {
			continue
		}
		where := fmt.Sprintf("dataset %q sample %q (line %d)", d.Name, s.ID, s.Line)
		// An empty prompt is that sample's error (checkData judged the data);
		// here only the templates are checked.
		prompt := *plan.Prompt
		prompt.EmptyIsError = false
		req, err := prompt.Request(s)
		if err != nil {
			return promptError(err, where)
		}
		for j := range spec.Models {
			m := &spec.Models[j]
			if m.Agent == nil || (len(env.Models) > 0 && !slices.Contains(env.Models, m.Name)) {
				continue // a runner pod checks only the models it calls
			}
			// The agent's templates, parsed once when its model was built.
			built, ok := plan.Model(m.Name).Provider.(*agent.Provider)
			if !ok {
				return fmt.Errorf("spec.models[%d]: the agent model was not built as an agent", j)
			}
			data := agent.TemplateData{Prompt: req.Prompt, System: req.System, Sample: s.Fields, ID: s.ID, Workspace: env.WorkspaceRoot}
			if err := built.CheckTemplates(data); err != nil {
				return fmt.Errorf("spec.models[%d].agent: %s: %w", j, where, err)
			}
		}
		if err := checkHookTemplates(plan, s, d.Name, where); err != nil {
			return err
		}
		// Judge rubrics: score the sample with a judge that always agrees, which
		// renders the rubric without calling anything.
		for j, sc := range plan.Scorers {
			if sc.JudgeModel == "" {
				continue
			}
			agree := func(context.Context, string) (string, error) { return "VERDICT: CORRECT", nil }
			in := score.Input{Prompt: req.Prompt, Input: s.Input, Expected: s.Expected, HasExpected: s.HasExpected, Sample: s.Fields, Judge: agree}
			if _, err := sc.Built.Score(context.Background(), in); err != nil {
				return fmt.Errorf("spec.scoring[%d].judge.rubric: %s: %w", j, where, err)
			}
		}
	}
	return nil
}

// unboundJudge is the judge a judge scorer is built with: the engine gives it
// the judge model's with each call (score.Input.Judge), so this one answering
// means a caller forgot to.
func unboundJudge(context.Context, string) (string, error) {
	return "", errors.New("no judge model was given to the judge scorer")
}

// promptError names the spec.prompt field a template error is about.
func promptError(err error, where string) error {
	field := "spec.prompt"
	var pe *runner.PromptError
	if errors.As(err, &pe) {
		field += "." + pe.Field
	}
	if where != "" {
		return fmt.Errorf("%s: %s: %w", field, where, err)
	}
	return fmt.Errorf("%s: %w", field, err)
}

// firstSample returns a dataset's first sample that parsed.
func firstSample(d *runner.Dataset) (*dataset.Sample, bool, error) {
	r, c, err := d.Open()
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	for i := 0; i < d.Total; i++ {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if s.Err == nil {
			return &s, true, nil
		}
	}
	return nil, false, nil
}
