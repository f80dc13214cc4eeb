//go:build e2e

package cluster_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// BenchmarkClusterThroughput is issue 30's measure of a run on the cluster: 2
// models x 3,000 samples, concurrency 8, 4 shards of a model at once, a fake
// server answering in 200 ms with no limit. The bound is what the pods
// allowed at once can do: 2 x 4 x 8 / 0.2 s = 320 samples/s. It reports the
// samples a second, the bound and their ratio, the objects the run made,
// the manager's peak memory and the bytes etcd wrote per 1,000 samples; with
// shards of 150 (20 a model) and of 15 (200 a model: start-up paid per shard
// shows there), the samples inline in the spec; and with shards of 150, the
// same samples in a ConfigMap (what the spec's size costs: every status write
// rewrites it, every reader decodes it). Run by make bench-cluster.
func BenchmarkClusterThroughput(b *testing.B) {
	for _, c := range []struct {
		size      int
		configMap bool
	}{{150, false}, {15, false}, {150, true}} {
		name := fmt.Sprintf("shardSize=%d", c.size)
		if c.configMap {
			name += "/configMap"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				measureThroughput(b, c.size, c.configMap)
			}
		})
	}
}

const (
	benchSamples     = 3000
	benchModels      = 2
	benchParallelism = 4
	benchConcurrency = 8
	benchLatency     = 200 * time.Millisecond
)

func measureThroughput(b *testing.B, shardSize int, configMap bool) {
	ns := namespace(b, "bench-throughput")
	source := "inline:\n" + additions(benchSamples)
	if configMap {
		// The same samples, made before the clock starts (as a user's data
		// would be there already).
		var lines strings.Builder
		for i := 1; i <= benchSamples; i++ {
			fmt.Fprintf(&lines, `{"id": "q%d", "input": "What is %d+%d?", "expected": "%d"}`+"\n", i, i, i, 2*i)
		}
		if _, err := runInput(time.Minute, lines.String(), kubectlBin, "-n", ns, "create", "configmap", "arithmetic", "--from-file=samples.jsonl=/dev/stdin"); err != nil {
			b.Fatal(err)
		}
		source = "configMap: {name: arithmetic, key: samples.jsonl}\n"
	}
	fakeServers(b, ns, "llm", []string{"-latency=" + benchLatency.String()})
	var models strings.Builder
	for m := range benchModels {
		fmt.Fprintf(&models, `  - name: m%d
    provider: openai
    model: fake-%d
    baseURL: http://llm.%s.svc:8081/v1
    apiKey: {env: OPENAI_API_KEY, secretKeyRef: {name: openai, key: api-key}}
`, m, m, ns)
	}
	manifest := fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: throughput}
spec:
  datasets:
  - name: arithmetic
    source:
      %s  models:
%s  prompt: {system: "Answer with a number only."}
  scoring: [{type: exact_match, normalize: [trim]}]
  concurrency: %d
  parallelism: %d
  shardSize: %d
