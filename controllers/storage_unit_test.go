package controllers

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// TestStorageBudgetOfANamespace: the per-run storage budget alone let about 60
// runs fill a 4 GiB etcd. A namespace's (and the cluster's) Evaluations keep
// at most their budget: a new run whose own budget does not fit beside them
// waits, Pending and saying how to make room, and starts once there is.
func TestStorageBudgetOfANamespace(t *testing.T) {
	mk := func(name string) *v1alpha1.Evaluation {
		return withUID(testutil.MakeEvaluation(name, testNS).InlineDataset("d", 10).OpenAIModel("m", llmURL).
			Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj())
	}
	first, second := mk("first"), mk("second")
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"namespace", Options{StorageBudget: 64 << 20, NamespaceStorageBudget: 100 << 20}},
		{"cluster", Options{StorageBudget: 64 << 20, ClusterStorageBudget: 100 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{objs: []client.Object{first.DeepCopy(), second.DeepCopy()}, opts: tc.opts})
			h.mustReconcile(h.eval("first"))
			h.mustReconcile(h.eval("second"))
			if st := h.eval("first").Status; st.Reason == v1alpha1.ReasonStorageFull {
				t.Fatalf("the first run was held: %q", st.Message)
			}
			st := h.eval("second").Status
			if st.Phase != v1alpha1.PhasePending || st.Reason != v1alpha1.ReasonStorageFull || !strings.Contains(st.Message, "delete Evaluations") {
				t.Errorf("second: phase %s reason %q message %q; want Pending, StorageFull, saying how to make room", st.Phase, st.Reason, st.Message)
			}
			if len(h.jobs()) > 1 {
				t.Errorf("%d Jobs: the held run made one", len(h.jobs()))
			}
			// The first is deleted: its records go, the second starts.
			if err := h.c.Delete(h.ctx, h.eval("first")); err != nil {
				t.Fatal(err)
			}
			h.mustReconcile(h.eval("second"))
			if st := h.eval("second").Status; st.Reason == v1alpha1.ReasonStorageFull {
				t.Errorf("second still held once there is room: %q", st.Message)
			}
		})
	}
}
