package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestForgedResultsAreIgnored replays the forgery of issue 9 against a real API
// server and its RBAC: one Evaluation's runner cannot make objects for another
// (its Role allows no create), and records that someone else made with another
// Evaluation's labels and run never count: the run calls the model for every
// sample, and the Evaluation reports what it ignored.
func TestForgedResultsAreIgnored(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{})
	startManager(t, ns)
	startKubelet(t, ns)

	// The attacker: an Evaluation whose runner is compromised.
	attacker := testutil.MakeEvaluation("attacker", ns).InlineDataset("d", 2).OpenAIModel("small", url).Scorer(v1alpha1.ScorerExactMatch).Obj()
	create(t, attacker)
	waitPhase(t, ns, "attacker", v1alpha1.PhaseSucceeded, 60*time.Second)
	var job batchv1.JobList
	if err := k8sClient.List(ctx, &job, client.InNamespace(ns)); err != nil || len(job.Items) == 0 {
		t.Fatalf("the attacker's Jobs: %v", err)
	}
	runner := podClient(t, &job.Items[0])

	// Its runner tries to plant a victim's shard head before the victim exists,
	// under the name the run would have had when runs were a hash of the spec.
	victim := testutil.MakeEvaluation("victim", ns).InlineDataset("d", 10).OpenAIModel("small", url).Scorer(v1alpha1.ScorerExactMatch).Suspend(true).Obj()
	predicted := cluster.SpecHash(&victim.Spec)
	forgedHead := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.HeadName("victim", predicted, "small", 0),
			Labels: cluster.Labels("victim", predicted, cluster.ComponentShard)},
		Data: map[string]string{cluster.KeyDone: "0-9"},
	}
	if err := runner.Create(ctx, forgedHead); !apierrors.IsForbidden(err) {
		t.Fatalf("a runner created a ConfigMap: %v, want Forbidden", err)
	}
	var other corev1.ConfigMap
	if err := runner.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.ResultsName("victim")}, &other); !apierrors.IsForbidden(err) {
		t.Errorf("a runner read another Evaluation's ConfigMap: %v, want Forbidden", err)
	}

	// What the runner cannot do, someone with more rights could (a careless
	// user): a forged records chunk with the victim's labels and its run, under
	// the name of a slot its shard would use later.
	create(t, victim)
	var run string
	eventually(t, 30*time.Second, "the victim's run to be planned", func() (bool, string) {
		ev := getEvaluation(t, ns, "victim")
		run = ev.Status.Run
		return run != "" && ev.Status.Phase == v1alpha1.PhaseSuspended, string(ev.Status.Phase)
	})
	if run == predicted {
		t.Fatalf("the run %s is the spec's hash: guessable before the Evaluation existed", run)
	}
	forged := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.ChunkName(cluster.HeadName("victim", run, "small", 0), 5),
			Labels: cluster.Labels("victim", run, cluster.ComponentRecords)},
		BinaryData: map[string][]byte{cluster.KeyRecords: gzipLines(t,
			`{"i":0,"r":{"id":"0","model":"small","dataset":"d","output":"FORGED","scores":{"exact_match":1}}}`)},
	}
	create(t, forged)
	before := srv.Stats().Succeeded
	setSuspend(t, ns, "victim", false)
	got := waitPhase(t, ns, "victim", v1alpha1.PhaseSucceeded, 60*time.Second)

	if n := srv.Stats().Succeeded - before; n != 10 {
		t.Errorf("the victim's run made %d model calls, want 10 (none skipped for forged records)", n)
	}
	for _, r := range readResults(t, ns, "victim") {
		if r.Output == "FORGED" {
			t.Errorf("a forged record reached the results: %+v", r)
		}
	}
	if p := got.Status.Progress; p == nil || p.Completed != 10 {
		t.Errorf("progress %+v", p)
	}
	eventually(t, 10*time.Second, "an event naming the ignored object", func() (bool, string) {
		reasons := eventReasons(t, ns, "victim")
		return slices.Contains(reasons, v1alpha1.ReasonForeignObjectIgnored), strings.Join(reasons, ",")
	})
	// The forged object is left as it was: not adopted, not deleted.
	var after corev1.ConfigMap
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(forged), &after); err != nil || metav1.GetControllerOf(&after) != nil {
		t.Errorf("the forged ConfigMap was deleted or adopted: %v, %v", err, after.OwnerReferences)
	}
}

// TestNameConflict: a user's own ConfigMap named NAME-results, made before the
// Evaluation NAME, is never overwritten, adopted or deleted; the Evaluation waits
// with a NameConflict condition, spends nothing, and runs once the name is free.
func TestNameConflict(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{})
	startManager(t, ns)
	startKubelet(t, ns)

	mine := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.ResultsName("report")},
		Data:       map[string]string{"notes.md": "my own notes"},
	}
	create(t, mine)
	create(t, testutil.MakeEvaluation("report", ns).InlineDataset("d", 3).OpenAIModel("small", url).Scorer(v1alpha1.ScorerExactMatch).Obj())

	var ev *v1alpha1.Evaluation
	eventually(t, 20*time.Second, "a NameConflict", func() (bool, string) {
		ev = getEvaluation(t, ns, "report")
		c := meta.FindStatusCondition(ev.Status.Conditions, v1alpha1.ConditionNameConflict)
		return c != nil && c.Status == metav1.ConditionTrue, ev.Status.Message
	})
	if ev.Status.Phase != v1alpha1.PhasePending || ev.Status.Reason != v1alpha1.ReasonNameConflict ||
		!strings.Contains(ev.Status.Message, "ConfigMap "+ns+"/report-results") || !strings.Contains(ev.Status.Message, "has no controller") {
		t.Errorf("phase %s reason %q message %q", ev.Status.Phase, ev.Status.Reason, ev.Status.Message)
	}
	time.Sleep(time.Second) // several passes
	var jobs batchv1.JobList
	if err := k8sClient.List(ctx, &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("%d Jobs started despite the conflict (%v)", len(jobs.Items), err)
	}
	if n := srv.Stats().Succeeded; n != 0 {
		t.Errorf("%d model calls despite the conflict", n)
	}
	var have corev1.ConfigMap
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(mine), &have); err != nil {
		t.Fatal(err)
	}
	if len(have.OwnerReferences) != 0 || have.Data["notes.md"] != "my own notes" || len(have.Data) != 1 || len(have.BinaryData) != 0 || len(have.Labels) != 0 {
		t.Errorf("the user's ConfigMap was changed: %+v", have)
	}

	// The user moves their notes away: the run goes on, by itself.
	if err := k8sClient.Delete(ctx, &have); err != nil {
		t.Fatal(err)
	}
	ev = waitPhase(t, ns, "report", v1alpha1.PhaseSucceeded, 60*time.Second)
	if c := meta.FindStatusCondition(ev.Status.Conditions, v1alpha1.ConditionNameConflict); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("NameConflict after the name was freed: %+v", c)
	}
	if recs := readResults(t, ns, "report"); len(recs) != 3 {
		t.Errorf("%d records, want 3", len(recs))
	}
}

func gzipLines(t *testing.T, lines ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	for _, l := range lines {
		if _, err := w.Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
