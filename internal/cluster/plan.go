package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
)

// RunID identifies a run of an Evaluation: a hash of its UID and of SpecHash.
// The names of a run's objects derive from it, and the UID makes them
// unguessable from the spec alone: nothing made before the Evaluation existed
// can carry its run's names.
func RunID(ev *v1alpha1.Evaluation) string {
	return HashSpec(&ev.Spec).RunID(ev)
}

// IsRun reports whether run is ev's current run: RunID, or for a run started
// before run identities held the UID (status.run), SpecHash. Such a run keeps
// its identity, so that an upgrade of the manager does not start every
// Evaluation over.
func IsRun(ev *v1alpha1.Evaluation, run string) bool {
	return HashSpec(&ev.Spec).IsRun(ev, run)
}

// SpecHash is a hash of the spec fields that decide a run's results or its
// Jobs. Editing one starts a new run. The others change the run in place:
// suspend, parallelism, rate limits and endpoint weights at once; concurrency, retry and
// timeoutPerSample, and models' pricing, for the runner pods that start from
// then on (a local run's checkpoint leaves them out too); runner.stallTimeout
// and budget at once.
func SpecHash(spec *v1alpha1.EvaluationSpec) string {
	return HashSpec(spec).Spec
}

// AnswersHash is a hash of what decides model's answers: SpecHash's fields
// but the scoring, the other models (judges among them), the cache and the
// shard size. Two runs with the same AnswersHash for a model ask it the same
// requests at the same positions, so a run whose scoring alone changed
// scores the answers of the one before again instead of paying for them.
func AnswersHash(spec *v1alpha1.EvaluationSpec, model string) string {
	return HashSpec(spec).Answers(model)
}

// ScorerHashes fingerprints each scorer of spec by its metric name: its
// configuration and its judge model's (what decides its verdicts).
func ScorerHashes(spec *v1alpha1.EvaluationSpec) map[string]string {
	return HashSpec(spec).Scorers
}

// Hashes are a spec's fingerprints (SpecHash, AnswersHash of each model,
// ScorerHashes), made from one normalized copy of it. Each made on its own
// copies and encodes the whole spec, inline samples and all: the controller
// takes them once a pass (HashSpec), not once for every shard's object.
type Hashes struct {
	// Spec is SpecHash.
	Spec string
	// Scorers is ScorerHashes, and ScorersValue the same as
	// AnnotationScorers holds it.
	Scorers      map[string]string
	ScorersValue string
	// SpecBytes is the size of the spec's JSON (what decides its results):
	// about what each write of the Evaluation rewrites in etcd.
	SpecBytes int
	spec      *v1alpha1.EvaluationSpec
	// answers are taken as asked for: a controller keeps one Hashes for
	// every pass of a spec's generation.
	mu      sync.Mutex
	answers map[string]string
}

// HashSpec takes spec's fingerprints.
func HashSpec(spec *v1alpha1.EvaluationSpec) *Hashes {
	s := resultSpec(spec)
	b, _ := json.Marshal(s)
	h := &Hashes{Spec: hashBytes(b, 8), Scorers: make(map[string]string, len(s.Scoring)), SpecBytes: len(b), spec: s, answers: map[string]string{}}
	for i := range s.Scoring {
		sc := &s.Scoring[i]
		v := []any{sc}
		if sc.Judge != nil {
			for j := range s.Models {
				if s.Models[j].Name == sc.Judge.Model {
					v = append(v, s.Models[j])
				}
			}
		}
		b, _ := json.Marshal(v)
		h.Scorers[sc.MetricName()] = hashBytes(b, 16)
	}
	b, _ = json.Marshal(h.Scorers) // a map of strings: no error
	h.ScorersValue = string(b)
	return h
}

// RunID is RunID of ev, whose spec h hashes.
func (h *Hashes) RunID(ev *v1alpha1.Evaluation) string {
	return shortHash(string(ev.UID)+"/"+h.Spec, 8)
}

// IsRun is IsRun of ev, whose spec h hashes.
func (h *Hashes) IsRun(ev *v1alpha1.Evaluation, run string) bool {
	// An older run's identity was SpecHash alone, and status.run says it.
	return run == h.RunID(ev) || (run == h.Spec && ev.Status.Run == h.Spec)
}

