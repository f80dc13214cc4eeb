package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/test/fakellm"
)

func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// checkRecords asserts the results hold every sample of every model exactly once.
func checkRecords(t *testing.T, ns, name string, models []string, ids []string) []results.Record {
	t.Helper()
	recs := readResults(t, ns, name)
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.Model+"/"+r.ID]++
	}
	for _, m := range models {
		for _, id := range ids {
			if n := seen[m+"/"+id]; n != 1 {
				t.Errorf("record %s/%s appears %d times, want once", m, id, n)
			}
		}
	}
	if len(recs) != len(models)*len(ids) {
		t.Errorf("%d records, want %d", len(recs), len(models)*len(ids))
	}
	return recs
}

func sampleIDs(dataset string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", dataset, i)
	}
	return ids
}

// TestProgressIsVisibleMidRun: while shards run, status.progress and the live
// score move, before the Evaluation ends.
func TestProgressIsVisibleMidRun(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{Latency: 60 * time.Millisecond})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("slow", ns).InlineDataset("d", 40).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(20).Parallelism(2).Concurrency(1).Obj())

	eventually(t, 30*time.Second, "progress between 0 and 40 while Running", func() (bool, string) {
		ev := getEvaluation(t, ns, "slow")
		p := ev.Status.Progress
		ok := ev.Status.Phase == v1alpha1.PhaseRunning && p != nil && p.Completed > 0 && p.Completed < 40 &&
			p.Text == fmt.Sprintf("%d/40", p.Completed) && ev.Status.Score == "1.0000" && ev.Status.Shards.Active > 0
		return ok, fmt.Sprintf("phase %s progress %+v score %q shards %+v", ev.Status.Phase, p, ev.Status.Score, ev.Status.Shards)
	})
	waitPhase(t, ns, "slow", v1alpha1.PhaseSucceeded, 60*time.Second)
}

// TestKilledShardResumes: a runner pod killed mid-shard is replaced, and the
// replacement resumes from the shard's ConfigMaps: exact counts, no duplicates,
// and only samples in flight are called again.
func TestKilledShardResumes(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 30 * time.Millisecond})
	startManager(t, ns)
	k := startKubelet(t, ns)
	const n, concurrency = 60, 3
	create(t, testutil.MakeEvaluation("kill", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(30).Parallelism(2).Concurrency(concurrency).Obj())

	// Kill shard 1 once it has checkpointed some samples.
	eventually(t, 30*time.Second, "shard m/1 to checkpoint samples", func() (bool, string) {
		ev := getEvaluation(t, ns, "kill")
		head := headProgress(t, ns, cluster.HeadName("kill", ev.Status.Run, "m", 1))
		return head.Done >= 5 && head.Done < 25, fmt.Sprintf("head %+v", head)
	})
	if !k.kill("m", 1) {
		t.Fatal("shard m/1 was not running")
	}
	ev := waitPhase(t, ns, "kill", v1alpha1.PhaseSucceeded, 60*time.Second)
	if k.attempts("m", 1) < 2 {
		t.Errorf("shard m/1 ran %d times, want a replacement after the kill", k.attempts("m", 1))
	}
	if ev.Status.Progress.Completed != n || ev.Status.Progress.Errored != 0 {
		t.Errorf("progress %+v, want exactly %d done", ev.Status.Progress, n)
	}
	checkRecords(t, ns, "kill", []string{"m"}, sampleIDs("d", n))
	// Unflushed and in-flight samples may be called again, no more.
	if calls := srv.Stats().Requests; calls > n+concurrency+int64(float64(testFlushEvery)/float64(30*time.Millisecond))*concurrency {
		t.Errorf("%d model calls for %d samples: finished samples were called again", calls, n)
	}
}

