//go:build e2e

package cluster_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// crmEvaluation is docs/examples/crm/evaluation.yaml for a cluster: named
// name, its first agent only, n conversations from the ConfigMap
// crm-conversations, edited by edit.
func crmEvaluation(t *testing.T, name string, n int, edit func(string) string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "docs", "examples", "crm", "evaluation.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	s = strings.Replace(s, "name: crm-agents", "name: "+name, 1)
	s = strings.Replace(s, "source: {file: conversations.jsonl}",
		"source: {configMap: {name: crm-conversations, key: conversations.jsonl}}\n    limit: "+itoa(n), 1)
	s = testutil.CRMFirstAgentOnly(t, s)
	return edit(s)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// crmNamespace is a namespace holding the CRM example's conversations.
func crmNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := namespace(t, name)
	mustKubectl(t, "create", "configmap", "crm-conversations", "-n", ns,
		"--from-file=conversations.jsonl="+filepath.Join(repo, "docs", "examples", "crm", "conversations.jsonl"))
	return ns
}

// runnerPods are the runner pods of an Evaluation.
func runnerPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	out := mustKubectl(t, "get", "pods", "-n", ns, "-l", "proctor.dev/evaluation="+name+",proctor.dev/component=runner", "-o", "json")
	if err := json.Unmarshal([]byte(out), &pods); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// TestStatefulAgentsInTheirOwnDatabases is the isolation proof on the real
// cluster: one agent, 24 CRM conversations in 3 shards of 8 that run at
// once, each shard's pod with PostgreSQL of its own beside the runner and 8
// conversations in flight, each in its slot's database (reset from a
// template and seeded with its own contacts by the beforeSample hook): every
// conversation sees exactly its own contacts. The same Evaluation with one
// shared database clobbers, and the test asserts that it does.
func TestStatefulAgentsInTheirOwnDatabases(t *testing.T) {
	ns := crmNamespace(t, "e2e-crm")
	isolated := crmEvaluation(t, "crm-isolated", 24, func(s string) string {
		return strings.Replace(s, "  concurrency: 8\n", "  concurrency: 8\n  shardSize: 8\n  parallelism: 3\n", 1)
	})
	applied := time.Now()
	applyYAML(t, ns, isolated)

	// kubectl describe shows the service and the hooks beside the runner.
	var described string
	eventually(t, 3*time.Minute, time.Second, "a runner pod running", func() error {
		if ev := getEvaluation(t, ns, "crm-isolated"); ev.Status.Phase == v1alpha1.PhaseFailed {
			t.Fatalf("crm-isolated failed: %s: %s", ev.Status.Reason, ev.Status.Message)
		}
		for _, p := range runnerPods(t, ns, "crm-isolated") {
			if p.Status.Phase == corev1.PodRunning {
				described = mustKubectl(t, "describe", "pod", "-n", ns, p.Name)
				return nil
			}
		}
		return errNotYet
	})
	for _, want := range []string{"Init Containers:", "  crm-db:", "ghcr.io/proctor-dev/proctor-postgres:v0.1.0", "  hooks:", "Containers:", "  runner:",
		"Readiness:", "Startup:", "exec [pg_isready -q -h 127.0.0.1 -p 55432]"} {
		if !strings.Contains(described, want) {
			t.Errorf("kubectl describe pod does not show %q:\n%s", want, described)
		}
	}

	final := watchColumns(t, ns, 8*time.Minute, "crm-isolated")
	record("CRM isolation: 24 conversations in 3 shards x 8 slots", time.Since(applied))
	if got := final["crm-isolated"]; got != [3]string{"Succeeded", "24/24", "1.0000"} {
		ev := getEvaluation(t, ns, "crm-isolated")
		t.Fatalf("PHASE PROGRESS SCORE = %v, want [Succeeded 24/24 1.0000]; reason %q message %q", got, ev.Status.Reason, ev.Status.Message)
	}
	recs, _ := fetchRecords(t, ns, "crm-isolated")
	exactlyOnce(t, recs, 24)
	for _, r := range recs {
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("%s saw %q (error %q)", r.ID, r.Output, r.Error)
		}
	}
	// The 3 shards ran at once, each in a pod of its own. The run ended when
	// their heads said so; the pods end on their own moments later.
	var starts, ends []time.Time
	eventually(t, time.Minute, time.Second, "3 runner pods ended (one per shard)", func() error {
		starts, ends = nil, nil
		for _, p := range runnerPods(t, ns, "crm-isolated") {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == "runner" && cs.State.Terminated != nil {
					starts = append(starts, cs.State.Terminated.StartedAt.Time)
					ends = append(ends, cs.State.Terminated.FinishedAt.Time)
				}
			}
		}
		if len(starts) != 3 {
			return fmt.Errorf("%d runner pods ended", len(starts))
		}
		return nil
	})
	if last, first := slices.MaxFunc(starts, time.Time.Compare), slices.MinFunc(ends, time.Time.Compare); !last.Before(first) {
		t.Errorf("the shards did not run at once: the last started at %s, the first ended at %s", last, first)
	}

	// One shared database: the same Evaluation, the slot taken out of the
	// database's name. A short repairTimeout ends the slots its resets break.
	shared := crmEvaluation(t, "crm-shared", 24, func(s string) string {
		s = strings.Replace(s, "  concurrency: 8\n", "  concurrency: 8\n  shardSize: 8\n  parallelism: 3\n", 1)
		s = strings.ReplaceAll(s, "crm_$PROCTOR_SLOT", "crm_shared")
		return strings.Replace(s, "  hooks:\n", "  hooks:\n    repairTimeout: 10s\n", 1)
	})
	applyYAML(t, ns, shared)
	watchColumns(t, ns, 8*time.Minute, "crm-shared")
	recs, _ = fetchRecords(t, ns, "crm-shared")
	clobbered := 24 - len(recs)
	for _, r := range recs {
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			clobbered++
		}
	}
	t.Logf("one shared database: %d of 24 conversations saw another's state, lost their database or never finished", clobbered)
	if clobbered == 0 {
		t.Error("with one shared database no conversation was clobbered: the isolation proof proves nothing")
	}
}

