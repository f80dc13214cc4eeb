package cluster

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
)

// A shard's records live in ConfigMaps, the checkpoint that survives its pod:
//
//   - its head (HeadName) holds its progress (annotation AnnotationProgress, so the
//     controller can follow every shard from a metadata-only cache), the set of
//     samples done, and the records not yet sealed (key pending.jsonl.gz);
//   - chunk slots (ChunkName(head, k), labelled ComponentRecords) hold the rest,
//     gzipped JSON lines {"i": position, "r": record}, one batch each.
//
// The controller creates the head and the chunk slots, owned by the Evaluation,
// before the runner writes to them: runners create nothing, and may only read
// and update their own shard's objects, by name. The controller keeps SpareSlots
// empty slots ahead of what a shard sealed (progress.Chunks), or as many as it
// asks for (progress.Want). The head's done set, not the chunks, is what a
// restarted shard resumes from: a slot written by a pod that died before its
// head said so is written again by the next pod. The controller reads every
// slot once and keeps one record per sample. The runner's side is kube.Store.

// Keys of a head ConfigMap.
const (
	KeyPending = "pending.jsonl.gz"
	KeyDone    = "done"
	KeyRecords = "records.jsonl.gz"
	// KeyAwaiting lists the samples whose records await a judge's batch
	// (results.Record.JudgePending), as ranges like KeyDone.
	KeyAwaiting = "awaiting"
)

// KeySources is the key of the cache sources ConfigMap (JSON []CacheSource).
const KeySources = "sources.json"

// Shard states.
const (
	StateRunning   = "running"
	StateSucceeded = "succeeded"
)

// Size bounds. ConfigMaps must stay well under etcd's 1.5 MiB object limit.
const (
	// MaxChunkBytes bounds a sealed chunk's compressed records.
	MaxChunkBytes = 512 << 10
	// MaxHeadPendingBytes is when pending records are sealed into chunks.
	MaxHeadPendingBytes = 256 << 10
	// MaxHeadBytes bounds the pending records a head may hold while no chunk
	// slot is free (the controller grants slots within a second or two).
	MaxHeadBytes = 768 << 10
	// SpareSlots is how many empty chunk slots the controller keeps ahead of a
	// shard's sealed chunks.
	SpareSlots = 2
	// FlushPendingRaw asks for an early flush when this much accumulates between flushes.
	FlushPendingRaw = 1 << 20
	// MaxStagingChunkBytes bounds a staging chunk's compressed records (a
	// shard's chunk in the results store), and MaxStoreOutputBytes one
	// record's output there: outputs that long are cut, with the record
	// saying so, as at MaxOutputBytes.
	MaxStagingChunkBytes = 64 << 20
	MaxStoreOutputBytes  = 32 << 20
	// MaxOutputBytes caps one record's output in a cluster, so that any record fits
	// a chunk; longer outputs are cut, and the record says so (OutputTruncated,
	// OutputBytes).
	MaxOutputBytes = 256 << 10
	// MaxInputBytes caps one record's input (the rendered request) in a
	// cluster without a results store: the messages' text past it is cut
	// (InputTruncated). With a store, MaxStoreOutputBytes caps it.
	MaxInputBytes = 64 << 10
	// DefaultStorageBudget bounds the records a run stores in the cluster (their
	// JSON, before compression) unless the manager is told otherwise: past it,
	// records are stored without their output.
	DefaultStorageBudget = 64 << 20
	// DefaultNamespaceStorageBudget and DefaultClusterStorageBudget bound
	// the records the Evaluations of a namespace, and of the whole cluster,
	// keep (their JSON, before compression; etcd holds them compressed, with
	// their history until it compacts): about 60 runs at the per-run budget
	// filled a 4 GiB etcd quota, which makes the whole cluster read-only.
	// A run not ended counts its whole budget: 32 at once a namespace, 64 in
	// the cluster, by default.
	DefaultNamespaceStorageBudget = 2 << 30
	DefaultClusterStorageBudget   = 4 << 30
)

