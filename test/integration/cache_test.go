package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestEditStartsNewRunReusingCache: editing a finished Evaluation starts a new
// run; with the cache on, samples whose requests did not change are answered
// from the previous run's records, with no model call.
func TestEditStartsNewRunReusingCache(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 5 * time.Millisecond})
	startManager(t, ns)
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

	// A second scorer changes the run but not a single request.
	cur := getEvaluation(t, ns, "cached")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Scoring = append(cur.Spec.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerContains})
	if err := k8sClient.Patch(context.Background(), cur, patch); err != nil {
		t.Fatal(err)
	}
	var second *v1alpha1.Evaluation
	eventually(t, 60*time.Second, "the new run to succeed", func() (bool, string) {
		second = getEvaluation(t, ns, "cached")
		return second.Status.Run != first.Status.Run && second.Status.Phase == v1alpha1.PhaseSucceeded,
			fmt.Sprintf("run %s phase %s", second.Status.Run, second.Status.Phase)
	})
	if got := srv.Stats().Requests; got != calls {
		t.Errorf("the new run made %d model calls, want 0 (every answer cached)", got-calls)
	}
	if m := second.Status.Results[0].Metrics; m["contains"] != "1.0000" || m["exact_match"] != "1.0000" {
		t.Errorf("metrics %v", m)
	}
	for _, r := range checkRecords(t, ns, "cached", []string{"m"}, sampleIDs("d", n)) {
		if r.Attempts != 0 {
			t.Errorf("record %s: %d attempts, want 0 (from the cache)", r.ID, r.Attempts)
			break
		}
	}
	// The old run's records, kept as the cache, are gone once the new run ended.
	var cms corev1.ConfigMapList
	if err := k8sClient.List(context.Background(), &cms, client.InNamespace(ns), client.MatchingLabels{cluster.LabelRun: first.Status.Run}); err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != 0 {
		t.Errorf("%d ConfigMaps of the old run remain", len(cms.Items))
	}
}
