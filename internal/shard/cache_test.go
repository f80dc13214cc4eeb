package shard

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/results"
)

// TestLoadEarlierAnswers: a run whose scoring alone changed finds the
// answers of the run before for its shard's samples, keeping the scores of
// scorers unchanged since (that succeeded) and nothing of the others; cut
// answers and failed calls are not answers; sources of another model, or
// not marked as answers with the cache off, are not read.
func TestLoadEarlierAnswers(t *testing.T) {
	old := testutil.MakeEvaluation("arith", "ns").InlineDataset("d", 6).OpenAIModel("small", "http://x/v1").Scorer(v1alpha1.ScorerExactMatch).Obj()
	old.Spec.Scoring = append(old.Spec.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerContains, Name: "has"})
	old.UID = "uid-1"
	ev := old.DeepCopy()
	ev.Spec.Scoring[0].Normalize = []v1alpha1.Normalizer{"lowercase"} // exact_match changed; has did not

	sh := cluster.Shard{Model: "small", Dataset: "d", Index: 1, Start: 2, End: 5}
	line := func(i int, rec results.Record) []byte {
		b, err := results.AppendLine(nil, i, &rec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	scored := func(id string) results.Record {
		return results.Record{ID: id, Model: "small", Dataset: "d", Output: "answer " + id, Scores: map[string]float64{"exact_match": 0, "has": 1}}
	}
	failedJudge := scored("q3")
	failedJudge.Scores["has"] = 0
	failedJudge.ScoreErrors = map[string]string{"has": "boom"}
	failedJudge.Error, failedJudge.ErrorKind = "scorer has: boom", results.ErrorKindScoring
	cut := scored("q4")
	cut.OutputTruncated = true
	gz, err := results.GzipLines([][]byte{
		line(1, scored("q1")), // another shard's
		line(2, scored("q2")),
		line(3, failedJudge),
		line(4, cut),
		line(2, scored("q2")), // written twice (a pod sealed it and died): the same
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	callFailed, _ := results.GzipLines([][]byte{line(3, results.Record{ID: "q3", Error: "HTTP 500", ErrorKind: results.ErrorKindCall})}, 1)
	owned := []metav1.OwnerReference{cluster.OwnerReference(ev)}
	chunk := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old-chunk", OwnerReferences: owned,
		Annotations: map[string]string{cluster.AnnotationScorers: mustJSON(t, cluster.ScorerHashes(&old.Spec))}},
		BinaryData: map[string][]byte{cluster.KeyRecords: gz}}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other-model", OwnerReferences: owned},
		BinaryData: map[string][]byte{cluster.KeyRecords: callFailed}}
	sources := []cluster.CacheSource{
		{Model: "small", Dataset: "d", Name: "old-chunk", Answers: true},
		{Model: "big", Dataset: "d", Name: "other-model", Answers: true},
	}
	list := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cluster.CacheSourcesName("arith", "run2"), OwnerReferences: owned},
		Data: map[string]string{cluster.KeySources: mustJSON(t, sources)}}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(chunk, other, list).Build()

	got, err := loadEarlier(context.Background(), c, ev, "run2", []cluster.Shard{sh})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]answers{1: {
		2: {ID: "q2", Model: "small", Dataset: "d", Output: "answer q2", Scores: map[string]float64{"has": 1}},
		3: {ID: "q3", Model: "small", Dataset: "d", Output: "answer q3", Scores: map[string]float64{}},
	}}
	if diff := cmp.Diff(want, got.answers); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	// A worker of shards 0 and 2 of size 2 reads the source once for both,
	// and takes nothing of shard 1 (samples 2-3) between them.
	worker := []cluster.Shard{{Model: "small", Dataset: "d", Index: 0, Start: 0, End: 2}, {Model: "small", Dataset: "d", Index: 2, Start: 4, End: 6}}
	got, err = loadEarlier(context.Background(), c, ev, "run2", worker)
	if err != nil {
		t.Fatal(err)
	}
	// Shard 0's answer, kept as shard 0's.
	want = map[int]answers{0: {1: {ID: "q1", Model: "small", Dataset: "d", Output: "answer q1", Scores: map[string]float64{"has": 1}}}}
	if diff := cmp.Diff(want, got.answers); diff != "" {
		t.Errorf("a worker's answers (-want +got):\n%s", diff)
	}
	if n := got.cache.len(); n != 0 {
		t.Errorf("the cache is off, yet %d answers were cached", n)
	}

	// Not marked as answers (another spec edit), and the cache off: nothing.
	sources[0].Answers = false
	list.Data[cluster.KeySources] = mustJSON(t, sources)
	if err := c.Update(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if got, err := loadEarlier(context.Background(), c, ev, "run2", []cluster.Shard{sh}); err != nil || len(got.answers) != 0 {
		t.Errorf("sources not marked as answers gave %v, %v", got, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRecordCacheIsTheShards: a shard answers from its own samples' earlier
// records and what it answered itself, never from another shard of its
// worker (which samples hit must not depend on which shards share a pod).
func TestRecordCacheIsTheShards(t *testing.T) {
	c := newRecordCache()
	c.put(0, "a", &cache.Entry{})
	c.put(2, "b", &cache.Entry{})
	hits := func(keys ...string) []string {
		var out []string
		for _, k := range keys {
			if _, ok := c.Get(k); ok {
				out = append(out, k)
			}
		}
		return out
	}
	c.use(0)
	_ = c.Put("c", &cache.Entry{}) // answered now, in shard 0
	if diff := cmp.Diff([]string{"a", "c"}, hits("a", "b", "c")); diff != "" {
		t.Errorf("shard 0's hits (-want +got):\n%s", diff)
	}
	c.use(2)
	if diff := cmp.Diff([]string{"b"}, hits("a", "b", "c")); diff != "" {
		t.Errorf("shard 2's hits (-want +got):\n%s", diff)
	}
	if n := c.len(); n != 0 {
		t.Errorf("%d earlier answers left after both shards used theirs", n)
	}
}
