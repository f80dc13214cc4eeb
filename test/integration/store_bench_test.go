package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/shard"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// BenchmarkEtcdWithResultsStore: with a results store, a run of 200,000
// samples (fake server, no latency) leaves etcd at most 1 MiB larger than a
// run of 100 does: its records are in the store, etcd keeps only progress.
// Measured as etcd's data in use once its history is compacted (what a run
// leaves behind), with what passed through etcd before the compaction (its
// history: progress heartbeats, presigned URLs) reported beside it.
func BenchmarkEtcdWithResultsStore(b *testing.B) {
	weed := testutil.StartSeaweed(b)
	store := weed.Bucket(b, "etcd", "cluster")
	ns := newNamespace(b)
	_, url := fakeLLM(b, fakellm.Config{})
	startManagerWith(b, ns, func(o *controllers.Options) { o.ResultsStore = store })
	// Progress is flushed as often as in a cluster.
	startKubeletWith(b, ns, func(o *shard.Options) { o.FlushEvery = 3 * time.Second })
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		fmt.Fprint(w, fakellm.ArithmeticJSONL("s", n))
	}))
	b.Cleanup(files.Close)

	run := func(name string, n int, shardSize int32) (live, passed int64, took time.Duration) {
		b.Helper()
		compactEtcd(b)
		liveBefore, totalBefore := etcdSizes(b)
		start := time.Now()
		create(b, testutil.MakeEvaluation(name, ns).
			Dataset(v1alpha1.Dataset{Name: "d", Source: v1alpha1.DatasetSource{URL: fmt.Sprintf("%s/%d", files.URL, n)}}).
			OpenAIModel("m", url).Scorer(v1alpha1.ScorerExactMatch).ShardSize(shardSize).Parallelism(8).Concurrency(16).Obj())
		ev := waitPhase(b, ns, name, v1alpha1.PhaseSucceeded, 30*time.Minute)
		took = time.Since(start)
		if ev.Status.Progress.Completed != int64(n) {
			b.Fatalf("%s: %d of %d samples done", name, ev.Status.Progress.Completed, n)
		}
		_, totalAfter := etcdSizes(b)
		compactEtcd(b)
		liveAfter, _ := etcdSizes(b)
		return liveAfter - liveBefore, totalAfter - totalBefore, took
	}
	for range b.N {
		smallLive, smallPassed, _ := run(fmt.Sprintf("small-%d", time.Now().UnixNano()%1e6), 100, 10)
		const n = 200_000
		bigLive, bigPassed, took := run(fmt.Sprintf("big-%d", time.Now().UnixNano()%1e6), n, 1000)
		over := bigLive - smallLive
		b.ReportMetric(float64(over)/(1<<10), "etcd-live-over-small-KiB")
		b.ReportMetric(float64(bigPassed-smallPassed)/(1<<20), "etcd-db-growth-over-small-MiB")
		b.ReportMetric(float64(n)/took.Seconds(), "samples/s")
		b.Logf("200,000 samples in %v: etcd in use %+d KiB (a 100-sample run: %+d KiB), its database grew %.1f MiB before compaction (the small run's: %.1f MiB)",
			took.Round(time.Second), bigLive>>10, smallLive>>10, float64(bigPassed)/(1<<20), float64(smallPassed)/(1<<20))
		if over > 1<<20 {
			b.Errorf("goal: a 200,000-sample run leaves etcd at most 1 MiB larger than a 100-sample run; it left %d KiB more", over>>10)
		}
	}
}

// BenchmarkResultsStoreThroughput: writing records to a results store
// costs at most 5% of a run's throughput against the fake server (no
// latency), compared with the same run keeping them in ConfigMaps. Each
// way runs twice, in turns; the faster of each counts.
func BenchmarkResultsStoreThroughput(b *testing.B) {
	weed := testutil.StartSeaweed(b)
	store := weed.Bucket(b, "throughput", "cluster")
	_, url := fakeLLM(b, fakellm.Config{})
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		fmt.Fprint(w, fakellm.ArithmeticJSONL("s", n))
	}))
	b.Cleanup(files.Close)
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
		for i := range 4 {
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
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			tb.Fatalf("etcd %s: %s (%v)", path, resp.Status, err)
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
