//go:build e2e

package cluster_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/compare"
)

// gatedEvaluation is an Evaluation of n additions answered by the fake
// server's port, with spec.baseline and spec.gate when gate is set.
func gatedEvaluation(ns, name string, port, n int, gate string) string {
	return additionsEvaluation(name, n, fmt.Sprintf(`    provider: openai
    model: fake-model
    baseURL: http://gated.%s.svc:%d/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
`, ns, port), fmt.Sprintf("  shardSize: %d\n%s", n/2, gate))
}

// kstatusOfEvaluation is kstatus's view of an Evaluation read with kubectl, as
// Flux and Helm compute it, and the phase of the same read.
func kstatusOfEvaluation(t *testing.T, ns, name string) (*kstatus.Result, string) {
	t.Helper()
	// As a client-go reader decodes it: integers as int64, as kstatus expects.
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(mustKubectl(t, "get", "evaluation", "-n", ns, name, "-o", "json"))); err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return res, phase
}

// waitKstatus polls until kstatus says the Evaluation is Current or Failed,
// as `flux` and `helm --wait` do, and returns what it said.
func waitKstatus(t *testing.T, ns, name string, timeout time.Duration) *kstatus.Result {
	t.Helper()
	var res *kstatus.Result
	eventually(t, timeout, time.Second, "kstatus of evaluation/"+name+" Current or Failed", func() error {
		res, _ = kstatusOfEvaluation(t, ns, name)
		if res.Status == kstatus.CurrentStatus || res.Status == kstatus.FailedStatus {
			return nil
		}
		return fmt.Errorf("%w: %s (%s)", errNotYet, res.Status, res.Message)
	})
	return res
}