`, source, models.String(), benchConcurrency, benchParallelism, shardSize)

	before := objectCounts(b, ns)
	walBefore, walOK := etcdWALBytes(b)
	statusBefore := evaluationStatusWrites(b)
	waitQuiet(b)
	mon := startMonitor(b)
	start := time.Now()
	applyYAML(b, ns, manifest)
	phase := awaitEnd(b, ns, "throughput", 10*time.Minute)
	wall := time.Since(start)
	peakManager := mon.stop()
	walAfter, _ := etcdWALBytes(b)
	statusWrites := evaluationStatusWrites(b) - statusBefore
	if phase != "Succeeded" {
		b.Fatalf("the run ended %s: %s", phase, mustKubectl(b, "-n", ns, "get", "evaluation", "throughput", "-o", "jsonpath={.status.message}"))
	}
	total := benchSamples * benchModels
	// Every answer was really asked for: the run did the work it is timed on.
	if s := stats(b, ns, "llm", 8081); int(s["requests"]) != total {
		b.Fatalf("the model server answered %v requests for %d samples", s["requests"], total)
	}
	after := objectCounts(b, ns)
	// The run ends when its heads say so; its pods end on their own moments
	// later, and the window is theirs.
	first, last, peakPods, running := runnerWindow(b, ns)
	for deadline := time.Now().Add(time.Minute); running > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		first, last, peakPods, running = runnerWindow(b, ns)
	}
	if running > 0 {
		b.Fatalf("%d runner pods still running a minute after the run succeeded", running)
	}

	began, finished, finishedBy := runnerLogTimes(b, ns)
	gain := balancedGain(finished, finishedBy)

	rate := float64(total) / wall.Seconds()
	bound := float64(benchModels*benchParallelism*benchConcurrency) / benchLatency.Seconds()
	b.ReportMetric(wall.Seconds(), "s")
	b.ReportMetric(rate, "samples/s")
	b.ReportMetric(bound, "bound-samples/s")
	b.ReportMetric(rate/bound, "of-bound")
	b.ReportMetric(float64(peakPods), "pods-at-once")
	// Where the time went: before the first runner started (planning, heads,
	// Jobs, pods), while runners ran, after the last ended (gathering,
	// committing); and how close the runners came to the bound while they ran.
	calls := last.Sub(first)
	if !first.IsZero() && calls > 0 {
		b.ReportMetric(first.Sub(start).Seconds(), "before-runners-s")
		b.ReportMetric(calls.Seconds(), "runners-s")
		b.ReportMetric(start.Add(wall).Sub(last).Seconds(), "after-runners-s")
		b.ReportMetric(float64(total)/calls.Seconds()/bound, "runners-of-bound")
	}
	// The same, to the millisecond, from the runners' logs: the first shard
	// begun (its attempt written: the pod is about to call), the spread of
	// the pods' beginnings (8 pods starting on 2 cores), the last runner's
	// last shard saved, and from there to Succeeded.
	if len(began) > 0 && len(finished) > 0 {
		b.ReportMetric(began[0].Sub(start).Seconds(), "first-began-s")
		b.ReportMetric(began[len(began)-1].Sub(began[0]).Seconds(), "began-spread-s")
		b.ReportMetric(finished[len(finished)-1].Sub(began[0]).Seconds(), "first-began-to-last-finished-s")
		b.ReportMetric(start.Add(wall).Sub(finished[len(finished)-1]).Seconds(), "last-finished-to-end-s")
		b.ReportMetric(gain.Seconds(), "balanced-tail-gain-s")
	}
	for _, kind := range objectKinds {
		b.ReportMetric(float64(after[kind]-before[kind]), kind)
	}
	if peakManager > 0 {
		b.ReportMetric(float64(peakManager)/(1<<20), "manager-peak-MiB")
	}
	if walOK {
		b.ReportMetric(float64(walAfter-walBefore)/float64(total)*1000, "etcd-bytes/1k-samples")
	}
	// Each rewrites the whole Evaluation, inline dataset and all: most of
	// etcd's bytes with this run's 3,000 inline samples.
	b.ReportMetric(statusWrites, "status-writes")
	label, file := fmt.Sprintf("shardSize %d", shardSize), fmt.Sprintf("shardSize%d", shardSize)
	if configMap {
		label, file = label+", samples from a ConfigMap", file+"-configMap"
	}
	benchRuns[label]++ // make bench-cluster BENCH_COUNT=N runs each case N times
	saveNodeLogs(fmt.Sprintf("bench-%s-run%d-", file, benchRuns[label]))
	b.Logf("%s: %d samples in %s, %.0f samples/s, %.2f of the bound %.0f; %d runner pods at most at once; objects %v; runners from +%s to +%s",
		label, total, wall.Round(10*time.Millisecond), rate, rate/bound, bound, peakPods, diff(before, after),
		first.Sub(start).Round(100*time.Millisecond), last.Sub(start).Round(100*time.Millisecond))
	if len(began) > 0 && len(finished) > 0 {
		b.Logf("%s: runners began their first shards from +%s to +%s and finished their last from +%s to +%s "+
			"(a model's runners sharing its last samples perfectly would have ended %s sooner)",
			label, began[0].Sub(start).Round(10*time.Millisecond), began[len(began)-1].Sub(start).Round(10*time.Millisecond),
			finished[0].Sub(start).Round(10*time.Millisecond), finished[len(finished)-1].Sub(start).Round(10*time.Millisecond),
			gain.Round(10*time.Millisecond))
	}
}

// balancedGain is how much sooner the last runner would have finished had
// each model's runners shared its samples perfectly, each finishing at their
// mean: the most that workers claiming a model's last shards (instead of
// each running a fixed share) could gain. finished is sorted.
func balancedGain(finished []time.Time, byModel map[string][]time.Time) time.Duration {
	var latestMean time.Time
	for _, ts := range byModel {
		var sum time.Duration
		for _, t := range ts {
			sum += t.Sub(ts[0])
		}
		if mean := ts[0].Add(sum / time.Duration(len(ts))); mean.After(latestMean) {
			latestMean = mean
		}
	}
	if latestMean.IsZero() {
		return 0
	}
	return finished[len(finished)-1].Sub(latestMean)
}

// benchRuns counts the runs of each case so far.
var benchRuns = map[string]int{}

// saveNodeLogs keeps, in the artifacts, what the node's kubelet and
// containerd logged so far (the local cluster's only): where a run's pods
// spent their start, to the millisecond, when a run starts slowly.
func saveNodeLogs(prefix string) {
	if clusterDir == "" {
		return
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		return
	}
	for _, name := range []string{"kubelet.log", "containerd.log"} {
		if b, err := os.ReadFile(filepath.Join(clusterDir, "logs", name)); err == nil {
			saveArtifact(prefix+name, b)
		}
	}
}

// runnerLogTimes are, sorted, when each runner began its first shard and
// when it finished its last ("Began a shard", "Finished the worker's shards"
// in its log), from the log's own times (the kubelet's, to the nanosecond);
// and the latter by the runner's model.
func runnerLogTimes(b *testing.B, ns string) (began, finished []time.Time, finishedBy map[string][]time.Time) {
	b.Helper()
	finishedBy = map[string][]time.Time{}
	out := mustKubectl(b, "-n", ns, "get", "pods", "-l", "proctor.dev/component=runner", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.proctor\.dev/model}{"\n"}{end}`)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		pod, model, _ := strings.Cut(line, " ")
		if pod == "" {
			continue
		}
		var first, last time.Time
		for _, line := range strings.Split(mustKubectl(b, "-n", ns, "logs", "pod/"+pod, "-c", "runner", "--timestamps"), "\n") {
			at, rest, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, at)
			if err != nil {
				continue
			}
			switch {
			case first.IsZero() && strings.Contains(rest, `msg="Began a shard"`):
				first = t
			case strings.Contains(rest, `msg="Finished the worker's shards"`):
				last = t
			}
		}
		if !first.IsZero() {
			began = append(began, first)
		}
		if !last.IsZero() {
			finished = append(finished, last)
			finishedBy[model] = append(finishedBy[model], last)
		}
	}
	slices.SortFunc(began, time.Time.Compare)
	slices.SortFunc(finished, time.Time.Compare)
	return began, finished, finishedBy
}