// TestWorkersTakeTheirShardsInTurn: a model's pods are its workers, not its
// shards: 12 shards 3 at once make 3 pods, each taking its 4 shards in turn.
// A worker killed in its second shard is replaced by one pod that passes
// over the shard it finished, resumes the one it was in and goes on: every
// sample once, nothing finished called again, and each shard's attempts say
// the kill was not its failure.
func TestWorkersTakeTheirShardsInTurn(t *testing.T) {
	ns := newNamespace(t)
	const latency = 100 * time.Millisecond
	srv, url := fakeLLM(t, fakellm.Config{Latency: latency})
	startManager(t, ns)
	k := startKubelet(t, ns)
	const n, size, workers, concurrency = 120, 10, 3, 1
	create(t, testutil.MakeEvaluation("turns", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(size).Parallelism(workers).Concurrency(concurrency).Obj())

	// Worker 1 runs shards 1, 4, 7 and 10: kill it inside shard 4.
	var run string
	eventually(t, 30*time.Second, "worker 1 to checkpoint samples of its second shard", func() (bool, string) {
		ev := getEvaluation(t, ns, "turns")
		run = ev.Status.Run
		first := headProgress(t, ns, cluster.HeadName("turns", run, "m", 1))
		second := headProgress(t, ns, cluster.HeadName("turns", run, "m", 4))
		return first.State == cluster.StateSucceeded && second.Done >= 2 && second.Done < size,
			fmt.Sprintf("shard 1 %+v, shard 4 %+v", first, second)
	})
	if !k.kill("m", 1) {
		t.Fatal("worker m/1 was not running")
	}
	ev := waitPhase(t, ns, "turns", v1alpha1.PhaseSucceeded, 60*time.Second)
	for w, want := range []int{1, 2, 1} {
		if got := k.attempts("m", w); got != want {
			t.Errorf("worker %d ran %d pods, want %d", w, got, want)
		}
	}
	if got := k.attempts("m", workers); got != 0 {
		t.Errorf("a pod of index %d ran: more pods than workers", workers)
	}
	if s := ev.Status.Shards; s == nil || s.Total != n/size || s.Succeeded != n/size {
		t.Errorf("shards %+v, want %d succeeded", ev.Status.Shards, n/size)
	}
	if ev.Status.Progress.Completed != n || ev.Status.Progress.Errored != 0 {
		t.Errorf("progress %+v, want exactly %d done", ev.Status.Progress, n)
	}
	checkRecords(t, ns, "turns", []string{"m"}, sampleIDs("d", n))
	for i := range n / size {
		if p := headProgress(t, ns, cluster.HeadName("turns", run, "m", i)); p.Attempts != 1 {
			t.Errorf("shard %d: %d attempts, want 1 (a kill is not a failure)", i, p.Attempts)
		}
	}
	// Unflushed and in-flight samples of shard 4 may be called again, no more.
	if calls := srv.Stats().Requests; calls > n+concurrency+int64(testFlushEvery/latency+1)*concurrency {
		t.Errorf("%d model calls for %d samples: finished samples were called again", calls, n)
	}
}

func headProgress(t *testing.T, ns, name string) cluster.ShardProgress {
	var cm corev1.ConfigMap
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
		return cluster.ShardProgress{}
	}
	p, _ := cluster.ParseProgress(cm.Annotations)
	return p
}

