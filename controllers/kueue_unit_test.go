package controllers

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// TestKueueQueuedJobs: a run with a queue (its own, or the manager's)
// labels its runner Jobs for Kueue and creates them suspended, Kueue's to
// start; with a priority class and partial admission where asked. Without
// a queue nothing changes; a queue on a cluster without Kueue holds the run
// with a reason.
func TestKueueQueuedJobs(t *testing.T) {
	for _, tc := range []struct {
		name          string
		spec          func(*v1alpha1.EvaluationSpec)
		defaultQueue  string
		noKueue       bool
		wantQueue     string
		wantSuspended bool
		wantMinPar    string
		wantPriority  string
		wantReason    string
	}{
		{name: "no queue"},
		{name: "no queue, Kueue installed", wantQueue: ""},
		{
			name: "its own queue",
			spec: func(s *v1alpha1.EvaluationSpec) {
				s.Scheduling = &v1alpha1.Scheduling{QueueName: "team-a", PriorityClassName: "evals-low", MinParallelism: ptr.To[int32](1)}
			},
			wantQueue: "team-a", wantSuspended: true, wantMinPar: "1", wantPriority: "evals-low", wantReason: v1alpha1.ReasonQueued,
		},
		{
			// Kueue refuses a min-parallelism not below the pods at once.
			name: "partial admission at parallelism is all or nothing",
			spec: func(s *v1alpha1.EvaluationSpec) {
				s.Scheduling = &v1alpha1.Scheduling{QueueName: "team-a", MinParallelism: ptr.To[int32](2)}
			},
			wantQueue: "team-a", wantSuspended: true, wantReason: v1alpha1.ReasonQueued,
		},
		{name: "the manager's queue", defaultQueue: "default", wantQueue: "default", wantSuspended: true, wantReason: v1alpha1.ReasonQueued},
		{
			name: "its own over the manager's", defaultQueue: "default",
			spec:      func(s *v1alpha1.EvaluationSpec) { s.Scheduling = &v1alpha1.Scheduling{QueueName: "team-a"} },
			wantQueue: "team-a", wantSuspended: true, wantReason: v1alpha1.ReasonQueued,
		},
		{
			name: "a queue without Kueue", noKueue: true,
			spec:       func(s *v1alpha1.EvaluationSpec) { s.Scheduling = &v1alpha1.Scheduling{QueueName: "team-a"} },
			wantReason: v1alpha1.ReasonKueueNotInstalled,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := simpleEval("arith").Parallelism(2)
			if tc.spec != nil {
				tc.spec(&w.Spec)
			}
			ev := withUID(w.Obj())
			h := newHarness(t, harnessOpts{objs: []client.Object{ev}, opts: Options{QueueName: tc.defaultQueue}})
			h.r.Kueue = !tc.noKueue && tc.name != "no queue"
			h.mustReconcile(ev)
			st := h.eval("arith").Status
			if st.Reason != tc.wantReason {
				t.Errorf("reason %q (%s), want %q", st.Reason, st.Message, tc.wantReason)
			}
			jobs := h.jobs()
			if tc.wantReason == v1alpha1.ReasonKueueNotInstalled {
				if len(jobs) != 0 || st.Phase != v1alpha1.PhasePending || !strings.Contains(st.Message, "Kueue is not installed") {
					t.Errorf("jobs %v, phase %s %q: want none, Pending, and why", keys(jobs), st.Phase, st.Message)
				}
				return
			}
			if len(jobs) != 1 {
				t.Fatalf("jobs = %v, want 1", keys(jobs))
			}
			for _, j := range jobs {
				got := []string{j.Labels[cluster.LabelKueueQueueName], j.Annotations[cluster.AnnotationKueueMinParallelism], j.Spec.Template.Spec.PriorityClassName}
				if diff := cmp.Diff([]string{tc.wantQueue, tc.wantMinPar, tc.wantPriority}, got); diff != "" {
					t.Errorf("queue label, min-parallelism, priority class (-want +got):\n%s", diff)
				}
				if ptr.Deref(j.Spec.Suspend, false) != tc.wantSuspended {
					t.Errorf("Job suspend = %v, want %v", ptr.Deref(j.Spec.Suspend, false), tc.wantSuspended)
				}
			}
		})
	}
}

