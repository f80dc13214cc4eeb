// Package runner is Proctor's evaluation engine: it streams samples through models
// within their concurrency and rate limits, retries what can be retried, scores the
// answers and hands each finished record to a sink (a local checkpoint directory, or
// a shard's ConfigMaps in a cluster). It has no Kubernetes dependencies: the same
// engine runs `proctor run` on a laptop and every runner pod.
package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"time"

	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// Plan is a compiled Evaluation: every reference resolved, every template parsed.
type Plan struct {
	Models   []*Model
	Datasets []*Dataset
	Prompt   *Prompt
	Scorers  []Scorer
	Retry    retry.Policy
	// Timeout bounds one attempt (a call, or an agent run) unless the model sets its own.
	Timeout time.Duration
	// Cache, when set, answers repeated requests without calling the model.
	Cache Cache
	// Secrets are values (API keys) scrubbed from every record the engine writes.
	Secrets []string
	// Endpoints are the limits of the ModelEndpoints that models call through,
	// by name, each shared by its models (a local run: in a cluster the
	// endpoint's budget gives each model its share instead).
	Endpoints map[string]ratelimit.Limits
	// EndpointBursts are those endpoints' bursts (limits.burst), where set.
	EndpointBursts map[string]time.Duration
	// Hooks run around each sample in its slot; nil when there are none.
	Hooks *Hooks
	// RepairTimeout bounds how long a slot may stay broken (a hook failing
	// in it) or wait for a service that went down; 0 means 5m.
	RepairTimeout time.Duration
	// AssumedOutputTokens is the answer length a call reserves from the
	// budget when its model sets no MaxTokens; 0 means 4096.
	AssumedOutputTokens int
}

// Cache stores responses by request key: a directory locally (cache.Cache), the
// records of the previous run in a cluster.
type Cache interface {
	Get(key string) (*cache.Entry, bool)
	Put(key string, e *cache.Entry) error
}

// Model is one model entry, ready to call.
type Model struct {
	Name     string
	Provider provider.Provider
	// Agent is true for agent models, whose requests depend on the whole sample.
	Agent bool
	// Fingerprint identifies what answers a request (provider, endpoint, model,
	// parameters; an agent's command and files), without secrets. It keys the cache.
	Fingerprint string
	Concurrency int
	// Limits are the model's own limits: in a cluster, its share of the
	// budget, set while it runs; in a local run, its rateLimit.
	Limits ratelimit.Limits
	// Burst is how much of its token limits the provider lets through at
	// once (rateLimit.burst, or its endpoint's); 0: ratelimit.DefaultBurst.
	// Requests go one at a time.
	Burst time.Duration
	// Endpoint is the ModelEndpoint the model calls through, if any; its
	// limits (Plan.Endpoints) bound the model together with the others
	// calling through it.
	Endpoint string
	// EndpointWeight weighs the model's part of its endpoint's limits against
	// the others calling through it, in a local run (0 counts as 1).
	EndpointWeight int64
	// AgentEndpoints are the ModelEndpoints an agent model's agent calls
	// through the engine's proxies.
	AgentEndpoints []*AgentEndpoint
	// Timeout overrides Plan.Timeout for this model's attempts.
	Timeout time.Duration
	// MaxTokens caps answers; it seeds the output-token estimate.
	MaxTokens int
	// JudgeOnly models are used by judge scorers and not evaluated themselves.
	JudgeOnly bool
	// GenAI is what its calls' spans say of it (the GenAI conventions).
	GenAI telemetry.GenAI
	// Price is what the model's tokens cost; nil when unknown. An agent
	// model's prices its agent's calls through its agent endpoints, or the
	// usage it reports.
	Price *spend.Price
	// AgentReportsUsage: the agent's output reports its tokens (and maybe
	// its cost), which count when it has no agent endpoints.
	AgentReportsUsage bool
	// Batch, when set, runs the model's samples through its provider's
	// batch API (the Provider is then a provider.Batcher).
	Batch *BatchConfig
}