// TestBudgetSharesNeverExceedTheLimit: a model's rate limit is the limit of the
// whole Evaluation; as its shards start and finish, the shares the controller
// grants never sum above it, and a shard that started beside finished ones is
// raised as their calls leave the server's window (their shares shrink over
// it). (It asked for more than an equal third: when the first three shards
// ended together, as under the race detector, the last ones never reached it
// within the run, though they were raised all along.)
func TestBudgetSharesNeverExceedTheLimit(t *testing.T) {
	ns := newNamespace(t)
	// The server counts arrivals in 3-second windows, a finer check than a minute
	// for a run of seconds.
	const window = 3 * time.Second
	srv, url := fakeLLM(t, fakellm.Config{Latency: 10 * time.Millisecond, Window: window})
	startManager(t, ns)
	startKubelet(t, ns)
	const limit = 1200
	create(t, testutil.MakeEvaluation("budget", ns).InlineDataset("d", 90).OpenAIModel("m", url).RateLimit(limit).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(20).Parallelism(3).Concurrency(4).Obj())

	var mu sync.Mutex
	maxShards, maxSum := 0, int64(0)
	first, most := map[string]int64{}, map[string]int64{} // each shard's first share, and its largest
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var cm corev1.ConfigMap
			if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cluster.BudgetName("budget")}, &cm); err != nil {
				continue
			}
			b, err := cluster.ParseBudget(cm.Annotations)
			if err != nil || b.Models["m"] == nil {
				continue
			}
			var sum int64
			for _, g := range b.Models["m"].Grants {
				// What a shard may use: its share, or its previous one until it acknowledges.
				sum += g.Use().RequestsPerMinute
			}
			mu.Lock()
			maxShards = max(maxShards, len(b.Models["m"].Grants))
			maxSum = max(maxSum, sum)
			for k, g := range b.Models["m"].Grants {
				if r := g.Share.RequestsPerMinute; r > 0 {
					if _, ok := first[k]; !ok {
						first[k] = r
					}
					most[k] = max(most[k], r)
				}
			}
			mu.Unlock()
		}
	}()
	waitPhase(t, ns, "budget", v1alpha1.PhaseSucceeded, 90*time.Second)
	close(stop)
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if maxSum > limit {
		t.Errorf("grants summed to %d, over the limit %d", maxSum, limit)
	}
	if maxShards < 2 {
		t.Errorf("at most %d shard(s) held a grant at once; the budget was never divided", maxShards)
	}
	raised := false
	for k, r := range first {
		raised = raised || most[k] > r
	}
	if !raised {
		t.Errorf("no shard's share ever grew (first %v, largest %v): what finished shards left was never given out", first, most)
	}
	// Summed over shards, calls arrive at the limit's pace: in any 3 seconds,
	// 3 seconds of budget plus one paced call per shard. Undivided shares would
	// triple it.
	bound := int(limit*window/time.Minute) + 3*2
	if st := srv.Stats(); st.MaxRequestsInWindow > bound {
		t.Errorf("the server saw %d requests within %v, want at most %d", st.MaxRequestsInWindow, window, bound)
	}
}

// TestMissingSecretThenCreated: an Evaluation whose API key Secret is missing
// waits, Pending with the reason; once the Secret exists it runs.
func TestMissingSecretThenCreated(t *testing.T) {
	ns := newNamespace(t)
	const key = "sk-test-abcdef123456"
	srv, url := fakeLLM(t, fakellm.Config{APIKey: key})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("keyed", ns).InlineDataset("d", 5).OpenAIModel("m", url).APIKeySecret("llm", "api-key").
		Scorer(v1alpha1.ScorerExactMatch).Obj())

	eventually(t, 20*time.Second, "Pending because of the Secret", func() (bool, string) {
		ev := getEvaluation(t, ns, "keyed")
		c := findCondition(ev, v1alpha1.ConditionProgressing)
		ok := ev.Status.Phase == v1alpha1.PhasePending && c != nil && c.Reason == v1alpha1.ReasonSecretNotFound &&
			strings.Contains(c.Message, "Secret llm") && c.ObservedGeneration == ev.Generation
		return ok, fmt.Sprintf("phase %s condition %+v", ev.Status.Phase, c)
	})
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("%d Jobs created before the Secret existed", len(jobs.Items))
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"}, StringData: map[string]string{"api-key": key}})
	ev := waitPhase(t, ns, "keyed", v1alpha1.PhaseSucceeded, 60*time.Second)
	if ev.Status.Results[0].Metrics["exact_match"] != "1.0000" || srv.Stats().Rejected != 0 {
		t.Errorf("results %+v, %d calls refused for a bad key", ev.Status.Results, srv.Stats().Rejected)
	}
	// The key reached the pod only as a secretKeyRef, never in the spec.
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(jobs.Items)
	if strings.Contains(string(b), key) {
		t.Error("the API key appears in a Job")
	}
}