// CacheSource is a ConfigMap of records a run may reuse answers from.
type CacheSource struct {
	Model   string `json:"model"`
	Dataset string `json:"dataset"`
	Name    string `json:"name"`
	// Answers says its model's answers were made for the same requests
	// (AnswersHash): the run scores them again, by position, without
	// calling the model, whether the cache is on or not.
	Answers bool `json:"answers,omitempty"`
	// InStore says a head's shard sealed its records into the results
	// store: the head holds only those it could not seal.
	InStore bool `json:"inStore,omitempty"`
	// Location, for a source in the results store (Name is then empty),
	// is the earlier run's location, and Objects the records of the pair
	// there: its committed parts, or the staging chunks of a run that never
	// committed. Runners read them through the presigned URLs of the run's
	// cache URLs Secret (CacheURLsName). Scorers is the earlier run's
	// scorer fingerprints (AnnotationScorers).
	Location string         `json:"location,omitempty"`
	Objects  []StoredObject `json:"objects,omitempty"`
	Scorers  string         `json:"scorers,omitempty"`
}

// StoredObject is a part or staging chunk of a results location, and the
// sample positions it covers, if known (First > Last otherwise).
type StoredObject struct {
	Key   string `json:"key"`
	First int    `json:"first"`
	Last  int    `json:"last"`
}

// Covers says whether the object may hold records of samples [start, end).
func (o StoredObject) Covers(start, end int) bool {
	return o.First > o.Last || o.First < end && o.Last >= start
}

// IsPart says whether the object is a Parquet part (else a staging chunk).
func (o StoredObject) IsPart() bool { return strings.HasSuffix(o.Key, ".parquet") }

// CacheURLs are the presigned URLs of a run's store cache sources, by
// Location+"/"+Key, until Expires: what its runners read them with.
type CacheURLs struct {
	Expires time.Time         `json:"expires"`
	URLs    map[string]string `json:"urls"`
}

// KeyCacheURLs is the key of the cache URLs Secret: CacheURLs as JSON.
const KeyCacheURLs = "urls.json"

// ShardProgress is a head's progress annotation.
type ShardProgress struct {
	State   string `json:"state"`
	Total   int    `json:"total"`
	Done    int    `json:"done"`
	Errored int    `json:"errored"`
	// Scores sums each metric over done samples (errored ones count 0).
	Scores map[string]float64 `json:"scores,omitempty"`
	Tokens results.Tokens     `json:"tokens"`
	// Budget is the newest budget version the runner applied.
	Budget int64 `json:"budget"`
	// Chunks counts the chunk slots this shard filled: slots 0 to Chunks-1.
	Chunks int `json:"chunks"`
	// Want, when larger than Chunks+SpareSlots, is how many slots the shard
	// needs: records are waiting for them.
	Want int `json:"want,omitempty"`
	// Awaiting counts the records awaiting a judge's batch, which a
	// restarted pod reads back from the sealed chunks.
	Awaiting int    `json:"awaiting,omitempty"`
	Pod      string `json:"pod,omitempty"`
	// Attempts counts the pods that began the shard and did not end it by
	// draining (SIGTERM: a preemption, an eviction, a suspension, which are
	// not the shard's fault): its failures, and the pod running it.
	Attempts int `json:"attempts,omitempty"`
	// Stored is the size of the records stored (their JSON, before compression).
	Stored int64 `json:"stored,omitempty"`
	// Cut counts outputs cut at MaxOutputBytes; Dropped, outputs not stored
	// because the shard's share of the storage budget was used up.
	Cut     int `json:"cut,omitempty"`
	Dropped int `json:"dropped,omitempty"`
	// Throttled lists the models (the shard's and its judges) that the server
	// is rate limiting (429) at the last flush.
	Throttled map[string]Throttle `json:"throttled,omitempty"`
	// Endpoints are the budgets of the ModelEndpoints the shard calls through
	// that it applied, by endpoint name.
	Endpoints map[string]EndpointAck `json:"endpoints,omitempty"`
	// Usage is what the shard sent to each model that calls through a
	// ModelEndpoint or has a rateLimit over the last minute, by caller (for
	// the endpoint's status, and to compare with the provider's counts).
	Usage map[string]Usage `json:"usage,omitempty"`
	// Provider is what the providers' rate-limit headers last said of each
	// caller's key.
	Provider map[string]ProviderSeen `json:"provider,omitempty"`
	// Spent is what the shard's records cost (their calls and their judging),
	// over all its pods.
	Spent spend.Totals `json:"spent"`
	// Ledger is the runner's account against its allowance of spec.budget,
	// when the run has one.
	Ledger *LedgerReport `json:"ledger,omitempty"`
}

