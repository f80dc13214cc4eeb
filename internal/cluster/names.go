// Package cluster is the contract between the controller and the runner pods,
// and the only package both import besides the API: child names, labels and
// annotations (names.go), the run identity and the shard plan with its
// ConfigMap (plan.go), the rate-limit budget protocol and its ConfigMap
// (budget.go), the ConfigMaps shards write their records to and the results
// ConfigMap (store.go), dataset snapshots (data.go), ownership checks
// (owner.go), and what a pod finds where and what its exit code means (pod.go).
// A change to how the two sides talk is made here, once.
package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Label keys and values on everything Proctor creates, and on runner pods.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedBy       = "proctor"
	LabelEvaluation = "proctor.dev/evaluation"
	LabelRun        = "proctor.dev/run"
	LabelModel      = "proctor.dev/model"
	LabelDataset    = "proctor.dev/dataset"
	LabelComponent  = "proctor.dev/component"
	LabelEndpoint   = "proctor.dev/endpoint"
	// LabelAnswers on a shard's ConfigMaps is AnswersHash of its model: a
	// later run whose scoring alone changed scores those answers again.
	LabelAnswers        = "proctor.dev/answers"
	ComponentRunner     = "runner"      // Jobs and their pods
	ComponentPlanner    = "planner"     // the Job that counts url and pvc datasets
	ComponentPlan       = "plan"        // the plan ConfigMap
	ComponentShard      = "shard"       // a shard's head ConfigMap
	ComponentRecords    = "records"     // a shard's sealed record chunks
	ComponentBudget     = "budget"      // the budget ConfigMap
	ComponentResults    = "results"     // NAME-results
	ComponentPermission = "permissions" // the runner's ServiceAccount, Role, RoleBinding
	ComponentCache      = "cache"       // the list of the previous run's records a run may reuse
	ComponentData       = "data"        // a run's snapshot of a ConfigMap dataset
	ComponentUploads    = "uploads"     // a shard's presigned URLs into the results store (a Secret)
)

// Annotation keys.
const (
	// AnnotationProgress is a shard head's progress (ShardProgress as JSON).
	AnnotationProgress = "proctor.dev/progress"
	// AnnotationBatches is a shard head's batches (results.BatchRecord as a
	// JSON list), for a model in batch mode.
	AnnotationBatches = "proctor.dev/batches"
	// AnnotationPlan is the plan ConfigMap's plan (Plan as JSON).
	AnnotationPlan = "proctor.dev/plan"
	// AnnotationEstimate on a plan ConfigMap is the run's estimate
	// (v1alpha1.EstimateStatus as JSON), written by the planner.
	AnnotationEstimate = "proctor.dev/estimate"
	// AnnotationPlanError on a plan ConfigMap says why planning failed.
	AnnotationPlanError = "proctor.dev/plan-error"
	// AnnotationBudget on the budget ConfigMap (BudgetName) is the Budget as
	// JSON: the controller writes it, runner pods read it.
	AnnotationBudget = "proctor.dev/budget"
	// AnnotationRun is the run a results ConfigMap was written for.
	AnnotationRun = "proctor.dev/run"
	// AnnotationSource says which ConfigMap (name, uid, resourceVersion, key) a
	// dataset snapshot was copied from.
	AnnotationSource = "proctor.dev/source"
	// AnnotationSHA256 is the SHA-256 of a dataset snapshot's data.
	AnnotationSHA256 = "proctor.dev/sha256"
	// AnnotationScorers on a shard's ConfigMaps fingerprints the run's
	// scorers by metric (ScorerHashes, as JSON): a later run that scores
	// the answers again keeps the scores of the scorers unchanged since.
	AnnotationScorers = "proctor.dev/scorers"
)

// Name lengths. Other objects are DNS subdomains (253). A Job's name is a pod
// label (63), and an Indexed Job's "<name>-<index>" becomes its pods' hostnames,
// DNS labels: with at most 100,000 completions, "-" and 5 digits must fit too.
const (
	MaxJobName        = 63
	MaxIndexedJobName = MaxJobName - 6
	MaxName           = 253
	// chunkSuffix is what a sealed chunk's name adds to its head's.
	chunkSuffix = len("-123456-") + 7
)

