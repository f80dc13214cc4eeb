package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestURLDatasetIsPlanned: url datasets, with and without sha256, are counted by
// the planner Job (which crashed on a nil HTTP client) and run to the end.
func TestURLDatasetIsPlanned(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	data := fakellm.ArithmeticJSONL("web", 12)
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/data.jsonl" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, data)
	}))
	t.Cleanup(files.Close)
	startManager(t, ns)
	startKubelet(t, ns)
	sum := sha256.Sum256([]byte(data))
	create(t, testutil.MakeEvaluation("web", ns).
		Dataset(v1alpha1.Dataset{Name: "web", Source: v1alpha1.DatasetSource{URL: files.URL + "/data.jsonl"}}).
		Dataset(v1alpha1.Dataset{Name: "checked", Source: v1alpha1.DatasetSource{URL: files.URL + "/data.jsonl", SHA256: hex.EncodeToString(sum[:])}}).
		OpenAIModel("m", url).Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Obj())
	ev := waitPhase(t, ns, "web", v1alpha1.PhaseSucceeded, 60*time.Second)
	if p := ev.Status.Progress; p.Completed != 24 || p.Errored != 0 {
		t.Errorf("progress %+v, want 24 done", p)
	}
	if ev.Status.Score != "1.0000" {
		t.Errorf("score %q", ev.Status.Score)
	}
}

// TestURLDataChangedMidRun: a url dataset without sha256 whose content changes
// after the run was planned (here, after the planner and the first pod read
// it: the pod that replaces it after its first shard reads new data) fails
// the run, loudly, instead of scoring two versions of the data: it used to
// end Succeeded with samples 1-20 of the old data and 21-40 of the new.
func TestURLDataChangedMidRun(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{Latency: 50 * time.Millisecond})
	var mu sync.Mutex
	reads := 0
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reads++
		n := reads
		mu.Unlock()
		prefix := "old"
		if n > 2 {
			prefix = "new"
		}
		fmt.Fprint(w, fakellm.ArithmeticJSONL(prefix, 40))
	}))
	t.Cleanup(files.Close)
	startManager(t, ns)
	k := startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("moving", ns).
		Dataset(v1alpha1.Dataset{Name: "web", Source: v1alpha1.DatasetSource{URL: files.URL + "/data.jsonl"}}).
		OpenAIModel("m", url).Scorer(v1alpha1.ScorerExactMatch).ShardSize(20).Parallelism(1).Concurrency(2).Obj())
	// One worker runs both shards; it is killed in its second.
	eventually(t, 30*time.Second, "the worker to begin shard m/1", func() (bool, string) {
		ev := getEvaluation(t, ns, "moving")
		head := headProgress(t, ns, cluster.HeadName("moving", ev.Status.Run, "m", 1))
		return head.Attempts == 1, fmt.Sprintf("head %+v", head)
	})
	if !k.kill("m", 0) {
		t.Fatal("the worker was not running")
	}
	ev := waitPhase(t, ns, "moving", v1alpha1.PhaseFailed, 60*time.Second)
	if !strings.Contains(ev.Status.Message, "spec.datasets[0].source: the data at "+files.URL+"/data.jsonl changed since the run was planned") {
		t.Errorf("message %q: want it to say the data changed", ev.Status.Message)
	}
}

// TestConfigMapEditedMidRun: a run reads one version of a ConfigMap dataset.
// Replacing the data while shards run changes nothing in the run: every record
// is of the data it was planned with.
func TestConfigMapEditedMidRun(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{Latency: 40 * time.Millisecond})
	startManager(t, ns)
	startKubelet(t, ns)
	const n = 50
	qa := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "qa"}, Data: map[string]string{"data.jsonl": fakellm.ArithmeticJSONL("old", n)}}
	create(t, qa)
	create(t, testutil.MakeEvaluation("edited", ns).ConfigMapDataset("d", "qa", "data.jsonl").OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(10).Parallelism(1).Concurrency(2).Obj())
	eventually(t, 30*time.Second, "the first shard to be under way", func() (bool, string) {
		ev := getEvaluation(t, ns, "edited")
		return ev.Status.Progress != nil && ev.Status.Progress.Completed >= 3, fmt.Sprintf("%+v", ev.Status.Progress)
	})
	qa.Data["data.jsonl"] = fakellm.ArithmeticJSONL("new", 120)
	if err := k8sClient.Update(context.Background(), qa); err != nil {
		t.Fatal(err)
	}
	ev := waitPhase(t, ns, "edited", v1alpha1.PhaseSucceeded, 90*time.Second)
	if p := ev.Status.Progress; p.Completed != n || p.Total != n || p.Errored != 0 {
		t.Errorf("progress %+v, want the %d samples it was planned with", p, n)
	}
	checkRecords(t, ns, "edited", []string{"m"}, sampleIDs("old", n))
}

// TestTemplateErrorFailsAtPlanning: a template the runner pods would refuse (an
// agent command naming .Expected, which agent templates lack) fails the run while
// it is planned, naming the field, before any runner Job exists: with data the
// controller reads itself, and with data only the planner Job reads.
func TestTemplateErrorFailsAtPlanning(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, fakellm.ArithmeticJSONL("web", 3))
	}))
	t.Cleanup(files.Close)
	startManager(t, ns)
	startKubelet(t, ns)
	agent := v1alpha1.Model{Name: "bot", Provider: v1alpha1.ProviderAgent, Agent: &v1alpha1.Agent{
		Image: "busybox:1.35.0", Command: []string{"echo", "{{ .Expected }}"},
	}}
	create(t, testutil.MakeEvaluation("inline", ns).InlineDataset("d", 4).OpenAIModel("m", url).Model(agent).
		Scorer(v1alpha1.ScorerExactMatch).Obj())
	create(t, testutil.MakeEvaluation("remote", ns).Dataset(v1alpha1.Dataset{Name: "web", Source: v1alpha1.DatasetSource{URL: files.URL + "/d.jsonl"}}).
		OpenAIModel("m", url).Model(agent).Scorer(v1alpha1.ScorerExactMatch).Obj())
	for _, name := range []string{"inline", "remote"} {
		ev := waitPhase(t, ns, name, v1alpha1.PhaseFailed, 30*time.Second)
		c := findCondition(ev, v1alpha1.ConditionFailed)
		if c == nil || c.Reason != v1alpha1.ReasonPlanningFailed || c.ObservedGeneration != ev.Generation {
			t.Errorf("%s: Failed condition %+v", name, c)
		}
		if !strings.Contains(ev.Status.Message, "spec.models[1].agent") || !strings.Contains(ev.Status.Message, "Expected") {
			t.Errorf("%s: message %q does not name the field", name, ev.Status.Message)
		}
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns), client.MatchingLabels{cluster.LabelComponent: cluster.ComponentRunner}); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Errorf("%d runner Jobs were created for runs that cannot work", len(jobs.Items))
	}
}
