package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestEditStartsNewRunReusingCache: editing a finished Evaluation starts a new
// run. An edit of the scoring alone scores the previous run's answers again
// (cache or not: the records say rescored); with the cache on, any other edit
// answers the samples whose requests did not change from the previous run's
// records, with no model call.
//
// With a results store, the earlier run's records are read from it: its
// committed parts, once its heads are gone.
func TestEditStartsNewRunReusingCache(t *testing.T) {
	t.Run("ConfigMaps", func(t *testing.T) { testEditStartsNewRunReusingCache(t, nil) })
	t.Run("ResultsStore", func(t *testing.T) {
		weed := testutil.StartSeaweed(t)
		resultsStore = weed
		t.Cleanup(func() { resultsStore = nil })
		testEditStartsNewRunReusingCache(t, weed.Bucket(t, "cache", "cluster"))
	})
}

func testEditStartsNewRunReusingCache(t *testing.T, store *objstore.Store) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 5 * time.Millisecond})
	startManagerWith(t, ns, func(o *controllers.Options) { o.ResultsStore = store })
	startKubelet(t, ns)
	const n = 24
	ev := testutil.MakeEvaluation("cached", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(8).Parallelism(3).Obj()
	ev.Spec.Cache = &v1alpha1.Cache{Enabled: true}
	create(t, ev)
	first := waitPhase(t, ns, "cached", v1alpha1.PhaseSucceeded, 60*time.Second)
	calls := srv.Stats().Requests
	if calls != n {
		t.Fatalf("first run made %d calls, want %d", calls, n)
	}

	if store != nil {
		// The run's heads are gone once it committed: what it answered
		// and how it scored are read from the store.
		waitTidied(t, ns, first.Status.Run)
	}
	// A second scorer changes the run but not a single request: re-scored.
	second := editAndWait(t, ns, first.Status.Run, func(s *v1alpha1.EvaluationSpec) {
		s.Scoring = append(s.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerContains})
	})
	if got := srv.Stats().Requests; got != calls {
		t.Errorf("the re-scoring run made %d model calls, want 0", got-calls)
	}
	if m := second.Status.Results[0].Metrics; m["contains"] != "1.0000" || m["exact_match"] != "1.0000" {
		t.Errorf("metrics %v", m)
	}
	for _, r := range checkRecords(t, ns, "cached", []string{"m"}, sampleIDs("d", n)) {
		if !r.Rescored || r.Attempts != 1 {
			t.Errorf("record %s: rescored %v, %d attempts; want the earlier answer (1 attempt) scored again", r.ID, r.Rescored, r.Attempts)
			break
		}
	}
	assertRunGone(t, ns, first.Status.Run)

	if store != nil {
		waitTidied(t, ns, second.Status.Run)
	}
	// A dataset added changes what the model answers, not d's requests:
	// d's answers come from the cache, e's are asked.
	const m = 6
	editAndWait(t, ns, second.Status.Run, func(s *v1alpha1.EvaluationSpec) {
		s.Datasets = append(s.Datasets, testutil.MakeEvaluation("x", ns).InlineDataset("e", m).Obj().Spec.Datasets[0])
	})
	if got := srv.Stats().Requests; got != calls+m {
		t.Errorf("the new run made %d model calls, want %d (dataset e's only)", got-calls, m)
	}
	for _, r := range readResults(t, ns, "cached") {
		if r.Dataset == "d" && (r.Attempts != 0 || r.Rescored) {
			t.Errorf("record %s: %d attempts, rescored %v; want 0 attempts (from the cache)", r.ID, r.Attempts, r.Rescored)
			break
		}
	}
	assertRunGone(t, ns, second.Status.Run)
	if store == nil {
		return
	}
	// Every run's records went to the store, none through ConfigMaps.
	var cms corev1.ConfigMapList
	if err := k8sClient.List(context.Background(), &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		if len(c.BinaryData) > 0 && c.Name != cluster.ResultsName("cached") {
			t.Errorf("ConfigMap %s holds records", c.Name)
		}
	}
	// They go on the pass after the one that ended the run (tidyEnded).
	eventually(t, 30*time.Second, "no uploads or cache Secret left after the runs", func() (bool, string) {
		var secrets corev1.SecretList
		if err := k8sClient.List(context.Background(), &secrets, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var left []string
		for _, s := range secrets.Items {
			if c := s.Labels[cluster.LabelComponent]; c == cluster.ComponentUploads || c == cluster.ComponentCache {
				left = append(left, s.Name+" ("+c+")")
			}
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// editAndWait edits the Evaluation cached and waits for a run other than
// was to succeed.
func editAndWait(t *testing.T, ns, was string, edit func(*v1alpha1.EvaluationSpec)) *v1alpha1.Evaluation {
	t.Helper()
	cur := getEvaluation(t, ns, "cached")
	patch := client.MergeFrom(cur.DeepCopy())
	edit(&cur.Spec)
	if err := k8sClient.Patch(context.Background(), cur, patch); err != nil {
		t.Fatal(err)
	}
	var got *v1alpha1.Evaluation
	eventually(t, 60*time.Second, "the new run to succeed", func() (bool, string) {
		got = getEvaluation(t, ns, "cached")
		return got.Status.Run != was && got.Status.Phase == v1alpha1.PhaseSucceeded,
			fmt.Sprintf("run %s phase %s", got.Status.Run, got.Status.Phase)
	})
	return got
}

// assertRunGone checks that a run's ConfigMaps, kept for the run after it,
// are gone once that run ended.
func assertRunGone(t *testing.T, ns, run string) {
	t.Helper()
	// They go on the pass after the one that ended the later run (tidyEnded).
	eventually(t, 30*time.Second, "no ConfigMap of run "+run+" left", func() (bool, string) {
		var cms corev1.ConfigMapList
		if err := k8sClient.List(context.Background(), &cms, client.InNamespace(ns), client.MatchingLabels{cluster.LabelRun: run}); err != nil {
			return false, err.Error()
		}
		return len(cms.Items) == 0, fmt.Sprintf("%d remain", len(cms.Items))
	})
}