// ChildName joins parts with dashes; when the result is longer than maxLen, its
// end is cut and replaced by a hash of the whole, so names stay unique and stable.
func ChildName(maxLen int, parts ...string) string {
	name := strings.Join(parts, "-")
	if len(name) <= maxLen {
		return name
	}
	h := shortHash(name, 8)
	cut := strings.TrimRight(name[:maxLen-len(h)-1], "-.")
	return cut + "-" + h
}

// LabelValue fits a name into a label value (63 characters).
func LabelValue(name string) string { return ChildName(63, name) }

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// Names of an Evaluation's children.
func RunnerName(eval string) string  { return ChildName(MaxName, eval, "runner") }
func BudgetName(eval string) string  { return ChildName(MaxName, eval, "budget") }
func ResultsName(eval string) string { return ChildName(MaxName, eval, "results") }
func PlanName(eval, run string) string {
	return ChildName(MaxName, eval, run, "plan")
}
func PlannerJobName(eval, run string) string {
	return ChildName(MaxJobName, noDots(eval), run, "plan")
}

// JobName is a model's Indexed Job: a DNS label, with room for "-<index>".
func JobName(eval, model, run string) string {
	return ChildName(MaxIndexedJobName, noDots(eval), model, run)
}

// noDots makes a name (a DNS subdomain) usable in a DNS label.
func noDots(name string) string { return strings.ReplaceAll(name, ".", "-") }

// CacheSourcesName lists the previous run's record ConfigMaps a run reuses
// answers from, when its cache is on.
func CacheSourcesName(eval, run string) string {
	return ChildName(MaxName, eval, run, "cache")
}

// CacheURLsName is the Secret of presigned URLs a run's runners read the
// earlier run's records in the results store with.
func CacheURLsName(eval, run string) string {
	return ChildName(MaxName, eval, run, "cache-urls")
}

// DataName is a run's snapshot of a ConfigMap dataset: the data its pods read.
func DataName(eval, run, dataset string) string {
	return ChildName(MaxName, eval, run, "data", dataset)
}

// HeadName is a shard's head ConfigMap: its progress, done set and pending records.
func HeadName(eval, run, model string, index int) string {
	return ChildName(MaxName-chunkSuffix, eval, run, model, itoa(index))
}

// ChunkName is the k-th sealed chunk of records of a shard.
func ChunkName(head string, k int) string { return head + "-" + itoa(k) }

// ChunkOf parses a name as ChunkName(head, k); ok is false for a name of no
// such form.
func ChunkOf(name string) (head string, k int, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	k, err := strconv.Atoi(name[i+1:])
	if err != nil || k < 0 {
		return "", 0, false
	}
	return name[:i], k, true
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = digits[i%10]
		i /= 10
	}
	return string(b[n:])
}

// Labels are the labels of an Evaluation's children of a component.
func Labels(eval, run, component string) map[string]string {
	l := map[string]string{
		LabelManagedBy:  ManagedBy,
		LabelEvaluation: LabelValue(eval),
		LabelComponent:  component,
	}
	if run != "" {
		l[LabelRun] = run
	}
	return l
}

// APIKeyEnv is the variable a runner pod holds a model's API key in: one per
// model, since a pod may call several models whose keys share a name (a judge,
// say). The controller sets it from the model's Secret; the runner reads it.
func APIKeyEnv(model string) string {
	return "PROCTOR_API_KEY_" + strings.ToUpper(strings.ReplaceAll(model, "-", "_"))
}

// EndpointKeyEnv is the variable a runner pod holds the key of a ModelEndpoint
// its agents call in (agent.endpoints), for its proxy: in the runner's
// container, never in the agent's.
func EndpointKeyEnv(endpoint string) string {
	return "PROCTOR_ENDPOINT_KEY_" + strings.ToUpper(strings.ReplaceAll(endpoint, "-", "_"))
}