// runnerWindow is when the run's first runner container started and its
// last one ended (zero if no runner says), how many ran at once at most
// (from the same times: polling for it loaded the node the run ran on),
// and how many have not ended.
func runnerWindow(b *testing.B, ns string) (first, last time.Time, atOnce, running int) {
	b.Helper()
	out := mustKubectl(b, "-n", ns, "get", "pods", "-l", "proctor.dev/component=runner", "-o",
		`jsonpath={range .items[*]}{range .status.containerStatuses[?(@.name=="runner")]}{.state.terminated.startedAt} {.state.terminated.finishedAt}{"\n"}{end}{end}`)
	if strings.TrimSpace(out) == "" {
		return first, last, 0, 0
	}
	// A line a container: its start and end, or nothing while it runs.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			running++
			continue
		}
		started, err1 := time.Parse(time.RFC3339, f[0])
		finished, err2 := time.Parse(time.RFC3339, f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		if first.IsZero() || started.Before(first) {
			first = started
		}
		if finished.After(last) {
			last = finished
		}
		edges = append(edges, edge{started, 1}, edge{finished, -1})
	}
	// Times are to the second: a container that ended in the second another
	// started counts as overlapping it.
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return y.delta - x.delta // starts first
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		atOnce = max(atOnce, n)
	}
	return first, last, atOnce, running
}