// workloadFor is the Workload Kueue makes for job, with its conditions.
func workloadFor(job *batchv1.Job, queue string, conditions ...map[string]any) *unstructured.Unstructured {
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(cluster.WorkloadGVK)
	w.SetNamespace(job.Namespace)
	w.SetName("job-" + job.Name + "-1a2b3")
	w.SetLabels(map[string]string{cluster.LabelKueueJobUID: string(job.UID)})
	w.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}})
	_ = unstructured.SetNestedField(w.Object, queue, "spec", "queueName")
	conds := make([]any, len(conditions))
	for i, c := range conditions {
		conds[i] = c
	}
	_ = unstructured.SetNestedSlice(w.Object, conds, "status", "conditions")
	return w
}

func cond(t, status, reason, message string) map[string]any {
	return map[string]any{"type": t, "status": status, "reason": reason, "message": message, "lastTransitionTime": "2025-03-04T05:06:07Z"}
}

// TestKueueAdmission: a queued run says it is queued, and why, from its
// Workload; once Kueue admits the Job (fewer pods than asked: partial
// admission) Proctor leaves its suspend and parallelism to Kueue; spec.suspend
// deactivates the Workload instead of suspending the Job, and resuming
// activates it again.
func TestKueueAdmission(t *testing.T) {
	ev := withUID(simpleEval("arith").Parallelism(4).Queue("team-a").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.r.Kueue = true
	h.mustReconcile(ev)
	var job *batchv1.Job
	for _, j := range h.jobs() {
		job = j
	}
	status := func() v1alpha1.EvaluationStatus {
		t.Helper()
		h.mustReconcile(ev)
		return h.eval("arith").Status
	}
	admitted := func(st v1alpha1.EvaluationStatus) *metav1.Condition {
		return meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAdmitted)
	}

	// Kueue has not taken the Job up yet.
	st := status()
	if st.Phase != v1alpha1.PhasePending || st.Reason != v1alpha1.ReasonQueued || !strings.Contains(st.Message, "waits for Kueue") {
		t.Errorf("before its Workload: %s %s %q", st.Phase, st.Reason, st.Message)
	}

	// It waits for quota.
	const why = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 4 more needed"
	w := workloadFor(job, "team-a", cond("QuotaReserved", "False", "Pending", why))
	if err := h.c.Create(h.ctx, w); err != nil {
		t.Fatal(err)
	}
	st = status()
	if st.Phase != v1alpha1.PhasePending || st.Reason != v1alpha1.ReasonQueued || !strings.Contains(st.Message, "queue team-a: "+why) {
		t.Errorf("waiting for quota: %s %s %q", st.Phase, st.Reason, st.Message)
	}
	if c := admitted(st); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonQueued {
		t.Errorf("Admitted = %+v, want False, Queued", c)
	}
	if j := h.jobs()[job.Name]; !ptr.Deref(j.Spec.Suspend, false) {
		t.Error("Proctor unsuspended a Job Kueue had not admitted")
	}
	// Moved to another queue while it waits: Kueue follows the label.
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Scheduling.QueueName = "team-b" })
	status()
	if got := h.jobs()[job.Name].Labels[cluster.LabelKueueQueueName]; got != "team-b" {
		t.Errorf("the waiting Job's queue is %q after the edit, want team-b", got)
	}

	// Kueue admits it with 2 pods of the 4 (partial admission), and starts it.
	_ = unstructured.SetNestedSlice(w.Object, []any{cond("QuotaReserved", "True", "QuotaReserved", ""), cond("Admitted", "True", "Admitted", "")}, "status", "conditions")
	_ = unstructured.SetNestedField(w.Object, "cq-team-a", "status", "admission", "clusterQueue")
	if err := h.c.Update(h.ctx, w); err != nil {
		t.Fatal(err)
	}
	j := h.jobs()[job.Name]
	j.Spec.Suspend, j.Spec.Parallelism = ptr.To(false), ptr.To[int32](2)
	if err := h.c.Update(h.ctx, j); err != nil {
		t.Fatal(err)
	}
	st = status()
	j = h.jobs()[job.Name]
	if ptr.Deref(j.Spec.Suspend, true) || *j.Spec.Parallelism != 2 {
		t.Errorf("admitted Job: suspend %v, parallelism %d; want Kueue's false and 2", ptr.Deref(j.Spec.Suspend, true), *j.Spec.Parallelism)
	}
	if c := admitted(st); c == nil || c.Status != metav1.ConditionTrue || st.Reason == v1alpha1.ReasonQueued || st.Phase != v1alpha1.PhaseRunning {
		t.Errorf("admitted: Admitted %+v, %s %s", c, st.Phase, st.Reason)
	}

	// Admitted, it stays in its queue whatever the spec says now.
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Scheduling.QueueName = "team-c" })
	status()
	if got := h.jobs()[job.Name].Labels[cluster.LabelKueueQueueName]; got != "team-b" {
		t.Errorf("the admitted Job moved to queue %q", got)
	}

	// Suspended: the Workload is deactivated; the Job is Kueue's to stop.
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptr.To(true) })
	st = status()
	active := func() bool {
		t.Helper()
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(cluster.WorkloadGVK)
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(w), got); err != nil {
			t.Fatal(err)
		}
		v, found, _ := unstructured.NestedBool(got.Object, "spec", "active")
		return !found || v
	}
	if active() || st.Phase != v1alpha1.PhaseSuspended {
		t.Errorf("suspended: Workload active %v, phase %s", active(), st.Phase)
	}
	if j := h.jobs()[job.Name]; ptr.Deref(j.Spec.Suspend, false) {
		t.Error("Proctor suspended a Job Kueue admitted: Kueue would start it again")
	}
	// Resumed: Kueue may admit it again.
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptr.To(false) })
	status()
	if !active() {
		t.Error("resumed: the Workload is still inactive")
	}
}

