//go:build e2e

// TestKueue runs first (files run in name order): its runner pods need CPU
// the node has before the other tests' servers take it (kept for the
// lifecycle tests, they filled the node's requests in a full run). It
// removes Kueue when it ends, so the tests after it show that nothing needs
// Kueue, nor is left of it.
package cluster_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// kueueQueue is the LocalQueue of the e2e-kueue namespace, in ClusterQueue
// proctor-e2e: 1 CPU, which holds two runner pods of 400m, not three. (The
// issue's 8 CPUs and runners of 4, scaled down to this node's 2 CPUs.)
const kueueQueue = "team-a"

// TestKueue: runs naming a Kueue queue are admitted by a real Kueue (v0.17,
// built from its module by make e2e, installed with its own Helm chart):
// before Kueue exists such a run waits (KueueNotInstalled); of three runs that
// need 400m each in a ClusterQueue of 1 CPU, two run and the third is Queued
// with Kueue's reason and no pod, longer than its stall timeout, then runs; a
// run preempted mid-way by a higher priority resumes and loses or repeats
// nothing; spec.suspend deactivates an admitted run's Workload and resuming it
// finishes the run exactly once.
func TestKueue(t *testing.T) {
	ns := namespace(t, "e2e-kueue")
	fakeServers(t, ns, "llm", []string{})

	// Before Kueue: the run says why it waits and creates no Job.
	applyYAML(t, ns, kueueEvaluation("early", 6, kueueRun{}))
	eventually(t, time.Minute, 250*time.Millisecond, "run early Pending with reason KueueNotInstalled", func() error {
		return wantStatus(ns, "early", "Pending", "KueueNotInstalled")
	})
	if jobs := runnerJobs(t, ns, "early"); len(jobs) != 0 {
		t.Errorf("run early made Jobs %v without Kueue", jobs)
	}

	installKueue(t, ns)
	// The manager, restarted, finds Kueue: the waiting run goes on.
	if !succeededOnce(t, ns, watchColumns(t, ns, 3*time.Minute, "early"), "early", 6) {
		t.FailNow()
	}

	t.Run("TwoOfThreeFit", func(t *testing.T) { testKueueTwoOfThree(t, ns) })
	t.Run("Preemption", func(t *testing.T) { testKueuePreemption(t, ns) })
	t.Run("SuspendResume", func(t *testing.T) { testKueueSuspend(t, ns) })
}

func testKueueTwoOfThree(t *testing.T, ns string) {
	fakeServers(t, ns, "llm3", []string{})
	// 60 answers of 1 s, 2 at a time: each run takes 30 s.
	for _, name := range []string{"first", "second"} {
		applyYAML(t, ns, kueueEvaluation(name, 60, kueueRun{server: "llm3", sleep: "1s"}))
	}
	for _, name := range []string{"first", "second"} {
		eventually(t, 2*time.Minute, 250*time.Millisecond, "run "+name+" admitted, its pod running", func() error {
			if n := runningPods(t, ns, name); n != 1 {
				return fmt.Errorf("%d running pods", n)
			}
			return nil
		})
	}
	// A stall timeout shorter than the wait: Kueue holding a run is no stall.
	applyYAML(t, ns, kueueEvaluation("third", 60, kueueRun{server: "llm3", sleep: "1s", stallTimeout: "10s"}))
	eventually(t, time.Minute, 250*time.Millisecond, "run third Queued", func() error {
		return wantStatus(ns, "third", "Pending", "Queued")
	})
	queuedAt := time.Now()
	msg := field(t, ns, "third", "{.status.message}")
	for _, want := range []string{"waits in queue " + kueueQueue, "insufficient unused quota for cpu"} {
		if !strings.Contains(msg, want) {
			t.Errorf("run third's message %q does not say %q", msg, want)
		}
	}
	if got := field(t, ns, "third", `{.status.conditions[?(@.type=="Admitted")].status}`); got != "False" {
		t.Errorf("run third's condition Admitted = %q while queued, want False", got)
	}
	// Held past its stall timeout, with no pod, while the others run.
	for time.Since(queuedAt) < 15*time.Second {
		if err := wantStatus(ns, "third", "Pending", "Queued"); err != nil {
			t.Fatalf("run third, 10 s stall timeout, %s after it was queued: %v", time.Since(queuedAt).Round(time.Second), err)
		}
		if n := len(runnerPods(t, ns, "third")); n != 0 {
			t.Fatalf("run third has %d runner pods while Kueue holds it", n)
		}
		time.Sleep(time.Second)
	}
	if rows, err := columns(ns); err != nil {
		t.Fatal(err)
	} else if rows["first"][0] != "Running" || rows["second"][0] != "Running" {
		t.Fatalf("runs first and second are %s and %s: the check of third's wait ran too late", rows["first"][0], rows["second"][0])
	}

	final := watchColumns(t, ns, 4*time.Minute, "first", "second", "third")
	for _, name := range []string{"first", "second", "third"} {
		succeededOnce(t, ns, final, name, 60)
	}
	if got := field(t, ns, "third", `{.status.conditions[?(@.type=="Admitted")].status}`); got != "True" {
		t.Errorf("run third's condition Admitted = %q once it ran, want True", got)
	}
	if s := stats(t, ns, "llm3", 8081); s["requests"] != 180 {
		t.Errorf("the model server answered %v requests for 3 runs of 60", s["requests"])
	}
}

