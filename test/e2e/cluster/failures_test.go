//go:build e2e

package cluster_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// failureNamespaces are the namespaces of TestFailuresAreVisible (deleted by
// TestHelmUpgradeAndUninstall, after TestSecretsNeverLeak read what they hold).
var failureNamespaces = []string{"e2e-fail-key", "e2e-fail-image", "e2e-fail-sched", "e2e-fail-quota", "e2e-fail-limitrange", "e2e-fail-oom", "e2e-fail-config"}

// failureEvaluation is an Evaluation of 20 samples in 2 shards, both running
// at once, that fails within stallTimeout 20s when its pods cannot start.
func failureEvaluation(name, model, runner string) string {
	var samples strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&samples, "      - {id: s%d, input: \"What is %d+1?\", expected: \"%d\"}\n", i, i, i+1)
	}
	return fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: %s}
spec:
  datasets:
  - name: d
    source:
      inline:
%s  models:
%s  scoring: [{type: exact_match, normalize: [trim]}]
  shardSize: 10
  parallelism: 2
  runner:
    stallTimeout: 20s
%s`, name, samples.String(), model, runner)
}

const (
	fakeModel = `  - {name: small, provider: openai, model: fake, baseURL: "http://fakellm.proctor-system.svc:8080/v1", apiKey: {env: OPENAI_API_KEY, secretKeyRef: {name: %s, key: %s}}}
`
	agentModel = `  - name: small
    provider: agent
    agent: {image: %s, command: [echo, "{{ .Prompt }}"], timeout: 10s}