// LedgerReport is a runner's account of its spending against its allowance.
type LedgerReport struct {
	// Spent is what its records and the calls it settled cost; Reserved, the
	// worst case of its calls in flight.
	Spent    spend.Totals `json:"spent"`
	Reserved spend.Totals `json:"reserved"`
	// Blocked: a call waits for a larger allowance; Needed is its worst case.
	Blocked bool         `json:"blocked,omitempty"`
	Needed  spend.Totals `json:"needed"`
}

// NewLedgerReport reports a ledger's state.
func NewLedgerReport(st spend.State) *LedgerReport {
	return &LedgerReport{Spent: st.Spent, Reserved: st.Reserved, Blocked: st.Waiting, Needed: st.Needed}
}

// Throttle is a model's current run of 429s, as a runner saw it.
type Throttle struct {
	// Since is the first 429 after the model's last successful call.
	Since metav1.Time `json:"since"`
	// Until is when the server's latest retry-after ends, if it sent one.
	Until *metav1.Time `json:"until,omitempty"`
	// Refusals counts the 429s since Since.
	Refusals int `json:"refusals"`
}

// ParseProgress reads a head's progress annotation.
func ParseProgress(annotations map[string]string) (ShardProgress, bool) {
	var p ShardProgress
	v, ok := annotations[AnnotationProgress]
	if !ok || json.Unmarshal([]byte(v), &p) != nil {
		return p, false
	}
	return p, true
}

// ParseBatches reads a head's batches.
func ParseBatches(annotations map[string]string) ([]results.BatchRecord, error) {
	v, ok := annotations[AnnotationBatches]
	if !ok {
		return nil, nil
	}
	var out []results.BatchRecord
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("batches: %w", err)
	}
	return out, nil
}

// NewHead is a shard's empty head, as the controller creates it (h hashes
// ev's spec). With inStore, its shard seals its records into the results
// store.
func NewHead(ev *v1alpha1.Evaluation, h *Hashes, run string, sh Shard, inStore bool) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: ev.Namespace, Name: HeadName(ev.Name, run, sh.Model, sh.Index),
		Labels:          shardLabels(h, Labels(ev.Name, run, ComponentShard), sh),
		Annotations:     map[string]string{AnnotationScorers: h.ScorersValue},
		OwnerReferences: []metav1.OwnerReference{OwnerReference(ev)},
	}}
	if inStore {
		cm.Annotations[AnnotationRecordsIn] = RecordsInStore
	}
	return cm
}

// NewChunkSlot is the k-th empty chunk slot of a shard, as the controller
// creates it (h hashes ev's spec).
func NewChunkSlot(ev *v1alpha1.Evaluation, h *Hashes, run string, sh Shard, k int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: ev.Namespace, Name: ChunkName(HeadName(ev.Name, run, sh.Model, sh.Index), k),
		Labels:          shardLabels(h, Labels(ev.Name, run, ComponentRecords), sh),
		Annotations:     map[string]string{AnnotationScorers: h.ScorersValue},
		OwnerReferences: []metav1.OwnerReference{OwnerReference(ev)},
	}}
}

// Records in a results store. When the cluster has a results store, a
// shard seals its chunks there instead of into chunk slot ConfigMaps, so
// that records never pass through etcd: chunk k is the object
// StagingKey(head, k) of the run's location, written through a presigned
// URL the controller puts in the shard's uploads Secret (UploadsName), which
// the runner may read by name. The head says so (AnnotationRecordsIn), and
// keeps its progress and done set as before: what is sealed, and what a
// restarted pod resumes from, work as with chunk slots.
const (
	// AnnotationRecordsIn on a head is RecordsInStore when its shard seals
	// its records into the results store.
	AnnotationRecordsIn = "proctor.dev/records-in"
	RecordsInStore      = "store"
	// KeyUploads is the key of a shard's uploads Secret: Uploads as JSON.
	KeyUploads = "uploads.json"
	// UploadWindow is how many slots one grant of presigned URLs covers.
	UploadWindow = 16
)

