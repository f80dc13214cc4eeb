package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cli"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestHappyPath: two models on a dataset split into three shards each; both
// Jobs run, every sample is scored once, and the results reach status and
// NAME-results.
func TestHappyPath(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 5 * time.Millisecond})
	startManager(t, ns)
	startKubelet(t, ns)

	ev := testutil.MakeEvaluation("arith", ns).
		InlineDataset("sums", 30).
		OpenAIModel("small", url).
		AnthropicModel("claude", url[:len(url)-len("/v1")]).
		Scorer(v1alpha1.ScorerExactMatch).
		ShardSize(10).Parallelism(2).Concurrency(4).
		Obj()
	if err := k8sClient.Create(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	got := waitPhase(t, ns, "arith", v1alpha1.PhaseSucceeded, 60*time.Second)

	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 2 {
		t.Fatalf("%d Jobs, want 2 (one per model)", len(jobs.Items))
	}
	for _, j := range jobs.Items {
		// 3 shards, 2 at once: 2 workers, one of which runs 2 shards.
		if *j.Spec.Completions != 2 || *j.Spec.CompletionMode != batchv1.IndexedCompletion {
			t.Errorf("Job %s: completions %d mode %s, want 2 Indexed (workers)", j.Name, *j.Spec.Completions, *j.Spec.CompletionMode)
		}
	}
	if p := got.Status.Progress; p == nil || p.Completed != 60 || p.Total != 60 || p.Errored != 0 || p.Text != "60/60" {
		t.Errorf("progress = %+v, want 60/60", got.Status.Progress)
	}
	if s := got.Status.Shards; s == nil || s.Total != 6 || s.Succeeded != 6 {
		t.Errorf("shards = %+v, want 6 succeeded", got.Status.Shards)
	}
	if len(got.Status.Results) != 2 || got.Status.Results[0].Metrics["exact_match"] != "1.0000" || got.Status.Score != "1.0000" {
		t.Errorf("results = %+v score %q", got.Status.Results, got.Status.Score)
	}
	if n := srv.Stats().Succeeded; n != 60 {
		t.Errorf("the server answered %d calls, want 60", n)
	}
	recs := readResults(t, ns, "arith")
	if len(recs) != 60 {
		t.Fatalf("%d records in arith-results, want 60", len(recs))
	}
	seen := map[string]bool{}
	for _, r := range recs {
		k := r.Model + "/" + r.ID
		if seen[k] {
			t.Errorf("record %s twice", k)
		}
		seen[k] = true
	}
	checkFetchedResults(t, ns, "arith", 60)
}

// checkFetchedResults runs `proctor results` and checks it writes every record
// once, model by model in spec order and sample by sample, and the summary.
func checkFetchedResults(t *testing.T, ns, name string, want int) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("KUBECONFIG", writeKubeconfig(t, dir))
	out := filepath.Join(dir, "out")
	if code := cli.Execute([]string{"results", name, "-n", ns, "-o", out}); code != 0 {
		t.Fatalf("proctor results exited %d", code)
	}
	b, err := os.ReadFile(filepath.Join(out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) != want {
		t.Fatalf("proctor results wrote %d records, want %d", len(lines), want)
	}
	ev := getEvaluation(t, ns, name)
	pos := map[string]int{}
	for i, m := range ev.Spec.Models {
		pos[m.Name] = i
	}
	prev := struct{ model, idx int }{-1, -1}
	for _, l := range lines {
		var rec results.Record
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatal(err)
		}
		var idx int
		if _, err := fmt.Sscanf(rec.ID[strings.LastIndex(rec.ID, "-")+1:], "%d", &idx); err != nil {
			t.Fatalf("record id %q: %v", rec.ID, err)
		}
		cur := struct{ model, idx int }{pos[rec.Model], idx}
		if cur.model < prev.model || (cur.model == prev.model && cur.idx <= prev.idx) {
			t.Fatalf("record %s/%s out of order after %+v", rec.Model, rec.ID, prev)
		}
		prev = cur
	}
	if s, err := os.ReadFile(filepath.Join(out, "summary.json")); err != nil || !bytes.Contains(s, []byte(`"results"`)) {
		t.Errorf("summary.json: %s, %v", s, err)
	}
}

// readResults reads the records of NAME-results (embedded, or from the chunks it lists).
func readResults(t testing.TB, ns, name string) []results.Record {
	t.Helper()
	var cm corev1.ConfigMap
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cluster.ResultsName(name)}, &cm); err != nil {
		t.Fatal(err)
	}
	var out []results.Record
	if gz := cm.BinaryData["results.jsonl.gz"]; len(gz) > 0 {
		r, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var rec results.Record
			if err := json.Unmarshal(l, &rec); err != nil {
				t.Fatal(err)
			}
			out = append(out, rec)
		}
		return out
	}
	if loc := cm.Data[cluster.ResultsKeyLocation]; loc != "" && resultsStore != nil {
		res, err := objects.ReadResults(context.Background(), resultsStore.Store(t, loc), loc)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Records(context.Background(), func(r *results.Record) { out = append(out, *r) }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Fatalf("results ConfigMap has no embedded records: %v", cm.Data)
	return nil
}

// resultsStore, while a test's manager has a results store, is where
// readResults reads the records NAME-results names.
var resultsStore *testutil.Seaweed