// testGateInACluster is the GitOps flow: a baseline run, then candidates
// gated against it. `kubectl wait --for=condition=Ready` returns for the
// candidate that kept the baseline's score; the one whose model got worse
// (the fake server answers 40% of the questions wrong) ends Failed with
// RegressionDetected, Stalled True and Ready False, which `kubectl wait
// --for=condition=Stalled` and kstatus (Failed) both see, and which `kubectl
// wait --for=condition=Ready` never accepts.
func testGateInACluster(t *testing.T) {
	ns := namespace(t, "e2e-gate")
	const n = 80
	fakeServers(t, ns, "gated", []string{"-seed=3"}, []string{"-wrong-rate=0.4", "-seed=3"})
	gate := `  baseline: {evaluation: nightly}
  gate:
    rules:
    - {metric: exact_match, min: 0.5, maxDrop: 0.02}
`
	start := time.Now()
	applyYAML(t, ns, gatedEvaluation(ns, "nightly", 8081, n, ""))
	if res, _ := kstatusOfEvaluation(t, ns, "nightly"); res.Status != kstatus.InProgressStatus {
		t.Errorf("right after kubectl apply: kstatus %s (%s), want InProgress", res.Status, res.Message)
	}
	mustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "evaluation/nightly", "--timeout=5m")
	if res, _ := kstatusOfEvaluation(t, ns, "nightly"); res.Status != kstatus.CurrentStatus {
		t.Errorf("nightly Ready: kstatus %s (%s), want Current", res.Status, res.Message)
	}

	// Both candidates are applied at once, as a GitOps sync would.
	applyYAML(t, ns, gatedEvaluation(ns, "same", 8081, n, gate)+"---\n"+gatedEvaluation(ns, "regressed", 8082, n, gate))
	mustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "evaluation/same", "--timeout=5m")
	same := getEvaluation(t, ns, "same")
	if same.Status.Gate == nil || !same.Status.Gate.Passed || same.Status.Comparison == nil {
		t.Fatalf("same: gate %+v comparison %+v", same.Status.Gate, same.Status.Comparison)
	}
	if c := same.Status.Comparison.Results[0]; c.Paired != n || c.Metrics[0].Diff != "+0.0000" || c.Metrics[0].Test != "mcnemar" {
		t.Errorf("same: comparison %+v, want %d pairs and no difference", c, n)
	}
	if res := waitKstatus(t, ns, "same", time.Minute); res.Status != kstatus.CurrentStatus {
		t.Errorf("same: kstatus %s (%s), want Current", res.Status, res.Message)
	}

	mustKubectl(t, "wait", "-n", ns, "--for=condition=Stalled", "evaluation/regressed", "--timeout=5m")
	record("a baseline and two gated candidates, waited for with kubectl wait", time.Since(start))
	if res := waitKstatus(t, ns, "regressed", time.Minute); res.Status != kstatus.FailedStatus {
		t.Errorf("regressed: kstatus %s (%s), want Failed", res.Status, res.Message)
	}
	reg := getEvaluation(t, ns, "regressed")
	st := reg.Status
	ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	if st.Phase != v1alpha1.PhaseFailed || st.Reason != v1alpha1.ReasonRegressionDetected || ready == nil ||
		ready.Status != "False" || ready.Reason != v1alpha1.ReasonRegressionDetected || ready.ObservedGeneration != reg.Generation {
		t.Errorf("regressed: phase %s reason %s Ready %+v", st.Phase, st.Reason, ready)
	}
	if st.Gate == nil || st.Gate.Passed || len(st.Gate.Violations) == 0 || !strings.Contains(st.Gate.Violations[0], "exact_match fell") {
		t.Errorf("regressed: gate %+v", st.Gate)
	}
	if st.Comparison == nil || len(st.Comparison.Results) == 0 || len(st.Comparison.Results[0].Metrics) == 0 {
		t.Fatalf("regressed: no comparison in status (%+v): the run was not compared", st.Comparison)
	}
	if m := st.Comparison.Results[0].Metrics[0]; !strings.HasPrefix(m.Diff, "-") || !strings.HasPrefix(m.Hi, "-") {
		t.Errorf("regressed: comparison %+v, want a drop whose whole interval is below 0", m)
	}
	if !contains(reasons(t, ns, "Evaluation", "regressed"), v1alpha1.ReasonFailed) {
		t.Errorf("regressed: no Failed event")
	}
	// A script blocking on Ready is not fooled: the wait times out.
	if out, err := kubectl("wait", "-n", ns, "--for=condition=Ready", "evaluation/regressed", "--timeout=3s"); err == nil {
		t.Errorf("kubectl wait --for=condition=Ready accepted the regressed run: %s", out)
	}
	// proctor compare says what status says, from the cluster's results.
	out, err := run(time.Minute, proctorBin, "compare", "evaluation/nightly", "evaluation/regressed", "-n", ns, "-o", "json")
	var rep compare.Report
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Results) != 1 || len(rep.Results[0].Metrics) != 1 {
		t.Fatalf("proctor compare: %v\n%s", err, out)
	}
	if m, want := rep.Results[0].Metrics[0], st.Comparison.Results[0].Metrics[0]; fmt.Sprintf("%+.4f", m.Diff) != want.Diff || fmt.Sprintf("%.6f", m.PValue) != want.PValue {
		t.Errorf("proctor compare: diff %+.4f p %.6f; status: diff %s p %s", m.Diff, m.PValue, want.Diff, want.PValue)
	}

	// A copy of nightly's results kept as the release baseline (a ConfigMap of
	// the user's own) gates as well as the Evaluation did.
	var cm corev1.ConfigMap
	if err := json.Unmarshal([]byte(mustKubectl(t, "get", "configmap", "-n", ns, "nightly-results", "-o", "json")), &cm); err != nil {
		t.Fatal(err)
	}
	// Without nightly's labels: the copy is the user's, not the Evaluation's
	// (its records are in it, so it needs no other object).
	cm.ObjectMeta = metav1.ObjectMeta{Name: "release-baseline", Annotations: cm.Annotations}
	copied, err := json.Marshal(&cm)
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, ns, string(copied))
	applyYAML(t, ns, gatedEvaluation(ns, "from-copy", 8081, n, strings.Replace(gate, "{evaluation: nightly}", "{configMap: release-baseline}", 1)))
	mustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "evaluation/from-copy", "--timeout=5m")
	if c := getEvaluation(t, ns, "from-copy").Status.Comparison; c == nil || !strings.HasPrefix(c.Baseline, "configMap/release-baseline") || c.Results[0].Paired != n {
		t.Errorf("from-copy: comparison %+v, want %d samples paired with configMap/release-baseline", c, n)
	}

	// The summary in NAME-results holds the comparison and the verdict.
	var sum struct {
		Comparison *struct{ Baseline string } `json:"comparison"`
		Gate       *struct{ Passed bool }     `json:"gate"`
	}
	raw := mustKubectl(t, "get", "configmap", "-n", ns, "regressed-results", "-o", `jsonpath={.data.summary\.json}`)
	if err := json.Unmarshal([]byte(raw), &sum); err != nil || sum.Gate == nil || sum.Gate.Passed || sum.Comparison == nil ||
		!strings.HasPrefix(sum.Comparison.Baseline, "evaluation/nightly") {
		t.Errorf("regressed-results summary.json: %v\n%s", err, raw)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