func testKueuePreemption(t *testing.T, ns string) {
	fakeServers(t, ns, "llmp", []string{})
	// Two pods of 400m leave no room for a third; 30 answers of 1 s each, 2 at a time: 15 s a shard.
	applyYAML(t, ns, kueueEvaluation("low", 60, kueueRun{server: "llmp", sleep: "1s", parallelism: 2, priorityClass: "proctor-e2e-low"}))
	eventually(t, 2*time.Minute, 250*time.Millisecond, "run low half-way", func() error {
		if done := progressOf(t, ns, "low"); done < 10 {
			return fmt.Errorf("%d done", done)
		}
		return nil
	})
	applyYAML(t, ns, kueueEvaluation("high", 10, kueueRun{server: "llmp", priorityClass: "proctor-e2e-high"}))
	eventually(t, 2*time.Minute, 250*time.Millisecond, "run low preempted", func() error {
		return wantStatus(ns, "low", "Pending", "Queued")
	})
	at := progressOf(t, ns, "low")
	msg := field(t, ns, "low", "{.status.message}")
	if !strings.Contains(msg, "Preempted") {
		t.Errorf("run low's message %q does not give Kueue's reason (Preempted ...)", msg)
	}
	t.Logf("Run low preempted at %d/60: %s", at, msg)

	final := watchColumns(t, ns, 4*time.Minute, "high", "low")
	succeededOnce(t, ns, final, "high", 10)
	succeededOnce(t, ns, final, "low", 60)
	// Kueue suspends the Job: its pods stop gracefully, finishing the answers
	// in flight, so none is asked for twice.
	if s := stats(t, ns, "llmp", 8081); s["requests"] != 70 {
		t.Errorf("the model server answered %v requests for runs of 60 and 10: the preemption repeated or lost some", s["requests"])
	}
	events := strings.Join(reasons(t, ns, "Evaluation", "low"), " ")
	for _, want := range []string{"Queued", "Admitted"} {
		if !strings.Contains(events, want) {
			t.Errorf("run low's events %q have no %s", events, want)
		}
	}
	if n := strings.Count(events, "Started"); n != 1 {
		t.Errorf("run low's events %q: Started %d times, want once", events, n)
	}
}