func findCondition(ev *v1alpha1.Evaluation, t string) *metav1.Condition {
	for i := range ev.Status.Conditions {
		if ev.Status.Conditions[i].Type == t {
			return &ev.Status.Conditions[i]
		}
	}
	return nil
}

// TestSuspendAndResume: suspend stops a run (Jobs suspended, phase Suspended,
// finished samples kept); resuming completes it with every sample once.
func TestSuspendAndResume(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{Latency: 40 * time.Millisecond})
	startManager(t, ns)
	startKubelet(t, ns)
	const n = 40
	create(t, testutil.MakeEvaluation("pause", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(20).Parallelism(2).Concurrency(2).Obj())
	eventually(t, 30*time.Second, "some progress", func() (bool, string) {
		ev := getEvaluation(t, ns, "pause")
		return ev.Status.Progress != nil && ev.Status.Progress.Completed >= 4, fmt.Sprintf("%+v", ev.Status.Progress)
	})
	setSuspend(t, ns, "pause", true)
	ev := waitPhase(t, ns, "pause", v1alpha1.PhaseSuspended, 20*time.Second)
	if c := findCondition(ev, v1alpha1.ConditionSuspended); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Suspended condition = %+v", c)
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if !ptr.Deref(j.Spec.Suspend, false) {
			t.Errorf("Job %s not suspended", j.Name)
		}
	}
	setSuspend(t, ns, "pause", false)
	ev = waitPhase(t, ns, "pause", v1alpha1.PhaseSucceeded, 60*time.Second)
	if ev.Status.Progress.Completed != n {
		t.Errorf("progress %+v after resuming", ev.Status.Progress)
	}
	checkRecords(t, ns, "pause", []string{"m"}, sampleIDs("d", n))
}

func setSuspend(t *testing.T, ns, name string, suspend bool) {
	t.Helper()
	ev := getEvaluation(t, ns, name)
	patch := client.MergeFrom(ev.DeepCopy())
	ev.Spec.Suspend = ptr.To(suspend)
	if err := k8sClient.Patch(context.Background(), ev, patch); err != nil {
		t.Fatal(err)
	}
}