`
)

// TestFailuresAreVisible: each way a runner can fail to start or run shows in
// the Evaluation's status within seconds (status.reason, kubectl get's REASON
// column, a message naming the object at fault, the Degraded condition, a
// Warning event), and ends the run Failed: at once for a shard that failed for
// good, after spec.runner.stallTimeout for pods that cannot start, whose Jobs
// are then stopped.
func TestFailuresAreVisible(t *testing.T) {
	cases := []struct {
		ns, name string
		prepare  func(t *testing.T, ns string)
		model    string
		runner   string
		// reasons accepted (the kubelet's words for the same thing vary).
		reasons []string
		message []string // all said in status.message
		stall   bool     // fails after the stall timeout, and its pods go away
		timeout time.Duration
	}{
		{ns: "e2e-fail-key", name: "missing-key", model: fmt.Sprintf(fakeModel, "openai", "nope"),
			reasons: []string{"CreateContainerConfigError"}, message: []string{`couldn't find key nope in Secret e2e-fail-key/openai`}, stall: true},
		{ns: "e2e-fail-image", name: "no-image", model: fmt.Sprintf(agentModel, "registry.invalid/proctor/no-such-agent:1"),
			reasons: []string{"ImagePullBackOff"}, message: []string{"registry.invalid/proctor/no-such-agent:1"}, stall: true},
		{ns: "e2e-fail-sched", name: "too-big", model: fmt.Sprintf(fakeModel, "openai", "api-key"),
			runner:  "    resources: {requests: {memory: 1000Gi}}\n",
			reasons: []string{"Unschedulable"}, message: []string{"cannot be scheduled", "Insufficient memory", "memory 1000Gi"}, stall: true},
		// Runner pods carry cpu and memory requests and limits (a quota that
		// demands them admits them: TestRestrictedNamespaces); one too small
		// for a pod's limits refuses it.
		{ns: "e2e-fail-quota", name: "quota", model: fmt.Sprintf(fakeModel, "openai", "api-key"),
			prepare: func(t *testing.T, ns string) {
				applyYAML(t, ns, "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: small}\nspec: {hard: {limits.memory: 512Mi}}\n")
			},
			reasons: []string{"FailedCreate"}, message: []string{"cannot create pods", "exceeded quota: small", "limits.memory"}, stall: true},
		// Runner pods pass Pod Security "restricted" (TestRestrictedNamespaces);
		// a LimitRange below the default limits refuses them at admission too.
		{ns: "e2e-fail-limitrange", name: "limitrange", model: fmt.Sprintf(agentModel, "busybox:1.35.0"),
			prepare: func(t *testing.T, ns string) {
				applyYAML(t, ns, "apiVersion: v1\nkind: LimitRange\nmetadata: {name: small}\nspec: {limits: [{type: Container, max: {memory: 128Mi}}]}\n")
			},
			reasons: []string{"FailedCreate"}, message: []string{"cannot create pods", "maximum memory usage per Container is 128Mi"}, stall: true},
		{ns: "e2e-fail-oom", name: "oom", model: fmt.Sprintf(fakeModel, "openai", "api-key"),
			runner: "    resources: {limits: {memory: 8Mi}}\n",
			// runc may be killed before the runner starts (StartError, "container init was OOM-killed").
			reasons: []string{"OOMKilled", "StartError", "RunnerFailed"}, message: []string{"8Mi"}, timeout: 5 * time.Minute},
		{ns: "e2e-fail-config", name: "empty-key", model: fmt.Sprintf(fakeModel, "empty", "api-key"),
			prepare: func(t *testing.T, ns string) {
				applyYAML(t, ns, "apiVersion: v1\nkind: Secret\nmetadata: {name: empty}\nstringData: {api-key: \"\"}\n")
			},
			reasons: []string{"ConfigurationError"}, message: []string{"configuration error", "the key of Secret empty is empty or missing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t, tc.ns)
			if tc.prepare != nil {
				tc.prepare(t, ns)
			}
			applyYAML(t, ns, failureEvaluation(tc.name, tc.model, tc.runner))
			applied := time.Now()

			// Visible within seconds.
			var reason, message string
			eventually(t, 90*time.Second, 250*time.Millisecond, "the reason in status", func() error {
				ev := getEvaluation(t, ns, tc.name)
				reason, message = ev.Status.Reason, ev.Status.Message
				if !slices.Contains(tc.reasons, reason) {
					return fmt.Errorf("phase %s reason %q message %q", ev.Status.Phase, reason, message)
				}
				return nil
			})
			visible := time.Since(applied)
			record(fmt.Sprintf("apply -> %s in status", reason), visible)
			t.Logf("%s: %s after %v: %s", tc.name, reason, visible.Round(100*time.Millisecond), message)
			if visible > 30*time.Second {
				t.Errorf("%s took %v to show in status; want seconds", reason, visible)
			}
			for _, m := range tc.message {
				if !strings.Contains(message, m) {
					t.Errorf("status.message %q does not say %q", message, m)
				}
			}
			if row := printed(t, ns); !strings.Contains(row, reason) {
				t.Errorf("kubectl get evaluations does not show %s:\n%s", reason, row)
			}
			if !tc.stall {
				// A pod that failed and that its Job retries: a GitOps tool
				// waiting on the run waits on (it read Failed between the
				// OOMKilled pod and its retry before). Once the retries run
				// out, the run is Failed, and so is kstatus.
				if res, phase := kstatusOfEvaluation(t, ns, tc.name); phase == "Running" && res.Status != kstatus.InProgressStatus {
					t.Errorf("a retried failure: kstatus %s (%s), want InProgress", res.Status, res.Message)
				}
			} else {
				ev := getEvaluation(t, ns, tc.name)
				if ev.Status.Phase != "Running" || !strings.Contains(ev.Status.Message, "the run fails at") {
					t.Errorf("a stall: phase %s message %q; want Running with its deadline", ev.Status.Phase, ev.Status.Message)
				}
				for _, c := range ev.Status.Conditions {
					if c.Type == "Progressing" && (c.Status != "False" || c.Reason != reason) {
						t.Errorf("Progressing = %s %s, want False %s", c.Status, c.Reason, reason)
					}
				}
			}

			// And it ends.
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 2 * time.Minute
			}
			eventually(t, timeout, time.Second, "Failed", func() error {
				ev := getEvaluation(t, ns, tc.name)
				if ev.Status.Phase != "Failed" {
					return fmt.Errorf("phase %s reason %q message %q", ev.Status.Phase, ev.Status.Reason, ev.Status.Message)
				}
				reason, message = ev.Status.Reason, ev.Status.Message
				return nil
			})
			record(fmt.Sprintf("apply -> Failed (%s)", tc.name), time.Since(applied))
			if !slices.Contains(tc.reasons, reason) {
				t.Errorf("Failed with reason %q (%s), want one of %v", reason, message, tc.reasons)
			}
			if strings.Contains(message, "see the logs") {
				t.Errorf("the failure says %q instead of why", message)
			}
			ev := getEvaluation(t, ns, tc.name)
			degraded := false
			for _, c := range ev.Status.Conditions {
				degraded = degraded || (c.Type == "Degraded" && c.Status == "True")
			}
			if !degraded {
				t.Errorf("no Degraded condition: %+v", ev.Status.Conditions)
			}
			if r := reasons(t, ns, "Evaluation", tc.name); !slices.Contains(r, "Failed") || !slices.ContainsFunc(r, func(s string) bool { return slices.Contains(tc.reasons, s) }) {
				t.Errorf("events %v, want %v and Failed", r, tc.reasons)
			}
			if tc.stall {
				// The ended run's pods go away (its Jobs are suspended).
				eventually(t, 90*time.Second, time.Second, "no runner pod left", func() error {
					out, err := kubectl("get", "pods", "-n", ns, "-l", "proctor.dev/component=runner", "-o", "name")
					if err != nil {
						return err
					}
					if left := strings.TrimSpace(out); left != "" {
						return fmt.Errorf("runner pods left: %s", left)
					}
					return nil
				})
			}
		})
	}
}