// TestServiceFaults: a service that never becomes ready fails the run
// (ServiceNotReady) within its probe's budget; a failing setup hook fails it
// too (HookFailed), without retries; PostgreSQL killed mid-run
// fails the conversations in flight, naming it, and the shard goes on once
// the kubelet restarted it; a beforeSample that hangs is killed at its
// timeout.
func TestServiceFaults(t *testing.T) {
	ns := crmNamespace(t, "e2e-service-faults")
	// Alone first, so that its budget is not lost among the others' pods.
	applyYAML(t, ns, `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: never-ready}
spec:
  datasets:
  - name: d
    source: {inline: [{id: a, input: x, expected: x}]}
  services:
  - name: mock-api
    image: busybox:1.35.0
    command: [sh, -c, "echo starting; trap 'exit 0' TERM; sleep 3600 & wait"]
    ports: [{name: http, containerPort: 8081}]
    readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1, failureThreshold: 3}
  hooks:
    beforeSample: {command: ["true"]}
  models:
  - name: echo
    provider: agent
    agent: {image: busybox:1.35.0, command: [echo, x]}
`)
	watchColumns(t, ns, 3*time.Minute, "never-ready")
	applyYAML(t, ns, `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: setup-fails}
spec:
  datasets:
  - name: d
    source: {inline: [{id: a, input: x, expected: x}]}
  hooks:
    setup: {command: [sh, -c, 'echo "ERROR:  relation \"contacts\" already exists" >&2; exit 3']}
  models:
  - name: echo
    provider: agent
    agent: {image: busybox:1.35.0, command: [echo, x]}
---
apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: hook-hangs}
spec:
  concurrency: 1
  datasets:
  - name: d
    source: {inline: [{id: a, input: x, expected: x}, {id: b, input: x, expected: x}, {id: c, input: x, expected: x}]}
  hooks:
    beforeSample:
      command: [sh, -c, 'if [ "$PROCTOR_SAMPLE_ID" = b ] && [ ! -f /hooks/hung ]; then touch /hooks/hung; sleep 3600; fi']
      timeout: 3s
  models:
  - name: echo
    provider: agent
    agent: {image: busybox:1.35.0, command: [echo, x]}
  scoring: [{type: exact_match}]
`)
	// PostgreSQL killed once 4 slots' conversations are under way; the
	// service's emptyDir outlives the container the kubelet restarts.
	applyYAML(t, ns, crmEvaluation(t, "crm-crash", 40, testutil.PostgresCrashOnce))
	final := watchColumns(t, ns, 8*time.Minute, "setup-fails", "hook-hangs", "crm-crash")

	// A failed setup fails its shard at once, naming the hook and what it said.
	if ev := getEvaluation(t, ns, "setup-fails"); ev.Status.Phase != v1alpha1.PhaseFailed || ev.Status.Reason != v1alpha1.ReasonHookFailed ||
		!strings.Contains(ev.Status.Message, `spec.hooks.setup: hook setup exited with status 3: ERROR: relation "contacts" already exists`) ||
		!strings.Contains(ev.Status.Message, "(attempt 1)") {
		t.Errorf("setup-fails: phase %s reason %s message %q; want Failed, HookFailed naming the hook, on the first attempt", ev.Status.Phase, ev.Status.Reason, ev.Status.Message)
	}

	ev := getEvaluation(t, ns, "never-ready")
	if ev.Status.Phase != v1alpha1.PhaseFailed || ev.Status.Reason != v1alpha1.ReasonServiceNotReady ||
		!strings.Contains(ev.Status.Message, "service mock-api did not become ready within its readinessProbe's budget (3s: initialDelaySeconds 0 + periodSeconds 1 × failureThreshold 3)") {
		t.Errorf("never-ready: phase %s reason %s message %q; want Failed, ServiceNotReady naming mock-api", ev.Status.Phase, ev.Status.Reason, ev.Status.Message)
	}
	if d := ev.Status.CompletionTime.Sub(ev.Status.StartTime.Time); d > time.Minute {
		t.Errorf("never-ready took %s to fail on a 3s budget", d)
	}

	if got := final["hook-hangs"]; got[0] != "Succeeded" || got[1] != "3/3" {
		t.Errorf("hook-hangs: %v, want Succeeded 3/3", got)
	}
	recs, _ := fetchRecords(t, ns, "hook-hangs")
	exactlyOnce(t, recs, 3)
	for _, r := range recs {
		switch {
		case r.ID == "b" && (r.ErrorKind != "hook" || r.Error != "hook beforeSample (slot 0) timed out after 3s and was killed"):
			t.Errorf("hook-hangs b: kind %q error %q", r.ErrorKind, r.Error)
		case r.ID != "b" && r.Error != "":
			t.Errorf("hook-hangs %s: %s", r.ID, r.Error)
		}
	}

	if got := final["crm-crash"]; got[0] != "Succeeded" || got[1] != "40/40" {
		ev := getEvaluation(t, ns, "crm-crash")
		t.Errorf("crm-crash: %v, want Succeeded 40/40; message %q", got, ev.Status.Message)
	}
	recs, _ = fetchRecords(t, ns, "crm-crash")
	exactlyOnce(t, recs, 40)
	failed, example := 0, ""
	for _, r := range recs {
		switch {
		case r.Error == "" && r.Scores["exact_match"] == 1:
		case r.ErrorKind == "service" && strings.HasPrefix(r.Error, "service crm-db "):
			failed, example = failed+1, r.Error
		default:
			t.Errorf("crm-crash %s: saw %q, error %q (kind %q)", r.ID, r.Output, r.Error, r.ErrorKind)
		}
	}
	t.Logf("crm-crash: %d conversations failed naming the service, such as: %s", failed, example)
	if failed == 0 || failed > 8 {
		t.Errorf("crm-crash: %d conversations failed naming the service; want those in flight (1 to 8)", failed)
	}
	restarted := false
	for _, p := range runnerPods(t, ns, "crm-crash") {
		for _, cs := range p.Status.InitContainerStatuses {
			restarted = restarted || (cs.Name == "crm-db" && cs.RestartCount > 0)
		}
	}
	if !restarted {
		t.Error("crm-crash: the kubelet never restarted crm-db")
	}
}
