package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/results"
)

// An object of a name the run needs that the Evaluation does not control (a
// user's own, or one made to forge results) is never overwritten, adopted or
// deleted: the run stops before using it, with condition NameConflict naming it.
func TestForeignObjectsAreNeverTaken(t *testing.T) {
	ev := withUID(simpleEval("arith").RateLimit(60).Obj())
	run := cluster.RunID(ev)
	someoneElse := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: types.UID("other"), Controller: ptr.To(true)}}
	cm := func(name string, owners []metav1.OwnerReference) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, OwnerReferences: owners, Labels: cluster.Labels("arith", run, cluster.ComponentShard)},
			Data:       map[string]string{"mine": "yes"},
		}
	}
	om := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: testNS, Name: name} }
	cases := []struct {
		name      string
		kind      string
		obj       client.Object
		wantOwner string // the controller the message names ("" for none)
	}{
		{name: "the user's own NAME-results", kind: "ConfigMap", obj: cm("arith-results", nil)},
		{name: "a NAME-results controlled by something else", kind: "ConfigMap", obj: cm("arith-results", someoneElse), wantOwner: "ConfigMap x (uid other)"},
		{name: "the plan", kind: "ConfigMap", obj: cm("arith-"+run+"-plan", nil)},
		{name: "a shard head", kind: "ConfigMap", obj: cm(cluster.HeadName("arith", run, "small", 1), nil)},
		{name: "the budget", kind: "ConfigMap", obj: cm("arith-budget", nil)},
		{name: "the runner's ServiceAccount", kind: "ServiceAccount", obj: &corev1.ServiceAccount{ObjectMeta: om("arith-runner")}},
		{name: "the runner's Role", kind: "Role", obj: &rbacv1.Role{ObjectMeta: om("arith-runner")}},
		{name: "the runner's RoleBinding", kind: "RoleBinding", obj: &rbacv1.RoleBinding{ObjectMeta: om("arith-runner"), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "x"}}},
		{name: "a Job", kind: "Job", obj: &batchv1.Job{ObjectMeta: om(cluster.JobName("arith", "small", run))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{objs: []client.Object{ev, tc.obj}})
			before := tc.obj.DeepCopyObject().(client.Object)
			if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(tc.obj), before); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				h.mustReconcile(ev)
			}
			got := h.eval("arith").Status
			c := meta.FindStatusCondition(got.Conditions, v1alpha1.ConditionNameConflict)
			kind := tc.kind
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonNameConflict ||
				!strings.Contains(c.Message, kind+" "+testNS+"/"+tc.obj.GetName()+" is not Evaluation arith's") {
				t.Fatalf("NameConflict condition = %+v, want True naming %s %s", c, kind, tc.obj.GetName())
			}
			wantOwner := "has no controller"
			if tc.wantOwner != "" {
				wantOwner = "is controlled by " + tc.wantOwner
			}
			if !strings.Contains(c.Message, wantOwner) {
				t.Errorf("message %q does not say %q", c.Message, wantOwner)
			}
			if got.Reason != v1alpha1.ReasonNameConflict || got.Message != c.Message {
				t.Errorf("status reason %q message %q", got.Reason, got.Message)
			}
			after := tc.obj.DeepCopyObject().(client.Object)
			if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(tc.obj), after); err != nil {
				t.Fatalf("the object is gone: %v", err)
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("the object was changed (-before +after):\n%s", diff)
			}
			if _, isJob := tc.obj.(*batchv1.Job); !isJob && len(h.jobs()) > 0 {
				t.Errorf("Jobs started despite the conflict: %v", keys(h.jobs()))
			}
			if ev := h.rec.take(); !containsReason(ev, v1alpha1.ReasonNameConflict) {
				t.Errorf("events %v, want a NameConflict", reasons(ev))
			}

			// Freed, the name is taken and the run goes on.
			if err := h.c.Delete(h.ctx, after); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				h.mustReconcile(ev)
			}
			got = h.eval("arith").Status
			if c := meta.FindStatusCondition(got.Conditions, v1alpha1.ConditionNameConflict); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonNamesFreed {
				t.Errorf("after freeing the name: NameConflict = %+v", c)
			}
			if got.Phase != v1alpha1.PhaseRunning {
				t.Errorf("after freeing the name: phase %s (%s)", got.Phase, got.Message)
			}
		})
	}
}

// Objects found by the Evaluation's labels that it does not control are never
// read for results nor deleted, and are reported.
func TestForeignRecordsAreIgnored(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run := cluster.RunID(ev)
	h.mustReconcile(ev)
	// A head-like object that is not the Evaluation's: every pass lists it, the
	// Evaluation reports it once.
	foreignHead := headCM(t, "arith", run, shardOf("small", 7), cluster.ShardProgress{State: cluster.StateRunning, Total: 5, Done: 5}, nil)
	foreignHead.OwnerReferences = nil
	h.create(foreignHead)
	h.create(headCM(t, "arith", run, shardOf("small", 0), cluster.ShardProgress{State: cluster.StateRunning, Total: 5, Done: 2}, nil))
	h.clock.Step(time.Minute)
	h.mustReconcile(ev) // progress changed: status is written
	recs := recsOf("small", "d", 0, 1, 2, 3, 4)
	h.create(headCM(t, "arith", run, shardOf("small", 0), cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5, Scores: map[string]float64{"exact_match": 5}}, recs, 0, 1, 2, 3, 4))
	h.create(headCM(t, "arith", run, shardOf("small", 1), cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5, Scores: map[string]float64{"exact_match": 5}}, recsOf("small", "d", 5, 6, 7, 8, 9), 5, 6, 7, 8, 9))
	forgedRec := rec("small", "d", 0)
	forgedRec.Output = "FORGED"
	forged := chunkCM(t, "arith", run, shardOf("small", 0), 3, map[int]results.Record{0: forgedRec}, 0)
	forged.OwnerReferences = nil
	h.create(forged)
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	h.mustReconcile(ev)

	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("phase %s: %s", st.Phase, st.Message)
	}
	res := h.configMaps()["arith-results"]
	if strings.Contains(string(gunzip(t, res.BinaryData[cluster.ResultsKeyRecords])), "FORGED") {
		t.Errorf("a forged record reached NAME-results")
	}
	if _, ok := h.configMaps()[forged.Name]; !ok {
		t.Errorf("the forged ConfigMap was deleted")
	}
	events := h.rec.take()
	found := false
	for _, e := range events {
		if e.Reason == v1alpha1.ReasonForeignObjectIgnored && strings.Contains(e.Note, forged.Name) {
			found = true
		}
	}
	if !found {
		t.Errorf("events %v, want %s naming %s", reasons(events), v1alpha1.ReasonForeignObjectIgnored, forged.Name)
	}
	headReports := 0
	for _, e := range events {
		if e.Reason == v1alpha1.ReasonForeignObjectIgnored && strings.Contains(e.Note, foreignHead.Name+",") || strings.HasSuffix(e.Note, foreignHead.Name) {
			headReports++
		}
	}
	if headReports != 1 {
		t.Errorf("the foreign head was reported %d times, want once: %v", headReports, events)
	}
	if p := h.eval("arith").Status.Progress; p == nil || p.Completed != 10 {
		t.Errorf("progress %+v: the foreign head counted", p)
	}
}

func containsReason(events []recordedEvent, reason string) bool {
	for _, e := range events {
		if e.Reason == reason {
			return true
		}
	}
	return false
}