// TestEverythingIsOwned: everything the controller makes is owned by the
// Evaluation (so deleting it removes them), and after deletion nothing is made again.
func TestEverythingIsOwned(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("owned", ns).InlineDataset("d", 10).OpenAIModel("m", url).RateLimit(6000).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Obj())
	ev := waitPhase(t, ns, "owned", v1alpha1.PhaseSucceeded, 60*time.Second)

	owned := func() []client.Object {
		var out []client.Object
		var jobs batchv1.JobList
		var cms corev1.ConfigMapList
		var sas corev1.ServiceAccountList
		var roles rbacv1.RoleList
		var rbs rbacv1.RoleBindingList
		for _, l := range []client.ObjectList{&jobs, &cms, &sas, &roles, &rbs} {
			if err := k8sClient.List(context.Background(), l, client.InNamespace(ns), client.MatchingLabels{cluster.LabelManagedBy: cluster.ManagedBy}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range jobs.Items {
			out = append(out, &jobs.Items[i])
		}
		for i := range cms.Items {
			out = append(out, &cms.Items[i])
		}
		for i := range sas.Items {
			out = append(out, &sas.Items[i])
		}
		for i := range roles.Items {
			out = append(out, &roles.Items[i])
		}
		for i := range rbs.Items {
			out = append(out, &rbs.Items[i])
		}
		return out
	}
	children := owned()
	kinds := map[string]bool{}
	for _, o := range children {
		kinds[fmt.Sprintf("%T", o)] = true
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != ev.UID || !ptr.Deref(refs[0].Controller, false) {
			t.Errorf("%T %s owner references %+v, want the Evaluation as controller", o, o.GetName(), refs)
		}
	}
	if len(kinds) != 5 {
		t.Errorf("children of kinds %v, want Jobs, ConfigMaps, ServiceAccounts, Roles and RoleBindings", kinds)
	}
	if err := k8sClient.Delete(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	// A reconcile already under way when the Evaluation went may still write a
	// child (owned by the gone UID: a real garbage collector removes it); let it
	// end first.
	time.Sleep(time.Second)
	// The test API server runs no garbage collector: remove the children as it
	// would, then check the controller makes nothing again.
	for _, o := range owned() {
		_ = k8sClient.Delete(context.Background(), o, client.PropagationPolicy(metav1.DeletePropagationBackground))
	}
	time.Sleep(time.Second)
	if left := owned(); len(left) != 0 {
		t.Errorf("%d objects made again after the Evaluation was deleted", len(left))
	}
}

// TestManagerRestartMidRun: a manager that restarts mid-run picks up where the
// old one was: no duplicate Jobs, exact results.
func TestManagerRestartMidRun(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{Latency: 30 * time.Millisecond})
	m := startManager(t, ns)
	startKubelet(t, ns)
	const n = 40
	create(t, testutil.MakeEvaluation("restart", ns).InlineDataset("d", n).OpenAIModel("a", url).OpenAIModel("b", url).RateLimit(3000).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(10).Parallelism(2).Concurrency(2).Obj())
	eventually(t, 30*time.Second, "the run to be under way", func() (bool, string) {
		ev := getEvaluation(t, ns, "restart")
		return ev.Status.Progress != nil && ev.Status.Progress.Completed >= 10, fmt.Sprintf("%+v", ev.Status.Progress)
	})
	m.stop()
	time.Sleep(500 * time.Millisecond)
	startManager(t, ns)
	ev := waitPhase(t, ns, "restart", v1alpha1.PhaseSucceeded, 60*time.Second)
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 2 {
		t.Errorf("%d Jobs after a manager restart, want 2", len(jobs.Items))
	}
	if ev.Status.Progress.Completed != 2*n {
		t.Errorf("progress %+v", ev.Status.Progress)
	}
	checkRecords(t, ns, "restart", []string{"a", "b"}, sampleIDs("d", n))
}

// TestResultsLargerThanAConfigMap: records that do not fit one ConfigMap are
// sealed into chunks, none lost, and NAME-results lists them.
func TestResultsLargerThanAConfigMap(t *testing.T) {
	ns := newNamespace(t)
	// Long, poorly compressible answers: 150 samples × 24 KiB of hex ≈ 3.6 MB.
	_, url := fakeLLM(t, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		prompt := req.Messages[len(req.Messages)-1].Content
		var b strings.Builder
		seed := sha256.Sum256([]byte(prompt))
		for b.Len() < 24<<10 {
			seed = sha256.Sum256(seed[:])
			b.WriteString(hex.EncodeToString(seed[:]))
		}
		return fakellm.Reply{Text: b.String()}
	}})
	startManager(t, ns)
	startKubelet(t, ns)
	const n = 150
	create(t, testutil.MakeEvaluation("big", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerContains).ShardSize(75).Parallelism(2).Concurrency(8).Obj())
	ev := waitPhase(t, ns, "big", v1alpha1.PhaseSucceeded, 90*time.Second)
	if ev.Status.Progress.Completed != n {
		t.Errorf("progress %+v", ev.Status.Progress)
	}
	var cm corev1.ConfigMap
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "big-results"}, &cm); err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(cm.Data[cluster.ResultsKeyChunks])
	if len(names) < 3 {
		t.Fatalf("results list %d ConfigMaps, want the records spread over several", len(names))
	}
	seen := map[int]bool{}
	for _, name := range names {
		var chunk corev1.ConfigMap
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &chunk); err != nil {
			t.Fatal(err)
		}
		if size := len(chunk.BinaryData[cluster.KeyRecords]) + len(chunk.BinaryData[cluster.KeyPending]); size > 768<<10 {
			t.Errorf("%s holds %d bytes: too close to the object limit", name, size)
		}
		lines, err := cluster.ReadRecords(&chunk)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			var r results.Record
			if err := json.Unmarshal(l.Record, &r); err != nil || len(r.Output) < 24<<10 {
				t.Errorf("record %d: output of %d bytes, error %v", l.Index, len(r.Output), err)
			}
			seen[l.Index] = true
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct samples in the chunks, want %d", len(seen), n)
	}
	checkFetchedResults(t, ns, "big", n)
}