// Answers is AnswersHash of model (taken once).
func (h *Hashes) Answers(model string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.answers[model]; ok {
		return a
	}
	s := *h.spec // shallow: only these fields differ
	s.Scoring, s.Cache, s.ShardSize = nil, nil, nil
	s.Models = slices.DeleteFunc(slices.Clone(s.Models), func(m v1alpha1.Model) bool { return m.Name != model })
	b, _ := json.Marshal(&s)
	a := hashBytes(b, 16)
	h.answers[model] = a
	return a
}

func hashBytes(b []byte, n int) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:n]
}

// resultSpec is a copy of spec without the fields that decide neither a
// run's results nor its Jobs.
func resultSpec(spec *v1alpha1.EvaluationSpec) *v1alpha1.EvaluationSpec {
	s := spec.DeepCopy()
	s.Suspend, s.Parallelism = nil, nil
	s.Concurrency, s.Retry, s.TimeoutPerSample = nil, nil, nil
	if s.Runner != nil && (s.Runner.StallTimeout != nil || s.Runner.KeepFor != nil) {
		// How long a stalled run may wait, or its runners are kept, decides
		// nothing about its results: a runner holding only those hashes as
		// no runner at all.
		s.Runner.StallTimeout, s.Runner.KeepFor = nil, nil
		if apiequality.Semantic.DeepEqual(*s.Runner, v1alpha1.Runner{}) {
			s.Runner = nil
		}
	}
	// A budget and prices decide what the run may spend and what its
	// records say it cost, not its answers: raising a budget resumes a run.
	s.Budget = nil
	// A baseline and a gate judge the results once they are there: editing
	// them compares and gates the same records again (GateHash).
	s.Baseline, s.Gate = nil, nil
	// Where traces go, and whether they hold prompts, changes no answer; nor
	// does which queue admits the Jobs.
	s.Tracing, s.Scheduling = nil, nil
	for i := range s.Models {
		s.Models[i].RateLimit = nil
		s.Models[i].Concurrency = nil
		s.Models[i].Pricing = nil
	}
	for _, c := range apiconv.EndpointCallers(s) {
		c.Ref.Weight = nil // a share's weight applies at once
	}
	for i := range s.Datasets {
		// Inline samples as JSON values, so their keys' order (which an API
		// server may re-encode) does not count.
		for j, item := range s.Datasets[i].Source.Inline {
			var v any
			if json.Unmarshal(item.Raw, &v) == nil {
				s.Datasets[i].Source.Inline[j].Raw, _ = json.Marshal(v)
			}
		}
	}
	return s
}

// GateHash is a hash of spec.baseline and spec.gate ("" without either):
// status.gated holds the one an ended run was compared and gated with.
func GateHash(spec *v1alpha1.EvaluationSpec) string {
	if spec.Baseline == nil && spec.Gate == nil {
		return ""
	}
	b, _ := json.Marshal([]any{spec.Baseline, spec.Gate})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:8]
}

// Plan is how a run is divided: the number of samples of each dataset (after its
// limit) and the number of samples per shard.
type Plan struct {
	ShardSize int            `json:"shardSize"`
	Totals    map[string]int `json:"totals"`
	// StorageBytes bounds the records the run stores (their JSON, before
	// compression); 0 means unbounded. Each shard gets StorageShare of it.
	StorageBytes int64 `json:"storageBytes,omitempty"`
	// Requested, when not 0, is the spec.shardSize that would have made more
	// than MaxShards shards a model, and ShardSize what it was raised to.
	Requested int `json:"requested,omitempty"`
	// Data are the fingerprints of the datasets as the planner read them
	// (their content, format and mapping), by name: a runner pod reading
	// other data (a url without sha256 whose content changed, a file of a
	// PVC rewritten) fails instead of mixing two versions in one run.
	Data map[string]string `json:"data,omitempty"`
}

