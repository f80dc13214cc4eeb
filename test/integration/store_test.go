package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestResultsStore runs an Evaluation with the cluster's results store on a
// real S3-compatible server (weed): 10% of its runner pods are killed twice
// and the manager is restarted mid-run, yet the committed location holds
// every sample exactly once, a part per shard, and outlives the Evaluation.
// While the store is down, a run that ran every sample waits, saying why.
func TestResultsStore(t *testing.T) {
	weed := testutil.StartSeaweed(t)
	store := weed.Bucket(t, "runs", "cluster")
	ctx := context.Background()
	ns := newNamespace(t)
	const latency = 100 * time.Millisecond
	srv, url := fakeLLM(t, fakellm.Config{Latency: latency})
	withStore := func(o *controllers.Options) { o.ResultsStore = store }
	m := startManagerWith(t, ns, withStore)
	k := startKubelet(t, ns)
	const n, shardSize, concurrency = 100, 10, 1
	create(t, testutil.MakeEvaluation("stored", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(shardSize).Parallelism(4).Concurrency(concurrency).Obj())

	// One shard of ten is killed, once it has checkpointed samples, then
	// another; the manager is restarted between the kills.
	killMidway := func(index int) {
		t.Helper()
		eventually(t, 30*time.Second, fmt.Sprintf("shard m/%d to checkpoint samples", index), func() (bool, string) {
			ev := getEvaluation(t, ns, "stored")
			head := headProgress(t, ns, cluster.HeadName("stored", ev.Status.Run, "m", index))
			return head.Done >= 2 && head.Done < shardSize, fmt.Sprintf("head %+v", head)
		})
		// Its worker's pod: 4 workers take the 10 shards in turn.
		if !k.kill("m", cluster.WorkerOf(index, 4)) {
			t.Fatalf("shard m/%d was not running", index)
		}
	}
	killMidway(1)
	m.stop()
	time.Sleep(300 * time.Millisecond)
	startManagerWith(t, ns, withStore)
	killMidway(6)
	ev := waitPhase(t, ns, "stored", v1alpha1.PhaseSucceeded, 90*time.Second)

	prefix := fmt.Sprintf("s3://runs/cluster/%s/stored/", ns)
	loc := ev.Status.ResultsLocation
	if !strings.HasPrefix(loc, prefix) || !strings.HasSuffix(loc, "-"+ev.Status.Run) {
		t.Fatalf("status.resultsLocation = %q, want %sSTARTED-%s", loc, prefix, ev.Status.Run)
	}
	var cm corev1.ConfigMap
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.ResultsName("stored")}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[cluster.ResultsKeyLocation] != loc {
		t.Errorf("stored-results says location %q, status %q", cm.Data[cluster.ResultsKeyLocation], loc)
	}
	checkStored := func() {
		t.Helper()
		res, err := objects.ReadResults(ctx, weed.Store(t, loc), loc)
		if err != nil {
			t.Fatal(err)
		}
		if p := res.Manifest.Pair("m", "d"); p == nil || len(p.Parts) != n/shardSize {
			t.Errorf("the manifest's pair m/d: %+v, want a part per shard (%d)", p, n/shardSize)
		}
		seen := map[string]int{}
		if err := res.Records(ctx, func(r *results.Record) {
			seen[r.ID]++
			if r.Error != "" || r.Scores["exact_match"] != 1 {
				t.Errorf("stored record %s: %+v", r.ID, r)
			}
		}); err != nil {
			t.Fatal(err)
		}
		for _, id := range sampleIDs("d", n) {
			if seen[id] != 1 {
				t.Errorf("sample %s is in the store %d times, want once", id, seen[id])
			}
		}
		if len(seen) != n {
			t.Errorf("%d samples in the store, want %d", len(seen), n)
		}
		sums, err := res.Summaries()
		if err != nil || len(sums) != 1 || sums[0].Completed != n {
			t.Errorf("the stored summary: %+v (%v)", sums, err)
		}
	}
	checkStored()
	// The records went to the store, not through etcd: no chunk slot was
	// made, the heads hold no records, and what carried them there
	// (presigned URLs, staging chunks) is gone. NAME-results embeds them,
	// small as they are, so that reading them needs no store access.
	var cms corev1.ConfigMapList
	if err := k8sClient.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		if c.Name != cm.Name && (c.Labels[cluster.LabelComponent] == cluster.ComponentRecords || len(c.BinaryData) > 0) {
			t.Errorf("ConfigMap %s (%s) holds records: %d bytes", c.Name, c.Labels[cluster.LabelComponent], len(c.BinaryData[cluster.KeyPending])+len(c.BinaryData[cluster.KeyRecords])+len(c.BinaryData[cluster.ResultsKeyRecords]))
		}
		if c.Labels[cluster.LabelComponent] == cluster.ComponentShard && !cluster.InStore(c.Annotations) {
			t.Errorf("head %s does not say its records go to the store", c.Name)
		}
	}
	if cm.Data[cluster.ResultsKeyChunks] != "" {
		t.Errorf("stored-results lists record ConfigMaps: %q", cm.Data[cluster.ResultsKeyChunks])
	}
	// Results too large to embed are read from the location it names:
	// here, a copy of stored-results without its records.
	bare := cm.DeepCopy()
	bare.BinaryData = nil
	read := func(open kube.OpenLocation) (int, error) {
		n := 0
		err := kube.ResultRecords(ctx, k8sClient, ev, bare, open, nil, func([]byte) error { n++; return nil })
		return n, err
	}
	if got, err := read(func(_ context.Context, l string) (objects.Bucket, error) { return weed.Store(t, l), nil }); err != nil || got != n {
		t.Errorf("records read from the location stored-results names: %d (%v), want %d", got, err, n)
	}
	if _, err := read(nil); err == nil || !strings.Contains(err.Error(), loc) {
		t.Errorf("reading without access to the store: %v, want an error naming %s", err, loc)
	}
	// They go on the pass after the one that ended the run (tidyEnded).
	eventually(t, 30*time.Second, "no uploads Secret nor staging chunk left after the run", func() (bool, string) {
		var secrets corev1.SecretList
		if err := k8sClient.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{cluster.LabelComponent: cluster.ComponentUploads}); err != nil {
			return false, err.Error()
		}
		keys, err := weed.Store(t, loc).List(ctx, "staging/")
		return len(secrets.Items) == 0 && err == nil && len(keys) == 0, fmt.Sprintf("%d uploads Secrets, staging chunks %v (%v)", len(secrets.Items), keys, err)
	})
	// Finished samples were not called again: beyond the samples, only
	// those in flight at the two kills (and not flushed yet) were.
	if calls, inFlight := srv.Stats().Requests, int64(concurrency+concurrency*testFlushEvery/latency); calls > n+2*inFlight {
		t.Errorf("%d model calls for %d samples: finished samples were called again", calls, n)
	}

	// Once status shows the commit, the run's Jobs, their pods and its
	// heads go: the store holds all they did.
	waitTidied(t, ns, ev.Status.Run)

	// The records outlive the Evaluation.
	if err := k8sClient.Delete(ctx, ev); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Evaluation to be gone", func() (bool, string) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(ev), &v1alpha1.Evaluation{})
		return err != nil, fmt.Sprint(err)
	})
	checkStored()

	// A run naming the deleted Evaluation as its baseline is compared with
	// its records in the store.
	create(t, testutil.MakeEvaluation("after", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(50).Parallelism(2).Concurrency(4).Baseline("stored").Obj())
	after := waitPhase(t, ns, "after", v1alpha1.PhaseSucceeded, 90*time.Second)
	c := after.Status.Comparison
	if c == nil || c.Baseline != loc || len(c.Results) != 1 || c.Results[0].Paired != n {
		t.Errorf("the comparison with the deleted Evaluation's stored run: %+v, want %d samples paired with %s", c, n, loc)
	}

	// A gate added to a run whose Jobs and heads are gone judges it again
	// from its records in the store, starting nothing, and commits the
	// verdict as the location's next manifest.
	waitTidied(t, ns, after.Status.Run)
	cur := getEvaluation(t, ns, "after")
	patch := client.MergeFrom(cur.DeepCopy())
	one := v1alpha1.Number("1")
	cur.Spec.Gate = &v1alpha1.Gate{Rules: []v1alpha1.GateRule{{Metric: "exact_match", Min: &one, MaxDrop: ptrTo(v1alpha1.Number("0.01"))}}}
	if err := k8sClient.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	var judged *v1alpha1.Evaluation
	eventually(t, 30*time.Second, "the run to be judged again", func() (bool, string) {
		judged = getEvaluation(t, ns, "after")
		return judged.Status.Gate != nil, fmt.Sprintf("phase %s gate %+v", judged.Status.Phase, judged.Status.Gate)
	})
	if st := judged.Status; st.Phase != v1alpha1.PhaseSucceeded || !st.Gate.Passed || st.Run != after.Status.Run ||
		st.Comparison == nil || len(st.Comparison.Results) != 1 || st.Comparison.Results[0].Paired != n || st.Results[0].Completed != n {
		t.Errorf("judged again: phase %s gate %+v comparison %+v results %+v; want the same run passing, %d samples paired", st.Phase, st.Gate, st.Comparison, st.Results, n)
	}
	waitTidied(t, ns, after.Status.Run) // nothing was made again
	judgedAt := weed.Store(t, judged.Status.ResultsLocation)
	latest, err := objects.Latest(ctx, judgedAt)
	if err != nil || latest == nil || latest.Generation != 2 || latest.ID != after.Status.Run {
		t.Fatalf("the location's latest manifest: %+v (%v), want generation 2 of run %s", latest, err, after.Status.Run)
	}
	if !strings.Contains(string(latest.Summary), `"gate":{"passed":true`) {
		t.Errorf("the committed summary has no verdict: %s", latest.Summary)
	}
}