// TestFinishedStaysFinished: a Secret deleted after the run finished does not
// send the Evaluation back to Pending.
func TestFinishedStaysFinished(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	startManager(t, ns)
	startKubelet(t, ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"}, StringData: map[string]string{"api-key": "k"}}
	create(t, secret)
	create(t, testutil.MakeEvaluation("done", ns).InlineDataset("d", 4).OpenAIModel("m", url).APIKeySecret("llm", "api-key").
		Scorer(v1alpha1.ScorerExactMatch).Obj())
	waitPhase(t, ns, "done", v1alpha1.PhaseSucceeded, 60*time.Second)
	if err := k8sClient.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	// Any change makes the controller look again.
	ev := getEvaluation(t, ns, "done")
	patch := client.MergeFrom(ev.DeepCopy())
	ev.Annotations = map[string]string{"touched": "yes"}
	if err := k8sClient.Patch(context.Background(), ev, patch); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if got := getEvaluation(t, ns, "done"); got.Status.Phase != v1alpha1.PhaseSucceeded {
		t.Errorf("phase %s (%s) after the Secret was deleted, want Succeeded", got.Status.Phase, got.Status.Message)
	}
}

// TestFailedShardFailsTheEvaluation: a shard whose pods keep failing exhausts its
// retries (the pod after the last one allowed finds them used up); the
// Evaluation fails with a message naming it and why its last pod failed, and
// keeps the results of the other shards.
func TestFailedShardFailsTheEvaluation(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	startManager(t, ns)
	k := startKubelet(t, ns)
	k.crash = map[string]bool{"m/1": true}
	create(t, testutil.MakeEvaluation("broken", ns).InlineDataset("d", 30).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(10).Parallelism(3).Obj())
	ev := waitPhase(t, ns, "broken", v1alpha1.PhaseFailed, 60*time.Second)
	if !strings.Contains(ev.Status.Message, "m/1 (d samples 10-19)") {
		t.Errorf("message %q does not name the failed shard", ev.Status.Message)
	}
	// The reason and the message say why its last pod failed (its error, as the
	// termination message), not "see the logs".
	if c := findCondition(ev, v1alpha1.ConditionFailed); c == nil || c.Reason != v1alpha1.ReasonRunnerFailed ||
		!strings.Contains(c.Message, "failed (Error, exit code 1): the pod crashed (attempt 4)") || ev.Status.Reason != c.Reason {
		t.Errorf("Failed condition = %+v, status.reason %q", c, ev.Status.Reason)
	}
	if got := k.attempts("m", 1); got != 5 {
		t.Errorf("the failing shard's worker ran %d pods, want 5 (3 retries, then one that found them used up)", got)
	}
	if s := ev.Status.Shards; s == nil || s.Failed != 1 || s.Succeeded != 2 {
		t.Errorf("shards %+v, want 1 failed and 2 succeeded", ev.Status.Shards)
	}
	// The other shards' 20 samples are kept, in status and in the results.
	if r := ev.Status.Results; len(r) != 1 || r[0].Completed != 20 || r[0].Total != 30 {
		t.Errorf("results %+v, want 20 of 30 completed", r)
	}
	if recs := readResults(t, ns, "broken"); len(recs) != 20 {
		t.Errorf("%d records kept, want 20", len(recs))
	}
}