// NewPlan is the plan of a run of spec whose datasets hold totals samples (after
// their limits), storing at most storageBytes of records (0: unbounded). The
// controller makes it when it can count every dataset itself, the planner Job
// otherwise.
func NewPlan(spec *v1alpha1.EvaluationSpec, totals map[string]int, storageBytes int64) Plan {
	plan := Plan{Totals: totals, ShardSize: DefaultShardSize(totals), StorageBytes: max(0, storageBytes)}
	if spec.ShardSize != nil {
		plan.ShardSize = int(*spec.ShardSize)
	}
	// Each shard is a head ConfigMap (and its chunks) at least: a run makes
	// no more than ShardLimit a model, whatever spec.shardSize says
	// (shardSize 1 over 1,000 samples made 1,003 ConfigMaps and a pod per
	// sample). The shard size is raised until they fit: for ShardsPerWorker
	// up to MaxRaisedShardSize only (the controller gathers a shard's
	// records at once), for MaxShards as far as it takes.
	raise := func(limit, most int) {
		for plan.ShardSize > 0 && plan.ShardSize < most && plan.count(spec) > limit {
			plan.ShardSize = min(most, max(plan.ShardSize+1, plan.ShardSize*plan.count(spec)/limit))
		}
	}
	raise(ShardLimit(spec), MaxRaisedShardSize)
	raise(MaxShards, math.MaxInt)
	plan.Requested = 0
	if spec.ShardSize != nil && int(*spec.ShardSize) != plan.ShardSize {
		plan.Requested = int(*spec.ShardSize)
	}
	return plan
}

// MaxShards bounds the shards of each model of a run.
const MaxShards = 256

// ShardsPerWorker bounds the shards each worker of a run takes in turn.
// With workers a shard no longer buys balance (a worker's shards are fixed)
// nor a finer resume (a pod resumes at the sample): what it costs stays, a
// head to make, read and write at its start and end, and to gather. Measured
// on the local cluster (2 models x 3,000 samples, 4 workers a model): shards
// of 15 (200 a model) took 143 s, 25 s of them calls; the controller spent
// the rest making and gathering 400 heads.
const ShardsPerWorker = 8

// MaxRaisedShardSize is as far as ShardsPerWorker raises a shard size.
const MaxRaisedShardSize = 1000

// ShardLimit is the most shards a model of a run of spec has, unless its
// shards would exceed MaxRaisedShardSize samples: MaxShards, and
// ShardsPerWorker for each shard spec.parallelism runs at once (its
// workers).
func ShardLimit(spec *v1alpha1.EvaluationSpec) int {
	parallelism := v1alpha1.DefaultParallelism
	if spec.Parallelism != nil {
		parallelism = int(*spec.Parallelism)
	}
	return min(MaxShards, ShardsPerWorker*max(1, parallelism))
}

// count is the number of shards of each model.
func (p Plan) count(spec *v1alpha1.EvaluationSpec) int {
	n := 0
	for _, d := range spec.Datasets {
		n += (p.Totals[d.Name] + p.ShardSize - 1) / p.ShardSize
	}
	return n
}

// NewPlanConfigMap is a run's (empty) plan ConfigMap, as the controller makes
// it. The planner Job, which may not create objects, fills it in.
func NewPlanConfigMap(ev *v1alpha1.Evaluation, run string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace:       ev.Namespace,
		Name:            PlanName(ev.Name, run),
		Labels:          Labels(ev.Name, run, ComponentPlan),
		Annotations:     map[string]string{},
		OwnerReferences: []metav1.OwnerReference{OwnerReference(ev)},
	}}
}

// SetPlan writes plan into a plan ConfigMap's annotations.
func SetPlan(annotations map[string]string, plan Plan) {
	b, _ := json.Marshal(plan) // a struct of numbers and strings always encodes
	annotations[AnnotationPlan] = string(b)
}

// ParsePlan reads a plan ConfigMap's annotations: the plan (nil while the
// planner has not written one), or why planning failed (failed != "").
func ParsePlan(annotations map[string]string) (plan *Plan, failed string, err error) {
	if failed = annotations[AnnotationPlanError]; failed != "" {
		return nil, failed, nil
	}
	v := annotations[AnnotationPlan]
	if v == "" {
		return nil, "", nil
	}
	plan = &Plan{}
	if err := json.Unmarshal([]byte(v), plan); err != nil {
		return nil, "", fmt.Errorf("reading the plan: %w", err)
	}
	return plan, "", nil
}