func testKueueSuspend(t *testing.T, ns string) {
	fakeServers(t, ns, "llms", []string{})
	applyYAML(t, ns, kueueEvaluation("paused", 40, kueueRun{server: "llms", sleep: "500ms"}))
	eventually(t, 2*time.Minute, 250*time.Millisecond, "run paused under way", func() error {
		if done := progressOf(t, ns, "paused"); done < 6 {
			return fmt.Errorf("%d done", done)
		}
		return nil
	})
	mustKubectl(t, "-n", ns, "patch", "evaluation", "paused", "--type=merge", "-p", `{"spec":{"suspend":true}}`)
	eventually(t, 2*time.Minute, 250*time.Millisecond, "run paused suspended, its pods gone", func() error {
		if phase := field(t, ns, "paused", "{.status.phase}"); phase != "Suspended" {
			return fmt.Errorf("phase %s", phase)
		}
		if n := len(runnerPods(t, ns, "paused")); n != 0 {
			return fmt.Errorf("%d runner pods", n)
		}
		return nil
	})
	// Kueue, not Proctor, stopped the Job: its Workload is inactive.
	jobs := runnerJobs(t, ns, "paused")
	if len(jobs) != 1 {
		t.Fatalf("run paused has runner Jobs %v, want one", jobs)
	}
	uid := mustKubectl(t, "-n", ns, "get", "job", jobs[0], "-o", "jsonpath={.metadata.uid}")
	active := mustKubectl(t, "-n", ns, "get", "workloads.kueue.x-k8s.io", "-l", "kueue.x-k8s.io/job-uid="+uid,
		"-o", "jsonpath={.items[*].spec.active}")
	if active != "false" {
		t.Errorf("the Workload of Job %s has spec.active %q while the run is suspended, want false", jobs[0], active)
	}
	at := progressOf(t, ns, "paused")
	t.Logf("Run paused suspended at %d/40", at)
	mustKubectl(t, "-n", ns, "patch", "evaluation", "paused", "--type=merge", "-p", `{"spec":{"suspend":false}}`)
	succeededOnce(t, ns, watchColumns(t, ns, 3*time.Minute, "paused"), "paused", 40)
	if s := stats(t, ns, "llms", 8081); s["requests"] != 40 {
		t.Errorf("the model server answered %v requests for 40 samples: suspending repeated or lost some", s["requests"])
	}
}

// succeededOnce checks that run name's last row (of watchColumns' final)
// says Succeeded n/n with every answer right, and that its records hold each
// of its n samples once; it reports whether the row was right.
func succeededOnce(t *testing.T, ns string, final map[string][3]string, name string, n int) bool {
	t.Helper()
	want := [3]string{"Succeeded", fmt.Sprintf("%d/%d", n, n), "1.0000"}
	got := final[name]
	if got != want {
		t.Errorf("run %s: PHASE PROGRESS SCORE = %v, want %v", name, got, want)
	}
	recs, _ := fetchRecords(t, ns, name)
	exactlyOnce(t, recs, n)
	return got == want
}

// kueueRun is what a Kueue test's run varies.
type kueueRun struct {
	server, sleep, priorityClass, stallTimeout string
	parallelism                                int
}

// kueueEvaluation is a run of n arithmetic samples in queue team-a, each
// runner pod requesting 400m.
func kueueEvaluation(name string, n int, r kueueRun) string {
	if r.server == "" {
		r.server = "llm"
	}
	if r.parallelism == 0 {
		r.parallelism = 1
	}
	sleep := ""
	if r.sleep != "" {
		sleep = `SLEEP: ` + r.sleep + `\n`
	}
	var samples strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&samples, "      - {id: s%d, input: \"%sWhat is %d+1?\", expected: \"%d\"}\n", i, sleep, i, i+1)
	}
	scheduling := "queueName: " + kueueQueue
	if r.priorityClass != "" {
		scheduling += ", priorityClassName: " + r.priorityClass
	}
	runner := "resources: {requests: {cpu: 400m, memory: 64Mi}}"
	if r.stallTimeout != "" {
		runner += ", stallTimeout: " + r.stallTimeout
	}
	return fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: %s}
spec:
  datasets:
  - name: arithmetic
    source:
      inline:
%s  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: http://%s.e2e-kueue.svc:8081/v1
    apiKey: {env: OPENAI_API_KEY, secretKeyRef: {name: openai, key: api-key}}
  prompt: {system: "Answer with a number only."}
  scoring: [{type: exact_match, normalize: [trim]}]
  concurrency: 2
  parallelism: %d
  shardSize: %d
  scheduling: {%s}
  runner: {%s}