// Uploads are the presigned URLs of a shard's staging chunks. Put[i] writes
// chunk First+i; Get[k] reads chunk k (given while the shard has records
// awaiting a judge's batch, which a restarted pod reads back). They hold
// until Expires.
type Uploads struct {
	Expires time.Time `json:"expires"`
	First   int       `json:"first"`
	Put     []string  `json:"put"`
	Get     []string  `json:"get,omitempty"`
}

// StagingKey is the key of chunk k of a shard, under its run's location.
func StagingKey(head string, k int) string { return fmt.Sprintf("staging/%s/%06d.jsonl.gz", head, k) }

// StagingPrefix is where a shard's staging chunks are, under its run's
// location; the run's, with head "".
func StagingPrefix(head string) string {
	if head == "" {
		return "staging/"
	}
	return "staging/" + head + "/"
}

// UploadsName is a shard's uploads Secret.
func UploadsName(head string) string { return head + "-uploads" }

// InStore says whether a head's shard seals its records into the results store.
func InStore(annotations map[string]string) bool {
	return annotations[AnnotationRecordsIn] == RecordsInStore
}

// SlotsWanted is how many chunk slots a shard whose head shows p needs now:
// those it filled and those it asks for.
func SlotsWanted(p ShardProgress) int { return max(p.Chunks, p.Want) }

// ScorersValue is ScorerHashes as AnnotationScorers holds them (and the
// pairs the controller commits to a results store).
func ScorersValue(spec *v1alpha1.EvaluationSpec) string {
	return HashSpec(spec).ScorersValue
}

// KeptScorers are the metrics of the current spec (its ScorerHashes,
// scorers) whose scorer is the one that scored the records of an earlier
// run's ConfigMap cm (its AnnotationScorers): their scores stay when its
// answers are scored again.
func KeptScorers(scorers map[string]string, cm *corev1.ConfigMap) map[string]bool {
	var was map[string]string
	if json.Unmarshal([]byte(cm.Annotations[AnnotationScorers]), &was) != nil {
		return nil
	}
	keep := map[string]bool{}
	for name, h := range scorers {
		if was[name] == h {
			keep[name] = true
		}
	}
	return keep
}

func shardLabels(h *Hashes, l map[string]string, s Shard) map[string]string {
	l[LabelModel] = s.Model
	l[LabelDataset] = s.Dataset
	l[LabelAnswers] = h.Answers(s.Model)
	return l
}

// ReadRecords decodes the records a shard ConfigMap (head or chunk) holds, in
// the order they were written (a head holds pending records, a chunk sealed ones).
func ReadRecords(cm *corev1.ConfigMap) ([]results.Line, error) {
	var out []results.Line
	for _, key := range []string{KeyPending, KeyRecords} {
		lines, err := ParseChunk(cm.BinaryData[key])
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", cm.Name, key, err)
		}
		out = append(out, lines...)
	}
	return out, nil
}

// ParseChunk reads a chunk of records (gzipped JSON lines {"i": position,
// "r": record}), as a chunk slot or a staging chunk holds it.
func ParseChunk(gz []byte) ([]results.Line, error) {
	if len(gz) == 0 {
		return nil, nil
	}
	lines, err := results.GunzipLines(gz)
	if err != nil {
		return nil, err
	}
	out := make([]results.Line, 0, len(lines))
	for _, b := range lines {
		l, err := results.ParseLine(b)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// Keys of the results ConfigMap (ResultsName): the summary, as a local run's
// summary.json; the records in sample order, as a local run's results.jsonl
// (gzip), when they fit; else the names of the run's ConfigMaps that hold them;
// and, when the cluster has a results store, the location the run was
// committed to there.
const (
	ResultsKeySummary  = "summary.json"
	ResultsKeyRecords  = "results.jsonl.gz"
	ResultsKeyChunks   = "chunks"
	ResultsKeyLocation = "location"
)
