package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/shard"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// BenchmarkEtcdWithResultsStore: with a results store, a run of 200,000
// samples (fake server, no latency) leaves at most 1 MiB more in etcd than
// a run of 100 does: its records are in the store, etcd keeps progress.
// Measured as the objects each run leaves in its namespace (their JSON, as
// the API server serves them: the Evaluation, ConfigMaps, Secrets, Jobs,
// pods, events, permissions), each run in a namespace of its own, with
// shards as the controller chooses them; what passed through etcd
// meanwhile (its database's growth before compaction: heartbeats, presigned
// URLs) is reported beside it. Not met yet: records leave nothing, but a
// shard leaves its pod (about 6 KiB) and its head (1.6 KiB), and a 200,000
// sample run has 256 of them (issue 30 bounds the objects a run makes).
func BenchmarkEtcdWithResultsStore(b *testing.B) {
	weed := testutil.StartSeaweed(b)
	store := weed.Bucket(b, "etcd", "cluster")
	_, url := fakeLLM(b, fakellm.Config{})
	files := arithmeticFiles(b)

	run := func(n int) (left map[string]int64, passed int64, took time.Duration) {
		b.Helper()
		ns := newNamespace(b)
		m := startManagerWith(b, ns, func(o *controllers.Options) { o.ResultsStore = store })
		defer m.stop()
		// Progress is flushed as often as in a cluster.
		startKubeletWith(b, ns, func(o *shard.Options) { o.FlushEvery = 3 * time.Second })
		compactEtcd(b)
		_, before := etcdSizes(b)
		start := time.Now()
		create(b, testutil.MakeEvaluation("run", ns).
			Dataset(v1alpha1.Dataset{Name: "d", Source: v1alpha1.DatasetSource{URL: fmt.Sprintf("%s/%d", files.URL, n)}}).
			OpenAIModel("m", url).Scorer(v1alpha1.ScorerExactMatch).Parallelism(8).Concurrency(16).Obj()) // shards as the controller chooses
		ev := waitPhase(b, ns, "run", v1alpha1.PhaseSucceeded, 30*time.Minute)
		took = time.Since(start)
		if ev.Status.Progress.Completed != int64(n) {
			b.Fatalf("%d of %d samples done", ev.Status.Progress.Completed, n)
		}
		// What the run leaves: once its Jobs, pods and heads are gone.
		waitTidied(b, ns, ev.Status.Run)
		time.Sleep(time.Second) // the last pass's writes
		_, after := etcdSizes(b)
		return namespaceBytes(b, ns), after - before, took
	}
	for range b.N {
		smallLeft, smallPassed, _ := run(100)
		const n = 200_000
		bigLeft, bigPassed, took := run(n)
		over := bigLeft[""] - smallLeft[""]
		b.ReportMetric(float64(over)/(1<<10), "etcd-left-over-small-KiB")
		b.ReportMetric(float64(bigPassed)/(1<<20), "etcd-db-growth-MiB")
		b.ReportMetric(float64(n)/took.Seconds(), "samples/s")
		b.Logf("200,000 samples in %v left %d KiB in etcd (a 100-sample run: %d KiB); its database grew %.1f MiB before compaction (the small run's: %.1f MiB); left by kind (bytes): %v",
			took.Round(time.Second), bigLeft[""]>>10, smallLeft[""]>>10, float64(bigPassed)/(1<<20), float64(smallPassed)/(1<<20), bigLeft)
		if over > 1<<20 {
			b.Errorf("goal: a 200,000-sample run leaves at most 1 MiB more in etcd than a 100-sample run; it left %d KiB more", over>>10)
		}
	}
}

// arithmeticFiles serves GET /N: N arithmetic samples, as JSONL (a url
// dataset of any size, which an Evaluation object could not inline).
func arithmeticFiles(tb testing.TB) *httptest.Server {
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		fmt.Fprint(w, fakellm.ArithmeticJSONL("s", n))
	}))
	tb.Cleanup(files.Close)
	return files
}

// namespaceBytes is the size of the objects in ns, as JSON, by kind, and
// in all (kind "").
func namespaceBytes(tb testing.TB, ns string) map[string]int64 {
	tb.Helper()
	total := map[string]int64{}
	for _, list := range []client.ObjectList{&v1alpha1.EvaluationList{}, &corev1.ConfigMapList{}, &corev1.SecretList{}, &batchv1.JobList{},
		&corev1.PodList{}, &corev1.EventList{}, &corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}} {
		if err := k8sClient.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			tb.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			tb.Fatal(err)
		}
		kind := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", list), "*v1."), "List")
		kind = strings.TrimPrefix(kind, "*v1alpha1.")
		for _, o := range items {
			b, _ := json.Marshal(o)
			total[kind] += int64(len(b))
			total[""] += int64(len(b))
			if m, ok := o.(metav1.Object); ok && kind == "ConfigMap" {
				total[kind+"/"+m.GetLabels()[cluster.LabelComponent]] += int64(len(b))
			}
		}
	}
	return total
}

