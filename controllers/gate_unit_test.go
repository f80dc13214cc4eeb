package controllers

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/results"
)

func number(s string) *v1alpha1.Number { n := v1alpha1.Number(s); return &n }

// baselineEvaluation is an ended Evaluation "nightly" whose NAME-results
// embeds records of model small on dataset d: every sample passes.
func baselineEvaluation(t *testing.T, h *harness, phase v1alpha1.Phase) {
	t.Helper()
	base := withUID(testutil.MakeEvaluation("nightly", testNS).InlineDataset("d", 10).OpenAIModel("small", llmURL).
		Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj())
	h.create(base)
	base.Status = v1alpha1.EvaluationStatus{Phase: phase, Run: "base0001"}
	if phase == v1alpha1.PhaseSucceeded {
		base.Status.ResultsConfigMap = "nightly-results"
	}
	if err := h.c.Status().Update(h.ctx, base); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for i := range 10 {
		r := rec("small", "d", i)
		r.Scores = map[string]float64{"exact_match": 1}
		b, _ := json.Marshal(&r)
		if _, err := zw.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	h.create(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "nightly-results", OwnerReferences: ownedBy("nightly"),
			Annotations: map[string]string{cluster.AnnotationRun: "base0001"}},
		Data:       map[string]string{cluster.ResultsKeySummary: `{"results": []}`},
		BinaryData: map[string][]byte{cluster.ResultsKeyRecords: buf.Bytes()},
	})
}

// TestGateAndBaseline: a run is compared with its baseline and gated when it
// ends; editing the gate judges the same records again without a new run.
func TestGateAndBaseline(t *testing.T) {
	h, ev, run := finishedRun(t)
	baselineEvaluation(t, h, v1alpha1.PhaseSucceeded)
	// The run's mean is 0.5 (storeModelRecords), the baseline's 1: five
	// discordant pairs, McNemar p = 2/32 = 0.0625.
	h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) {
		s.Baseline = &v1alpha1.Baseline{Evaluation: "nightly"}
		s.Gate = &v1alpha1.Gate{Rules: []v1alpha1.GateRule{{Metric: "exact_match", Min: number("0.4"), MaxDrop: number("0.1")}}}
	})
	storeModelRecords(t, h, run, "small")
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	h.mustReconcile(ev)

	got := h.eval("arith")
	st := got.Status
	if st.Phase != v1alpha1.PhaseSucceeded || st.Gate == nil || !st.Gate.Passed || st.Gated != cluster.GateHash(&got.Spec) {
		t.Fatalf("phase %s gate %+v gated %q: want Succeeded, passed (the drop is not significant at 0.05)", st.Phase, st.Gate, st.Gated)
	}
	want := &v1alpha1.ComparisonStatus{Baseline: "evaluation/nightly (run base0001)", Results: []v1alpha1.ComparedResult{{
		Model: "small", BaselineModel: "small", Dataset: "d", Paired: 10,
		Metrics: []v1alpha1.MetricComparison{{Metric: "exact_match", Baseline: "1.0000", Current: "0.5000", Diff: "-0.5000",
			Lo: st.Comparison.Results[0].Metrics[0].Lo, Hi: st.Comparison.Results[0].Metrics[0].Hi, PValue: "0.062500", Test: compare.TestMcNemar}},
	}}}
	if diff := cmp.Diff(want, st.Comparison); diff != "" {
		t.Errorf("comparison (-want +got):\n%s", diff)
	}
	if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("Ready is not True: %+v", st.Conditions)
	}
	if !slices.Contains(reasons(h.rec.take()), v1alpha1.ReasonGatePassed) {
		t.Errorf("no GatePassed event")
	}
	var sum compare.Summary
	if err := json.Unmarshal([]byte(h.configMaps()["arith-results"].Data[cluster.ResultsKeySummary]), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Gate == nil || !sum.Gate.Passed || sum.Comparison == nil || sum.Comparison.Results[0].Paired != 10 {
		t.Errorf("summary.json gate %+v comparison %+v", sum.Gate, sum.Comparison)
	}

	// Gated at 0.1, the drop is significant: the same run ends Failed.
	jobs := len(h.jobs())
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Gate.Significance = number("0.1") })
	h.mustReconcile(ev)
	got = h.eval("arith")
	st = got.Status
	if st.Phase != v1alpha1.PhaseFailed || st.Reason != v1alpha1.ReasonRegressionDetected || st.Run != run || len(h.jobs()) != jobs {
		t.Fatalf("after the gate's edit: phase %s reason %s run %s (was %s), %d Jobs (were %d)", st.Phase, st.Reason, st.Run, run, len(h.jobs()), jobs)
	}
	if !strings.Contains(st.Message, "exact_match fell 0.5000 from the baseline, more than maxDrop 0.1") || st.Gate.Passed {
		t.Errorf("message %q gate %+v", st.Message, st.Gate)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonRegressionDetected {
		t.Errorf("Stalled = %+v", c)
	}
	if res := computeKstatus(t, got); res.Status != kstatus.FailedStatus {
		t.Errorf("kstatus %s, want Failed", res.Status)
	}
	// A pass that changes nothing keeps the verdict.
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Reason != v1alpha1.ReasonRegressionDetected {
		t.Errorf("a second pass changed the verdict: %s", st.Reason)
	}

	// Without the gate, the run succeeded.
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Gate = nil })
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Phase != v1alpha1.PhaseSucceeded || st.Gate != nil || st.Comparison == nil {
		t.Errorf("without the gate: phase %s gate %+v comparison %v", st.Phase, st.Gate, st.Comparison != nil)
	}
}