// awaitEnd waits for the Evaluation to end, by a watch (as `kubectl get
// -w` does), and returns its phase. Polling it with kubectl ten times a
// second, as this benchmark did, took CPU from the run it timed on a
// 2-core node: each poll started a process and made the API server
// serialize the 400 KiB object (the gather at the end of a run took twice
// as long under it).
func awaitEnd(b *testing.B, ns, name string, limit time.Duration) string {
	b.Helper()
	out, stop := kubectlWatch(b, limit, "-n", ns, "get", "evaluation", name, "-w", "-o", `jsonpath={.status.phase}{"\n"}`)
	defer stop()
	phase := ""
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if phase = strings.TrimSpace(sc.Text()); phase == "Succeeded" || phase == "Failed" {
			return phase
		}
	}
	b.Fatalf("the run did not end in %v (phase %q)", limit, phase)
	return ""
}

// objectKinds are the objects a run makes in its namespace, counted.
var objectKinds = []string{"configmaps", "jobs", "pods", "secrets"}

func objectCounts(b *testing.B, ns string) map[string]int {
	b.Helper()
	n := map[string]int{}
	for _, kind := range objectKinds {
		n[kind] = len(strings.Fields(mustKubectl(b, "-n", ns, "get", kind, "-o", "name")))
	}
	return n
}