`, name, samples.String(), r.server, r.parallelism, (n+r.parallelism-1)/r.parallelism, scheduling, runner)
}

// installKueue installs Kueue from its own chart, with the image make e2e
// built, a ClusterQueue of 1 CPU, LocalQueue team-a in ns and two priority
// classes; it restarts Proctor's manager, which looks for Kueue when it
// starts. Everything goes when the test ends, the manager restarted again.
func installKueue(t *testing.T, ns string) {
	t.Helper()
	version := envOr("KUEUE_VERSION", "v0.17.0")
	chart := kueueChart(t, version)
	start := time.Now()
	t.Cleanup(func() { uninstallKueue(t, ns) })
	if _, err := run(3*time.Minute, helmBin, "install", "kueue", chart, "-n", "kueue-system", "--create-namespace",
		"--set", "controllerManager.manager.image.repository=registry.k8s.io/kueue/kueue",
		"--set", "controllerManager.manager.image.tag="+version,
		"--set", "controllerManager.manager.image.pullPolicy=IfNotPresent",
		// The node has 2 CPUs for every test.
		"--set", "controllerManager.manager.resources.requests.cpu=50m",
		"--set", "controllerManager.manager.resources.requests.memory=128Mi"); err != nil {
		t.Fatal(err)
	}
	// The local kube-apiserver runs without the aggregation layer: an
	// APIService it cannot reach would fail discovery, and with it every
	// namespace's deletion. Proctor does not use Kueue's visibility API.
	mustKubectl(t, "delete", "apiservice", "v1beta1.visibility.kueue.x-k8s.io", "v1beta2.visibility.kueue.x-k8s.io", "--ignore-not-found")
	if _, err := run(4*time.Minute, kubectlBin, "-n", "kueue-system", "wait", "--for=condition=Available", "deployment", "--all", "--timeout=3m"); err != nil {
		t.Fatalf("%v\n%s", err, mustKubectl(t, "-n", "kueue-system", "describe", "pods"))
	}
	record("Kueue installed (helm)", time.Since(start))
	// Kueue's webhooks serve once its certificates are in place: retry until
	// they admit the queues.
	eventually(t, 2*time.Minute, time.Second, "Kueue's webhooks admit the queues", func() error {
		_, err := runInput(time.Minute, fmt.Sprintf(`apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: proctor-e2e-low}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: proctor-e2e-high}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: proctor-e2e}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: "1"}
      - {name: memory, nominalQuota: 4Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: %s, namespace: %s}
