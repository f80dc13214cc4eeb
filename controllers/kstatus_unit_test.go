package controllers

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// computeKstatus is what kstatus, the library Flux and Helm wait with, makes of
// an Evaluation.
func computeKstatus(t *testing.T, ev *v1alpha1.Evaluation) *kstatus.Result {
	t.Helper()
	ev = ev.DeepCopy()
	ev.APIVersion, ev.Kind = v1alpha1.GroupVersion.String(), "Evaluation"
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ev)
	if err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatalf("kstatus.Compute: %v", err)
	}
	return res
}

// TestKstatusLifecycle walks one Evaluation through its phases, and edits
// that start a new run, and checks what kstatus says at each step: InProgress
// until the run ends, Current once it succeeded, Failed once it failed.
func TestKstatusLifecycle(t *testing.T) {
	h, ev, run := finishedRun(t)
	type step struct {
		name string
		do   func()
		want kstatus.Status
	}
	var newRun string
	steps := []step{
		{"running", func() {}, kstatus.InProgressStatus},
		{"suspend edited, not yet seen", func() {
			h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptr.To(true) })
		}, kstatus.InProgressStatus},
		{"suspended", func() { h.mustReconcile(ev) }, kstatus.InProgressStatus},
		{"resumed", func() {
			h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Suspend = nil })
			h.mustReconcile(ev)
		}, kstatus.InProgressStatus},
		{"succeeded", func() {
			storeModelRecords(t, h, run, "small")
			h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
			h.mustReconcile(ev)
		}, kstatus.CurrentStatus},
		{"edit that starts a new run, not yet seen", func() {
			h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Prompt = &v1alpha1.Prompt{Template: "Q: {{ .Input }}"} })
		}, kstatus.InProgressStatus},
		{"new run running", func() {
			h.mustReconcile(ev)
			newRun = h.eval("arith").Status.Run
			if newRun == run {
				t.Fatalf("the edit did not start a new run")
			}
		}, kstatus.InProgressStatus},
		{"new run failed", func() {
			h.setJobStatus("arith-small-"+newRun, batchv1.JobStatus{
				FailedIndexes: ptr.To("0-1"),
				Conditions:    []batchv1.JobCondition{jobCondition(batchv1.JobFailureTarget), jobCondition(batchv1.JobFailed)},
			})
			h.mustReconcile(ev)
		}, kstatus.FailedStatus},
	}
	for _, s := range steps {
		s.do()
		got := h.eval("arith")
		res := computeKstatus(t, got)
		if res.Status != s.want {
			t.Errorf("%s (phase %s): kstatus %s (%s), want %s", s.name, got.Status.Phase, res.Status, res.Message, s.want)
		}
	}
}

// TestKstatusOfEachState checks kstatus on Evaluations in states the
// lifecycle above does not reach, as the API server and the controller leave
// them.
func TestKstatusOfEachState(t *testing.T) {
	fresh := simpleEval("new").Obj()
	// What the API server returns for a new Evaluation: the CRD defaults
	// status.observedGeneration to -1 (checked against a real API server by
	// test/integration TestNewEvaluationIsInProgress).
	fresh.Status.ObservedGeneration = -1
	if res := computeKstatus(t, fresh); res.Status != kstatus.InProgressStatus {
		t.Errorf("new Evaluation: kstatus %s (%s), want InProgress", res.Status, res.Message)
	}

	// A missing Secret: the run cannot start until it is created.
	ev := withUID(simpleEval("nosecret").Obj())
	ev.Spec.Models[0].APIKey = &v1alpha1.APIKey{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "key"}}
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	got := h.eval("nosecret")
	if res := computeKstatus(t, got); res.Status != kstatus.FailedStatus || got.Status.Reason != v1alpha1.ReasonSecretNotFound {
		t.Errorf("missing Secret: kstatus %s (%s), reason %s; want Failed (Stalled), SecretNotFound", res.Status, res.Message, got.Status.Reason)
	}
}