// StorageShare is shard s's share of the run's storage budget, in proportion to
// its samples among all the records of the run; 0 means unbounded.
func (p Plan) StorageShare(spec *v1alpha1.EvaluationSpec, s Shard) int64 {
	records := int64(p.Total()) * int64(len(Subjects(spec)))
	if p.StorageBytes <= 0 || records == 0 {
		return 0
	}
	return max(1, p.StorageBytes*int64(s.End-s.Start)/records)
}

// Shard is one unit of work: a slice [Start, End) of one dataset for one model.
// Shards of a model are numbered from 0 in dataset order: Index is the model's
// Job completion index.
type Shard struct {
	Model   string `json:"model"`
	Dataset string `json:"dataset"`
	Index   int    `json:"index"`
	Start   int    `json:"start"`
	End     int    `json:"end"`
}

// Holds reports whether sample i is one of the shard's.
func (s Shard) Holds(i int) bool { return i >= s.Start && i < s.End }

// ShardOf is the shard of shards that holds sample i, or -1.
func ShardOf(shards []Shard, i int) int {
	if k := slices.IndexFunc(shards, func(s Shard) bool { return s.Holds(i) }); k >= 0 {
		return shards[k].Index
	}
	return -1
}

// Key is the shard's name in budgets: model/index.
func (s Shard) Key() string { return fmt.Sprintf("%s/%d", s.Model, s.Index) }

// DefaultShardSize is used when spec.shardSize is unset: 100 samples (a runner pod
// of a few minutes at usual concurrency), growing for big datasets so a model has at
// most about a thousand shards.
func DefaultShardSize(totals map[string]int) int {
	sum := 0
	for _, t := range totals {
		sum += t
	}
	return max(100, (sum+999)/1000)
}

// Shards lists a model's shards, in dataset order. Every model of a run has the
// same shards: its Job's completions are len(Shards(...)).
func (p Plan) Shards(spec *v1alpha1.EvaluationSpec, model string) []Shard {
	var out []Shard
	size := max(1, p.ShardSize) // a damaged plan must not loop forever
	for _, d := range spec.Datasets {
		total := p.Totals[d.Name]
		for start := 0; start < total; start += size {
			out = append(out, Shard{Model: model, Dataset: d.Name, Index: len(out), Start: start, End: min(start+size, total)})
		}
	}
	return out
}

// Total is the number of samples of one model over all datasets.
func (p Plan) Total() int {
	n := 0
	for _, t := range p.Totals {
		n += t
	}
	return n
}

// Subjects are the models a run evaluates (judges only judge).
func Subjects(spec *v1alpha1.EvaluationSpec) []string {
	judges := spec.JudgeModels()
	var out []string
	for _, m := range spec.Models {
		if !judges[m.Name] {
			out = append(out, m.Name)
		}
	}
	return out
}

// Workers is how many workers run a model's shards: the pods of its Indexed
// Job, each taking its shards one after another (WorkerShards), so that a
// pod's start-up (scheduling, the image, reading the Evaluation, the plan and
// the data, the setup hook) is paid once per worker instead of once per shard.
// One per shard the spec lets run at once, and never more than the shards.
func Workers(parallelism int32, shards int) int {
	return max(1, min(int(parallelism), shards))
}

// WorkerShards are the shards worker w of workers evaluates, in order: w,
// w+workers, w+2*workers, ... Each shard has exactly one worker, so a shard
// still has a single writer (the Job runs one pod per index at a time). A
// worker's shards are fixed for the run: the Job's completions (workers)
// cannot change under the shards a worker has begun.
func WorkerShards(shards []Shard, w, workers int) ([]Shard, error) {
	if workers < 1 || workers > len(shards) || w < 0 || w >= workers {
		return nil, fmt.Errorf("worker %d of %d does not exist for %d shards", w, workers, len(shards))
	}
	out := make([]Shard, 0, (len(shards)-w+workers-1)/workers)
	for i := w; i < len(shards); i += workers {
		out = append(out, shards[i])
	}
	return out, nil
}

// WorkerOf is the worker of workers that evaluates the shard of index i.
func WorkerOf(i, workers int) int {
	if workers < 1 {
		return i
	}
	return i % workers
}