// TestKueueEvents: a run Kueue preempts says so, and one admitted again
// goes on (Admitted), rather than starting again.
func TestKueueEvents(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to v1alpha1.EvaluationStatus
		want     []string
	}{
		{
			name: "preempted",
			from: v1alpha1.EvaluationStatus{Phase: v1alpha1.PhaseRunning, Progress: &v1alpha1.Progress{Completed: 5, Total: 10, Text: "5/10"}},
			to: v1alpha1.EvaluationStatus{Phase: v1alpha1.PhasePending, Reason: v1alpha1.ReasonQueued, Message: "Job j waits in queue q: Preempted",
				Progress: &v1alpha1.Progress{Completed: 5, Total: 10, Text: "5/10"}},
			want: []string{"Queued: Kueue holds the run's Jobs (5/10 done, kept): Job j waits in queue q: Preempted"},
		},
		{
			name: "admitted again",
			from: v1alpha1.EvaluationStatus{Phase: v1alpha1.PhasePending, Reason: v1alpha1.ReasonQueued, Progress: &v1alpha1.Progress{Completed: 5, Total: 10, Text: "5/10"}},
			to:   v1alpha1.EvaluationStatus{Phase: v1alpha1.PhaseRunning, Progress: &v1alpha1.Progress{Completed: 5, Total: 10, Text: "5/10"}},
			want: []string{"Admitted: Kueue admitted the run's Jobs again: it goes on from 5/10"},
		},
		{
			name: "queued at first",
			from: v1alpha1.EvaluationStatus{Phase: v1alpha1.PhasePending},
			to:   v1alpha1.EvaluationStatus{Phase: v1alpha1.PhasePending, Reason: v1alpha1.ReasonQueued},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := withUID(simpleEval("arith").Queue("q").Obj())
			p := passFor(ev)
			ev.Status, *p.status = tc.from, tc.to
			ev.Status.Run, p.status.Run = p.run, p.run
			unitReconciler().emitPhaseEvents(p)
			var got []string
			for _, e := range p.events {
				got = append(got, e.reason+": "+e.note)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}