// testQuotaFreesUp: in a namespace whose ResourceQuota holds one runner pod
// at a time (its memory limit, 1Gi, of 1536Mi), a run of 2 workers runs them
// one after the other: the Job controller's second pod, refused while the
// first runs, is made once it ends. Meanwhile the run is never Stalled (a
// GitOps gate waiting for Ready or Stalled waits on, as it would on its
// own), even while no pod runs; and it succeeds.
func testQuotaFreesUp(t *testing.T) {
	ns := namespace(t, "e2e-quota-wait")
	applyYAML(t, ns, "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: one-runner}\nspec: {hard: {limits.memory: 1536Mi}}\n")
	// Counted by its controller first: until then it refuses every pod.
	eventually(t, time.Minute, 200*time.Millisecond, "the quota's usage", func() error {
		if used := mustKubectl(t, "-n", ns, "get", "resourcequota", "one-runner", "-o", `jsonpath={.status.used.limits\.memory}`); used == "" {
			return fmt.Errorf("no usage yet")
		}
		return nil
	})
	manifest := strings.Replace(failureEvaluation("quota", fmt.Sprintf(fakeModel, "openai", "api-key"), ""), "stallTimeout: 20s", "stallTimeout: 5m", 1)
	applyYAML(t, ns, manifest)

	// Every status write, as a watch sees it.
	out, stop := kubectlWatch(t, 5*time.Minute, "-n", ns, "get", "evaluation", "quota", "-w", "-o", "json")
	defer stop()
	var seen []string
	var phase v1alpha1.Phase
	stalled, refused := false, false
	for dec := json.NewDecoder(out); ; {
		var ev v1alpha1.Evaluation
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("the run did not succeed in 5 minutes (%v); status as watched:\n%s", err, strings.Join(seen, "\n"))
		}
		st := ev.Status
		s := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled)
		stalled = stalled || (s != nil && s.Status == metav1.ConditionTrue)
		refused = refused || st.Reason == "FailedCreate"
		seen = append(seen, fmt.Sprintf("%s %s %s", st.Phase, st.Reason, st.Message))
		if phase = st.Phase; phase == v1alpha1.PhaseSucceeded || phase == v1alpha1.PhaseFailed {
			break
		}
	}
	t.Logf("status as watched:\n%s", strings.Join(seen, "\n"))
	if phase != v1alpha1.PhaseSucceeded {
		t.Errorf("the run ended %s", phase)
	}
	if stalled {
		t.Errorf("the run was Stalled while its pods waited for the quota")
	}
	if !refused {
		t.Errorf("status never said the Job could not create a pod (did the quota refuse one?)")
	}
	events := mustKubectl(t, "get", "events", "-n", ns, "--field-selector", "reason=FailedCreate", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	if !strings.Contains(events, "exceeded quota: one-runner") {
		t.Errorf("no pod was refused by the quota; events: %q", events)
	}
}