func diff(before, after map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// etcdWALBytes is what the local cluster's etcd has written to its log
// (etcd_disk_wal_write_bytes_total): every object write, with its history.
// False on a cluster not made by hack/cluster-up.sh.
func etcdWALBytes(b *testing.B) (int64, bool) {
	b.Helper()
	if clusterDir == "" {
		return 0, false
	}
	resp, err := http.Get("http://127.0.0.1:12381/metrics")
	if err != nil {
		b.Logf("etcd's metrics: %v", err)
		return 0, false
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatalf("etcd's metrics: %v", err)
	}
	f, ok := families["etcd_disk_wal_write_bytes_total"]
	if !ok || len(f.GetMetric()) == 0 {
		b.Fatal("etcd's metrics have no etcd_disk_wal_write_bytes_total")
	}
	// etcd 3.6 exports it as a gauge, despite its name.
	m := f.GetMetric()[0]
	return int64(m.GetCounter().GetValue() + m.GetGauge().GetValue()), true
}

// evaluationStatusWrites is how many times the API server has written an
// Evaluation's status (every manager pass that changed it).
func evaluationStatusWrites(b *testing.B) float64 {
	b.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(mustKubectl(b, "get", "--raw", "/metrics")))
	if err != nil {
		b.Fatalf("the API server's metrics: %v", err)
	}
	var n float64
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["resource"] == "evaluations" && l["subresource"] == "status" && (l["verb"] == "PUT" || l["verb"] == "PATCH") && strings.HasPrefix(l["code"], "2") {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// monitor polls, while a run goes, the manager's memory (its container's
// working set). On the local cluster it reads the container's cgroup, ten
// times a second: a file read, where the kubelet's summary API cost a kubectl
// process, the API server's proxy and the kubelet's stats every second
// (about 0.09 CPU-s, 5% of the node, taken from the pods starting), and its
// figures are the kubelet's cached ones, refreshed every 10-15 s.
type monitor struct {
	done     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	managerB int64
}

func startMonitor(b *testing.B) *monitor {
	m := &monitor{done: make(chan struct{})}
	read, every := managerCgroupMemory(b), 100*time.Millisecond
	if read == nil {
		node := strings.TrimSpace(mustKubectl(b, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"))
		read, every = func() (int64, bool) { return managerMemory(node) }, time.Second
	}
	m.wg.Go(func() {
		for {
			select {
			case <-m.done:
				return
			case <-time.After(every):
			}
			if used, ok := read(); ok {
				m.mu.Lock()
				m.managerB = max(m.managerB, used)
				m.mu.Unlock()
			}
		}
	})
	return m
}

// managerCgroupMemory reads the working set of the manager's container as
// the kubelet counts it (usage less inactive file pages) from its memory
// cgroup, v1 or v2, when the cluster's node is this machine; nil otherwise.
func managerCgroupMemory(b *testing.B) func() (int64, bool) {
	b.Helper()
	if clusterDir == "" {
		return nil
	}
	out := mustKubectl(b, "-n", releaseNamespace, "get", "pods", "-l", "app.kubernetes.io/name=proctor", "-o",
		`jsonpath={range .items[*]}{.metadata.uid} {.status.containerStatuses[?(@.name=="manager")].containerID}{"\n"}{end}`)
	uid, id, ok := strings.Cut(strings.TrimSpace(out), " ")
	_, id, _ = strings.Cut(id, "://")
	if !ok || id == "" || strings.Contains(id, "\n") {
		return nil
	}
	var dir string
	for _, root := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup"} {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			switch {
			case err != nil:
				return filepath.SkipDir
			case !d.IsDir():
				return nil
			}
			if strings.Contains(path, id) && (strings.Contains(path, uid) || strings.Contains(path, strings.ReplaceAll(uid, "-", "_"))) &&
				fileExists(filepath.Join(path, "memory.stat")) {
				// The memory controller's directory (on v1, the walk of
				// /sys/fs/cgroup would otherwise stop at its cpu one).
				dir = path
				return filepath.SkipAll
			}
			return nil
		})
		if dir != "" {
			break
		}
	}
	if dir == "" {
		return nil
	}
	usageFile, inactiveKey := "memory.usage_in_bytes", "total_inactive_file"
	if !fileExists(filepath.Join(dir, usageFile)) {
		usageFile, inactiveKey = "memory.current", "inactive_file" // v2
	}
	return func() (int64, bool) {
		u, err := os.ReadFile(filepath.Join(dir, usageFile))
		if err != nil {
			return 0, false
		}
		usage, err := strconv.ParseInt(strings.TrimSpace(string(u)), 10, 64)
		if err != nil {
			return 0, false
		}
		st, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if err != nil {
			return 0, false
		}
		for _, line := range strings.Split(string(st), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == inactiveKey {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil && n < usage {
					usage -= n
				}
			}
		}
		return usage, true
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (m *monitor) stop() (managerBytes int64) {
	close(m.done)
	m.wg.Wait()
	return m.managerB
}

// managerMemory is the working set of the manager's container, from the
// kubelet's summary API (through the API server's node proxy): where the
// node is not this machine.
func managerMemory(node string) (int64, bool) {
	out, err := kubectl("get", "--raw", "/api/v1/nodes/"+node+"/proxy/stats/summary")
	if err != nil {
		return 0, false
	}
	var summary struct {
		Pods []struct {
			PodRef struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"podRef"`
			Containers []struct {
				Name   string `json:"name"`
				Memory struct {
					WorkingSetBytes *int64 `json:"workingSetBytes"`
				} `json:"memory"`
			} `json:"containers"`
		} `json:"pods"`
	}
	if json.Unmarshal([]byte(out), &summary) != nil {
		return 0, false
	}
	for _, p := range summary.Pods {
		if p.PodRef.Namespace != releaseNamespace || !strings.HasPrefix(p.PodRef.Name, release+"-controller-manager-") {
			continue
		}
		for _, c := range p.Containers {
			if c.Memory.WorkingSetBytes != nil {
				return *c.Memory.WorkingSetBytes, true
			}
		}
	}
	return 0, false
}

// waitQuiet waits, on the local cluster, until the node's CPUs are quiet
// (at most 20% busy over a second; 30 s at most): the timed run starts on
// a node no longer busy with what came before it (the model server's pod
// just started, an earlier run's namespace just deleted).
func waitQuiet(b *testing.B) {
	b.Helper()
	if clusterDir == "" {
		return
	}
	busy := func() (total, idle int64, ok bool) {
		f, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0, false
		}
		line, _, _ := strings.Cut(string(f), "\n")
		fields := strings.Fields(line)
		if len(fields) < 9 || fields[0] != "cpu" {
			return 0, 0, false
		}
		for i, v := range fields[1:9] { // user nice system idle iowait irq softirq steal
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
			if i == 3 || i == 4 {
				idle += n
			}
		}
		return total, idle, true
	}
	start := time.Now()
	share := 1.0
	for time.Since(start) < 30*time.Second {
		t0, i0, ok := busy()
		time.Sleep(time.Second)
		t1, i1, ok1 := busy()
		if !ok || !ok1 || t1 == t0 {
			return
		}
		if share = 1 - float64(i1-i0)/float64(t1-t0); share <= 0.2 {
			break
		}
	}
	b.Logf("the node was %.0f%% busy after %s of waiting for it to be quiet", 100*share, time.Since(start).Round(100*time.Millisecond))
}