spec: {clusterQueue: proctor-e2e}
`, kueueQueue, ns), kubectlBin, "apply", "-f", "-")
		return err
	})
	restartManager(t)
}

// kueueChart is the directory of Kueue's Helm chart in its module, which make
// e2e downloaded to build Kueue.
func kueueChart(t *testing.T, version string) string {
	t.Helper()
	cmd := fmt.Sprintf("cd %s && GO111MODULE=on GOFLAGS=-mod=mod GOWORK=off go mod download -json sigs.k8s.io/kueue@%s", t.TempDir(), version)
	out, err := run(5*time.Minute, "bash", "-c", cmd)
	if err != nil {
		t.Fatalf("downloading Kueue's module for its chart: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json: %v: %s", err, out)
	}
	chart := filepath.Join(mod.Dir, "charts", "kueue")
	if _, err := os.Stat(filepath.Join(chart, "Chart.yaml")); err != nil {
		t.Fatal(err)
	}
	return chart
}

func uninstallKueue(t *testing.T, ns string) {
	// Its model servers go too: the tests after it need the node's CPU.
	if _, err := run(3*time.Minute, kubectlBin, "-n", ns, "delete", "deployments", "--all", "--wait=true", "--timeout=2m"); err != nil {
		t.Error(err)
	}
	// The runs' Workloads go with their Jobs while Kueue still runs to
	// release them (they carry its finalizer).
	if _, err := run(3*time.Minute, kubectlBin, "-n", ns, "delete", "evaluations", "--all", "--wait=true", "--timeout=2m"); err != nil {
		t.Error(err)
	}
	eventually(t, 2*time.Minute, time.Second, "every Workload deleted", func() error {
		out, err := kubectl("get", "workloads.kueue.x-k8s.io", "-A", "-o", "name")
		if err != nil {
			return err
		}
		if left := strings.TrimSpace(out); left != "" {
			return fmt.Errorf("left: %s", left)
		}
		return nil
	})
	// So do the queues and the flavor: Kueue holds them with its finalizer
	// while in use, and they would hold its CRDs once it is gone.
	if _, err := run(3*time.Minute, kubectlBin, "delete", "--wait=true", "--timeout=2m", "--ignore-not-found",
		"-n", ns, "localqueues.kueue.x-k8s.io/"+kueueQueue); err != nil {
		t.Error(err)
	}
	if _, err := run(3*time.Minute, kubectlBin, "delete", "--wait=true", "--timeout=2m", "--ignore-not-found",
		"clusterqueues.kueue.x-k8s.io/proctor-e2e", "resourceflavors.kueue.x-k8s.io/default"); err != nil {
		t.Error(err)
	}
	if _, err := run(3*time.Minute, helmBin, "uninstall", "kueue", "-n", "kueue-system", "--wait", "--timeout", "2m"); err != nil {
		t.Error(err)
	}
	for _, args := range [][]string{
		{"delete", "crd", "-l", "app.kubernetes.io/name=kueue", "--ignore-not-found", "--timeout=2m"},
		{"delete", "namespace", "kueue-system", "--ignore-not-found", "--timeout=3m"},
		{"delete", "priorityclass", "proctor-e2e-low", "proctor-e2e-high", "--ignore-not-found"},
	} {
		if _, err := run(4*time.Minute, kubectlBin, args...); err != nil {
			t.Error(err)
		}
	}
	if out, _ := kubectl("get", "crd", "-o", "name"); strings.Contains(out, "kueue.x-k8s.io") {
		t.Errorf("Kueue's CRDs are left:\n%s", out)
	}
	restartManager(t)
}

// restartManager restarts Proctor's manager and waits for the new one.
func restartManager(t *testing.T) {
	t.Helper()
	mustKubectl(t, "-n", releaseNamespace, "rollout", "restart", "deployment", "-l", "app.kubernetes.io/name=proctor")
	if _, err := run(3*time.Minute, kubectlBin, "-n", releaseNamespace, "rollout", "status", "deployment", "-l", "app.kubernetes.io/name=proctor", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
}

// wantStatus checks an Evaluation's phase and reason.
func wantStatus(ns, name, phase, reason string) error {
	out, err := kubectl("-n", ns, "get", "evaluation", name, "-o", "jsonpath={.status.phase} {.status.reason}")
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(out); got != phase+" "+reason {
		return fmt.Errorf("phase and reason %q, want %s %s", got, phase, reason)
	}
	return nil
}

func field(t *testing.T, ns, name, jsonpath string) string {
	t.Helper()
	return strings.TrimSpace(mustKubectl(t, "-n", ns, "get", "evaluation", name, "-o", "jsonpath="+jsonpath))
}

func progressOf(t *testing.T, ns, name string) int {
	t.Helper()
	if m := progressText.FindStringSubmatch(field(t, ns, name, "{.status.progress.text}")); m != nil {
		return atoi(m[1])
	}
	return 0
}

func runnerJobs(t *testing.T, ns, name string) []string {
	t.Helper()
	return strings.Fields(mustKubectl(t, "-n", ns, "get", "jobs", "-l", "proctor.dev/evaluation="+name+",proctor.dev/component=runner",
		"-o", "jsonpath={.items[*].metadata.name}"))
}

// runningPods counts the run's runner pods that run.
func runningPods(t *testing.T, ns, name string) int {
	t.Helper()
	n := 0
	for _, p := range runnerPods(t, ns, name) {
		if p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}