// TestBaselineNotThere: a run whose baseline does not exist waits before it
// starts (Stalled); one whose baseline Evaluation is still running waits at
// its end (Reconciling), and ends once the baseline has.
func TestBaselineNotThere(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	ev.Spec.Baseline = &v1alpha1.Baseline{Evaluation: "nightly"}
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	got := h.eval("arith")
	if got.Status.Phase != v1alpha1.PhasePending || got.Status.Reason != v1alpha1.ReasonBaselineNotFound || len(h.jobs()) != 0 {
		t.Fatalf("phase %s reason %s, %d Jobs: want Pending BaselineNotFound, none", got.Status.Phase, got.Status.Reason, len(h.jobs()))
	}
	if res := computeKstatus(t, got); res.Status != kstatus.FailedStatus {
		t.Errorf("kstatus %s, want Failed (Stalled)", res.Status)
	}

	baselineEvaluation(t, h, v1alpha1.PhaseRunning)
	h.mustReconcile(ev)
	run := h.eval("arith").Status.Run
	storeModelRecords(t, h, run, "small")
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	h.mustReconcile(ev)
	got = h.eval("arith")
	if got.Status.Phase != v1alpha1.PhaseRunning || got.Status.Reason != v1alpha1.ReasonWaitingForBaseline {
		t.Fatalf("phase %s reason %s, want Running WaitingForBaseline", got.Status.Phase, got.Status.Reason)
	}
	if res := computeKstatus(t, got); res.Status != kstatus.InProgressStatus {
		t.Errorf("kstatus %s, want InProgress", res.Status)
	}

	base := h.eval("nightly")
	base.Status.Phase, base.Status.ResultsConfigMap = v1alpha1.PhaseSucceeded, "nightly-results"
	if err := h.c.Status().Update(h.ctx, base); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Phase != v1alpha1.PhaseSucceeded || st.Comparison == nil || st.Comparison.Results[0].Paired != 10 {
		t.Errorf("phase %s comparison %+v, want Succeeded with 10 pairs", st.Phase, st.Comparison)
	}
}

// TestBaselineCopyWhoseRecordsAreGone: a copied results ConfigMap that lists
// its records in ConfigMaps of a run since replaced can no longer be read: the
// run ends BaselineNotFound, with its own results written, rather than
// failing its reconciles forever.
func TestBaselineCopyWhoseRecordsAreGone(t *testing.T) {
	h, ev, run := finishedRun(t)
	baselineEvaluation(t, h, v1alpha1.PhaseSucceeded)
	h.create(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "release",
			Labels:      map[string]string{cluster.LabelEvaluation: "nightly"},
			Annotations: map[string]string{cluster.AnnotationRun: "gone0001"}},
		Data: map[string]string{cluster.ResultsKeySummary: `{"results": []}`, cluster.ResultsKeyChunks: "nightly-gone0001-small-0\n"},
	})
	h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Baseline = &v1alpha1.Baseline{ConfigMap: "release"} })
	storeModelRecords(t, h, run, "small")
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	if _, err := h.reconcile(ev); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhaseFailed || st.Reason != v1alpha1.ReasonBaselineNotFound || !strings.Contains(st.Message, "configMap/release") {
		t.Errorf("phase %s reason %s message %q; want Failed BaselineNotFound naming the copy", st.Phase, st.Reason, st.Message)
	}
	if st.ResultsConfigMap != "arith-results" || len(st.Results) != 1 {
		t.Errorf("the run's own results were not kept: %q %v", st.ResultsConfigMap, st.Results)
	}
}

// TestComparisonStatusSaysWhatToTrust: what proctor compare and summary.json
// say of a comparison a reader must know (pairing by position, few pairs)
// shows in status.comparison too.
func TestComparisonStatusSaysWhatToTrust(t *testing.T) {
	ev := testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Obj()
	p := passFor(ev)
	res := compare.Result{Model: "small", BaselineModel: "small", Dataset: "d", Paired: 3, Unmatched: 7, BaselineUnmatched: 7, ByPosition: true}
	setGateStatus(p, &compare.Summary{Comparison: &compare.Report{Baseline: "evaluation/nightly", Results: []compare.Result{res}}})
	got := p.status.Comparison.Results[0]
	if !got.ByPosition {
		t.Error("status.comparison.results[0].byPosition is false")
	}
	if diff := cmp.Diff(res.Notes(), got.Notes); diff != "" || len(got.Notes) != 2 {
		t.Errorf("notes (-want +got), want the few pairs and the pairing by position:\n%s", diff)
	}
}

// TestIncompleteRunHasNoVerdictInStatus: a run that did not finish every
// sample has no verdict in status.gate, as in summary.json and the CLI.
func TestIncompleteRunHasNoVerdictInStatus(t *testing.T) {
	ev := testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Obj()
	ev.Spec.Gate = &v1alpha1.Gate{Rules: []v1alpha1.GateRule{{Metric: "exact_match", Min: number("0.1")}}}
	p := passFor(ev)
	v := compare.Check(apiconv.Gate(ev.Spec.Gate), []results.Summary{{Model: "small", Dataset: "d", Total: 10, Completed: 4, Metrics: map[string]float64{"exact_match": 1}}}, nil)
	setGateStatus(p, &compare.Summary{Gate: &v})
	if g := p.status.Gate; g == nil || g.Passed || g.Incomplete != "4 of 10 samples finished" {
		t.Errorf("status.gate = %+v, want no verdict: not passed, incomplete 4 of 10", g)
	}
}