// BenchmarkResultsStoreThroughput: writing records to a results store
// costs at most 5% of a run's throughput against the fake server (no
// latency), compared with the same run keeping them in ConfigMaps. Each
// way runs benchRuns()/2 times, in turns; the fastest of each counts.
func BenchmarkResultsStoreThroughput(b *testing.B) {
	weed := testutil.StartSeaweed(b)
	store := weed.Bucket(b, "throughput", "cluster")
	_, url := fakeLLM(b, fakellm.Config{})
	files := arithmeticFiles(b)
	const n = 50_000
	run := func(withStore bool, i int) time.Duration {
		b.Helper()
		ns := newNamespace(b)
		m := startManagerWith(b, ns, func(o *controllers.Options) {
			if withStore {
				o.ResultsStore = store
			}
		})
		startKubeletWith(b, ns, func(o *shard.Options) { o.FlushEvery = 3 * time.Second })
		defer m.stop()
		start := time.Now()
		create(b, testutil.MakeEvaluation(fmt.Sprintf("t-%d", i), ns).
			Dataset(v1alpha1.Dataset{Name: "d", Source: v1alpha1.DatasetSource{URL: fmt.Sprintf("%s/%d", files.URL, n)}}).
			OpenAIModel("m", url).Scorer(v1alpha1.ScorerExactMatch).ShardSize(2500).Parallelism(8).Concurrency(16).Obj())
		waitPhase(b, ns, fmt.Sprintf("t-%d", i), v1alpha1.PhaseSucceeded, 30*time.Minute)
		return time.Since(start)
	}
	for range b.N {
		best := map[bool]time.Duration{}
		for i := range benchRuns() {
			withStore := i%2 == 1
			if d := run(withStore, i); best[withStore] == 0 || d < best[withStore] {
				best[withStore] = d
			}
		}
		cost := best[true].Seconds()/best[false].Seconds() - 1
		b.ReportMetric(n/best[false].Seconds(), "configmaps-samples/s")
		b.ReportMetric(n/best[true].Seconds(), "store-samples/s")
		b.ReportMetric(cost*100, "store-cost-%")
		b.Logf("%d samples: %v with ConfigMaps, %v with a results store (%+.1f%%)", n, best[false].Round(10*time.Millisecond), best[true].Round(10*time.Millisecond), cost*100)
		if cost > 0.05 {
			b.Errorf("goal: a results store costs at most 5%% of the throughput; it cost %.1f%%", cost*100)
		}
	}
}

// etcdSizes reads etcd's database size in use, and its whole size.
func etcdSizes(tb testing.TB) (inUse, total int64) {
	tb.Helper()
	resp, err := http.Get(etcdURL + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "etcd_mvcc_db_total_size_in_use_in_bytes":
			inUse = int64(v)
		case "etcd_mvcc_db_total_size_in_bytes":
			total = int64(v)
		}
	}
	if inUse == 0 || total == 0 {
		tb.Fatal("etcd's metrics have no database size")
	}
	return inUse, total
}

// compactEtcd compacts etcd's history up to now, as the API server does
// every five minutes, through etcd's JSON gateway.
func compactEtcd(tb testing.TB) {
	tb.Helper()
	post := func(path string, body any) map[string]any {
		b, _ := json.Marshal(body)
		resp, err := http.Post(etcdURL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			tb.Fatal(err)
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if strings.Contains(string(answer), "required revision has been compacted") {
			return nil // nothing written since the last compaction
		}
		if err := json.Unmarshal(answer, &out); err != nil || resp.StatusCode != http.StatusOK {
			tb.Fatalf("etcd %s: %s: %s", path, resp.Status, answer)
		}
		return out
	}
	// Any read says the current revision.
	head, _ := post("/v3/kv/range", map[string]any{"key": "AA=="})["header"].(map[string]any)
	rev, _ := head["revision"].(string)
	if rev == "" {
		tb.Fatalf("etcd said no revision: %v", head)
	}
	post("/v3/kv/compaction", map[string]any{"revision": rev, "physical": true})
}

// benchRuns is how many runs BenchmarkResultsStoreThroughput makes, half
// of them with a store: $BENCH_RUNS, else 6 (a run's time varies by more
// than the 5% measured, from one to the next, on a 2-core machine).
func benchRuns() int {
	if v, err := strconv.Atoi(os.Getenv("BENCH_RUNS")); err == nil && v >= 2 {
		return v
	}
	return 6
}
