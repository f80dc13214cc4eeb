package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// kstatusOf reads an Evaluation as unstructured, as Flux and Helm do, and
// computes its kstatus.
func kstatusOf(t *testing.T, ns, name string) (*kstatus.Result, *unstructured.Unstructured) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Evaluation"))
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res, u
}

// TestKstatusWithTheAPIServer: a new Evaluation is InProgress for kstatus
// before the controller saw it (the CRD defaults status.observedGeneration to
// -1), Current once it succeeded with Ready True, and InProgress again right
// after an edit that starts a new run.
func TestKstatusWithTheAPIServer(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	ev := testutil.MakeEvaluation("gitops", ns).InlineDataset("d", 6).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(3).Obj()
	create(t, ev)
	if ev.Status.ObservedGeneration != -1 {
		t.Errorf("the API server's answer to the create has status.observedGeneration %d, want -1", ev.Status.ObservedGeneration)
	}
	if res, u := kstatusOf(t, ns, "gitops"); res.Status != kstatus.InProgressStatus {
		t.Errorf("new Evaluation: kstatus %s (%s), want InProgress; status %v", res.Status, res.Message, u.Object["status"])
	}

	startManager(t, ns)
	startKubelet(t, ns)
	eventually(t, 60*time.Second, "kstatus Current with Ready True", func() (bool, string) {
		res, _ := kstatusOf(t, ns, "gitops")
		got := getEvaluation(t, ns, "gitops")
		ready := meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady)
		return res.Status == kstatus.CurrentStatus && ready && got.Status.Phase == v1alpha1.PhaseSucceeded,
			fmt.Sprintf("kstatus %s (%s), phase %s, Ready %v", res.Status, res.Message, got.Status.Phase, ready)
	})

	got := getEvaluation(t, ns, "gitops")
	firstRun := got.Status.Run
	got.Spec.Prompt = &v1alpha1.Prompt{Template: "Q: {{ .Input }}"}
	if err := k8sClient.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	// The update's answer is the object before the controller saw the edit.
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(got)
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := kstatus.Compute(&unstructured.Unstructured{Object: obj}); res.Status != kstatus.InProgressStatus {
		t.Errorf("right after an edit that starts a new run: kstatus %s (%s), want InProgress", res.Status, res.Message)
	}
	eventually(t, 60*time.Second, "the new run Current", func() (bool, string) {
		res, _ := kstatusOf(t, ns, "gitops")
		got := getEvaluation(t, ns, "gitops")
		return res.Status == kstatus.CurrentStatus && got.Status.ObservedGeneration == got.Generation && got.Status.Run != firstRun,
			fmt.Sprintf("kstatus %s (%s), run %s generation %d/%d", res.Status, res.Message, got.Status.Run, got.Status.ObservedGeneration, got.Generation)
	})
}