// waitTidied waits until run has no Job, pod or shard ConfigMap left.
func waitTidied(t testing.TB, ns, run string) {
	t.Helper()
	eventually(t, 30*time.Second, "the committed run's Jobs, pods and heads to be deleted", func() (bool, string) {
		ctx, in, of := context.Background(), client.InNamespace(ns), client.MatchingLabels{cluster.LabelRun: run}
		var jobs batchv1.JobList
		var pods corev1.PodList
		var cms corev1.ConfigMapList
		for _, l := range []client.ObjectList{&jobs, &pods, &cms} {
			if err := k8sClient.List(ctx, l, in, of); err != nil {
				return false, err.Error()
			}
		}
		heads := 0
		for _, c := range cms.Items {
			if l := c.Labels[cluster.LabelComponent]; l == cluster.ComponentShard || l == cluster.ComponentRecords {
				heads++
			}
		}
		return len(jobs.Items)+len(pods.Items)+heads == 0, fmt.Sprintf("%d Jobs, %d pods, %d heads", len(jobs.Items), len(pods.Items), heads)
	})
}

// TestResultsStoreUnavailable: a run whose store cannot take its records
// stays Running with REASON ResultsStoreUnavailable and one Warning event,
// and ends once the store is back.
func TestResultsStoreUnavailable(t *testing.T) {
	weed := testutil.StartSeaweed(t)
	ctx := context.Background()
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	loc, _ := objstore.ParseURL("s3://down/cluster")
	// Nothing listens there.
	down, err := objstore.Open(ctx, loc, objstore.Options{Endpoint: "http://127.0.0.1:9", AccessKeyID: "k", SecretAccessKey: "s",
		HTTPClient: &http.Client{Timeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	m := startManagerWith(t, ns, func(o *controllers.Options) { o.ResultsStore = down })
	startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("waits", ns).InlineDataset("d", 10).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Obj())
	eventually(t, 60*time.Second, "the run to wait for the store", func() (bool, string) {
		ev := getEvaluation(t, ns, "waits")
		return ev.Status.Reason == v1alpha1.ReasonResultsStoreUnavailable && ev.Status.Phase == v1alpha1.PhaseRunning,
			fmt.Sprintf("%s %s %s", ev.Status.Phase, ev.Status.Reason, ev.Status.Message)
	})
	time.Sleep(time.Second) // several rechecks
	ev := getEvaluation(t, ns, "waits")
	if strings.Contains(ev.Status.Message, weed.SecretKey) || !strings.Contains(ev.Status.Message, "results store") {
		t.Errorf("message %q", ev.Status.Message)
	}
	var events corev1.EventList
	if err := k8sClient.List(ctx, &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	warnings := 0
	for _, e := range events.Items {
		if e.Reason == v1alpha1.ReasonResultsStoreUnavailable {
			warnings += max(1, int(e.Count))
			if e.Type != corev1.EventTypeWarning {
				t.Errorf("event %s is %s, want Warning", e.Reason, e.Type)
			}
		}
	}
	if warnings != 1 {
		t.Errorf("%d ResultsStoreUnavailable events, want one", warnings)
	}
	// The store is back (the manager restarted with a reachable one).
	m.stop()
	store := weed.Bucket(t, "back", "cluster")
	startManagerWith(t, ns, func(o *controllers.Options) { o.ResultsStore = store })
	ev = waitPhase(t, ns, "waits", v1alpha1.PhaseSucceeded, 60*time.Second)
	if !strings.HasPrefix(ev.Status.ResultsLocation, "s3://back/cluster/"+ns+"/waits/") {
		t.Errorf("status.resultsLocation = %q", ev.Status.ResultsLocation)
	}
	b, _ := json.Marshal(ev.Status)
	if strings.Contains(string(b), weed.SecretKey) {
		t.Error("status holds the store's secret key")
	}
}

// TestEvaluationsOwnResultsStore: an Evaluation names a results store of
// its own, with credentials of a Secret in its namespace, in a cluster with
// none: it waits for the Secret, then its records go there, through
// presigned URLs, and the keys appear nowhere.
func TestEvaluationsOwnResultsStore(t *testing.T) {
	weed := testutil.StartSeaweed(t)
	weed.Bucket(t, "team", "evals") // the team's bucket
	ctx := context.Background()
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	startManager(t, ns) // the cluster has no results store
	startKubelet(t, ns)
	const n = 30
	ev := testutil.MakeEvaluation("own", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(10).Parallelism(3).Obj()
	ev.Spec.ResultsStore = &v1alpha1.ResultsStore{URL: "s3://team/evals", Endpoint: weed.Endpoint, CredentialsSecret: "team-s3"}
	create(t, ev)
	eventually(t, 30*time.Second, "the run to wait for its store's Secret", func() (bool, string) {
		got := getEvaluation(t, ns, "own")
		return got.Status.Phase == v1alpha1.PhasePending && got.Status.Reason == v1alpha1.ReasonSecretNotFound &&
			strings.Contains(got.Status.Message, "spec.resultsStore.credentialsSecret"), fmt.Sprintf("%s %s %s", got.Status.Phase, got.Status.Reason, got.Status.Message)
	})
	if err := k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-s3"},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": weed.AccessKey, "AWS_SECRET_ACCESS_KEY": weed.SecretKey}}); err != nil {
		t.Fatal(err)
	}
	got := waitPhase(t, ns, "own", v1alpha1.PhaseSucceeded, 60*time.Second)
	loc := got.Status.ResultsLocation
	if !strings.HasPrefix(loc, "s3://team/evals/"+ns+"/own/") {
		t.Fatalf("status.resultsLocation = %q, want it under the Evaluation's own store", loc)
	}
	res, err := objects.ReadResults(ctx, weed.Store(t, loc), loc)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	if err := res.Records(ctx, func(*results.Record) { count++ }); err != nil || count != n {
		t.Errorf("%d records in the Evaluation's store (%v), want %d", count, err, n)
	}
	var cms corev1.ConfigMapList
	if err := k8sClient.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		if c.Labels[cluster.LabelComponent] == cluster.ComponentShard && !cluster.InStore(c.Annotations) {
			t.Errorf("head %s does not say its records go to the store", c.Name)
		}
	}
	var events corev1.EventList
	if err := k8sClient.List(ctx, &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(got.Status)
	seen := string(status)
	for _, e := range events.Items {
		seen += e.Message
	}
	for _, c := range cms.Items {
		for _, v := range c.Data {
			seen += v
		}
	}
	if strings.Contains(seen, weed.SecretKey) {
		t.Error("the store's secret key is in status, an event or a ConfigMap")
	}
}