// Dataset is one dataset, ready to stream.
type Dataset struct {
	Name string
	// Fingerprint identifies the data and how it is read.
	Fingerprint string
	// Total is the number of samples to evaluate (after any limit).
	Total int
	// File is the local file the data is read from, when it is one.
	File string
	// Open starts reading from the first sample.
	Open func() (dataset.Reader, io.Closer, error)
	// Warnings are what reading the data found that the user should know
	// and that does not stop the run (bytes that are not UTF-8).
	Warnings []string
}

// Scorer is one scorer of the plan.
type Scorer struct {
	Config score.Config
	// JudgeModel names the judge scorer's model.
	JudgeModel string
	// Built, when set, is the scorer Config describes, built once by whoever
	// made the plan (a judge scorer is given its judge with each call); nil
	// means the engine builds it.
	Built score.Scorer
}

// Model returns the named model, or nil.
func (p *Plan) Model(name string) *Model {
	for _, m := range p.Models {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Totals are the number of samples of each dataset, by name.
func (p *Plan) Totals() map[string]int {
	totals := make(map[string]int, len(p.Datasets))
	for _, d := range p.Datasets {
		totals[d.Name] = d.Total
	}
	return totals
}

// Dataset returns the named dataset, or nil.
func (p *Plan) Dataset(name string) *Dataset {
	for _, d := range p.Datasets {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Subjects are the models under evaluation, in order.
func (p *Plan) Subjects() []*Model {
	var out []*Model
	for _, m := range p.Models {
		if !m.JudgeOnly {
			out = append(out, m)
		}
	}
	return out
}

// MetricNames lists the metrics, in scorer order.
func (p *Plan) MetricNames() []string {
	names := make([]string, len(p.Scorers))
	for i, s := range p.Scorers {
		names[i] = s.Config.Name
		if names[i] == "" {
			names[i] = s.Config.Type
		}
	}
	return names
}

// CheckpointFingerprint identifies everything that decides the records of model m
// on dataset d: the model, the data, the prompt and the scoring (with any judge).
// Records made under another fingerprint must not be resumed from.
func (p *Plan) CheckpointFingerprint(m *Model, d *Dataset) string {
	type scorer struct {
		Config score.Config
		Judge  string
	}
	v := struct {
		Model, Dataset, System, Template string
		Scorers                          []scorer
	}{Model: m.Fingerprint, Dataset: d.Fingerprint, System: p.Prompt.systemSrc, Template: p.Prompt.userSrc}
	for _, s := range p.Scorers {
		sc := scorer{Config: s.Config}
		if j := p.Model(s.JudgeModel); j != nil {
			sc.Judge = j.Fingerprint
		}
		v.Scorers = append(v.Scorers, sc)
	}
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Parts fingerprints one by one what CheckpointFingerprint covers, so a
// checkpoint refused for a change says which, and a change to the scoring
// alone keeps the answers.
func (p *Plan) Parts(m *Model, d *Dataset) *results.Parts {
	out := &results.Parts{
		Model: m.Fingerprint, Data: d.Fingerprint,
		System: hashOf(p.Prompt.systemSrc), Template: hashOf(p.Prompt.userSrc),
		Scorers: map[string]string{},
	}
	names := p.MetricNames()
	for i, s := range p.Scorers {
		sc := struct {
			Config score.Config
			Judge  string
		}{Config: s.Config}
		if j := p.Model(s.JudgeModel); j != nil {
			sc.Judge = j.Fingerprint
		}
		b, _ := json.Marshal(sc)
		out.Scorers[names[i]] = hashOf(string(b))
	}
	return out
}

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Task is a slice of one dataset for one model: samples at positions [Start, End).
type Task struct {
	Model   string
	Dataset string
	Start   int
	End     int
}

// Tasks covers every model under evaluation on every dataset, in order.
func (p *Plan) Tasks() []Task {
	var ts []Task
	for _, m := range p.Subjects() {
		for _, d := range p.Datasets {
			ts = append(ts, Task{Model: m.Name, Dataset: d.Name, Start: 0, End: d.Total})
		}
	}
	return ts
}
