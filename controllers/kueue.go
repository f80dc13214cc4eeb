package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// Kueue: a run with a queue (spec.scheduling.queueName, or the manager's
// default) puts it on its runner Jobs, created suspended; Kueue's Workload of
// each Job says when it is admitted, and Kueue alone unsuspends it (on
// admission) and suspends it (on preemption: the shards resume where they
// were, as after a pod kill). Proctor never touches such a Job's suspend: it
// holds one by deactivating its Workload (spec.suspend, an ended run), and
// lets Kueue admit it again by activating it. Without Kueue installed (no
// Workload API), nothing here runs and no Job carries a queue.

// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;patch

// queueName is the LocalQueue that admits the run's Jobs ("" for none).
func (r *EvaluationReconciler) queueName(spec *v1alpha1.EvaluationSpec) string {
	if s := spec.Scheduling; s != nil && s.QueueName != "" {
		return s.QueueName
	}
	return r.Options.QueueName
}

// checkQueue holds a run that names a Kueue queue on a cluster without
// Kueue: its Jobs would wait, suspended, for an admission that never comes.
func (r *EvaluationReconciler) checkQueue(_ context.Context, p *pass) (bool, error) {
	q := r.queueName(&p.ev.Spec)
	if q == "" || r.Kueue {
		return true, nil
	}
	p.pendingReason = v1alpha1.ReasonKueueNotInstalled
	p.pendingMessage = fmt.Sprintf("the run's Jobs go to Kueue LocalQueue %q (spec.scheduling.queueName, or the operator's default), "+
		"but Kueue is not installed: no Workload API (kueue.x-k8s.io) was served when the manager started; install Kueue and restart the manager, or remove the queue", q)
	return false, nil
}

// queued puts a Job in the run's queue: its label, and suspended until Kueue
// admits it (Kueue's webhook would suspend it too; created suspended, it
// never runs a moment unadmitted, webhook or not).
func (r *EvaluationReconciler) queued(spec *v1alpha1.EvaluationSpec, job *batchv1.Job) {
	q := r.queueName(spec)
	if q == "" {
		return
	}
	job.Labels[cluster.LabelKueueQueueName] = q
	job.Spec.Suspend = ptr.To(true)
	// Kueue takes partial admission only below the Job's pods at once (its
	// webhook refuses the Job otherwise): at or above, it is all or nothing.
	pods := min(ptr.Deref(job.Spec.Parallelism, 1), ptr.Deref(job.Spec.Completions, 1))
	if s := spec.Scheduling; s != nil && s.MinParallelism != nil && *s.MinParallelism < pods &&
		job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion {
		if job.Annotations == nil {
			job.Annotations = map[string]string{}
		}
		job.Annotations[cluster.AnnotationKueueMinParallelism] = fmt.Sprint(*s.MinParallelism)
	}
}

// kueueManaged reports whether Kueue admits job (it carries a queue).
func kueueManaged(job *batchv1.Job) bool {
	return job.Labels[cluster.LabelKueueQueueName] != ""
}

// admission is what Kueue says of a runner Job.
type admission struct {
	job string
	// found: the Job has a Workload (Kueue made one).
	found bool
	// admitted: its Workload is admitted (its pods may run).
	admitted bool
	// active is the Workload's spec.active.
	active bool
	// clusterQueue is the ClusterQueue that admitted it or that it waits in.
	clusterQueue string
	// reason and message say why it waits (QuotaReserved False), or why it
	// was evicted (preempted), as Kueue put them.
	reason, message string
	// name of the Workload, to activate or deactivate.
	name string
}

// workloadOf reads the Workload Kueue made for job (nil when it has not
// made one yet), once a pass.
func (r *EvaluationReconciler) workloadOf(ctx context.Context, p *pass, job *batchv1.Job) (*unstructured.Unstructured, error) {
	if w, ok := p.workloads[job.UID]; ok {
		return w, nil
	}
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(cluster.WorkloadGVK.GroupVersion().WithKind(cluster.WorkloadGVK.Kind + "List"))
	if err := r.reader().List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingLabels{cluster.LabelKueueJobUID: string(job.UID)}); err != nil {
		return nil, fmt.Errorf("reading the Kueue Workload of Job %s: %w", job.Name, err)
	}
	var newest *unstructured.Unstructured
	for i := range list.Items {
		w := &list.Items[i]
		if w.GetDeletionTimestamp() != nil {
			continue
		}
		if newest == nil || w.GetCreationTimestamp().After(newest.GetCreationTimestamp().Time) {
			newest = w
		}
	}
	if p.workloads == nil {
		p.workloads = map[types.UID]*unstructured.Unstructured{}
	}
	p.workloads[job.UID] = newest
	return newest, nil
}

// reader reads Workloads: the API server's (the manager caches typed
// objects; a Workload is read only for a run with a queue).
func (r *EvaluationReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// admissionOf says what Kueue says of job's Workload w (nil: none yet).
func admissionOf(job *batchv1.Job, w *unstructured.Unstructured) admission {
	a := admission{job: job.Name, active: true}
	if w == nil {
		return a
	}
	a.found, a.name = true, w.GetName()
	if v, ok, _ := unstructured.NestedBool(w.Object, "spec", "active"); ok {
		a.active = v
	}
	a.clusterQueue, _, _ = unstructured.NestedString(w.Object, "status", "admission", "clusterQueue")
	conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
	get := func(t string) (status, reason, message string) {
		for _, c := range conds {
			m, ok := c.(map[string]any)
			if !ok || m["type"] != t {
				continue
			}
			status, _ = m["status"].(string)
			reason, _ = m["reason"].(string)
			message, _ = m["message"].(string)
		}
		return
	}
	if st, _, _ := get("Admitted"); st == "True" {
		a.admitted = true
		return a
	}
	if st, reason, msg := get("Evicted"); st == "True" {
		a.reason, a.message = reason, msg
	}
	if st, reason, msg := get("QuotaReserved"); st == "False" && a.message == "" {
		a.reason, a.message = reason, msg
	}
	if a.clusterQueue == "" {
		// Not admitted: the queue it waits in is the LocalQueue's.
		a.clusterQueue, _, _ = unstructured.NestedString(w.Object, "spec", "queueName")
	}
	return a
}

// setActive activates or deactivates job's Workload: how a Kueue-managed Job
// is held (spec.suspend, an ended run) and let go.
func (r *EvaluationReconciler) setActive(ctx context.Context, p *pass, job *batchv1.Job, active bool) error {
	w, err := r.workloadOf(ctx, p, job)
	if err != nil || w == nil {
		// No Workload yet: the Job is still suspended (created so), and
		// the next pass, woken by the Workload's creation, holds it.
		return err
	}
	if a := admissionOf(job, w); a.active == active {
		return nil
	}
	patch := fmt.Appendf(nil, `{"spec":{"active":%t}}`, active)
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(cluster.WorkloadGVK)
	obj.SetNamespace(w.GetNamespace())
	obj.SetName(w.GetName())
	if err := r.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting the Kueue Workload %s of Job %s active=%t: %w", w.GetName(), job.Name, active, err)
	}
	// What the rest of the pass reads of it.
	_ = unstructured.SetNestedField(w.Object, active, "spec", "active")
	return nil
}

// observeAdmissionStep is observeAdmission as a step of the pass.
func (r *EvaluationReconciler) observeAdmissionStep(ctx context.Context, p *pass) (bool, error) {
	return true, r.observeAdmission(ctx, p)
}

// observeAdmission reads, for each of the run's Jobs in a queue, what Kueue
// says of it: p.queued holds those not admitted.
func (r *EvaluationReconciler) observeAdmission(ctx context.Context, p *pass) error {
	models := make([]string, 0, len(p.jobs))
	for m := range p.jobs {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		job := p.jobs[m]
		if !kueueManaged(job) || jobFinished(job, batchv1.JobComplete) || jobFinished(job, batchv1.JobFailed) {
			continue
		}
		w, err := r.workloadOf(ctx, p, job)
		if err != nil {
			return err
		}
		if a := admissionOf(job, w); !a.admitted {
			p.queued = append(p.queued, a)
		}
	}
	return nil
}

// queuedMessage says what the run's Jobs wait for in Kueue.
func (p *pass) queuedMessage() string {
	var parts []string
	for _, a := range p.queued {
		where := "Kueue"
		if a.clusterQueue != "" {
			where = "queue " + a.clusterQueue
		}
		switch {
		case !a.found:
			parts = append(parts, fmt.Sprintf("Job %s waits for Kueue to take it up", a.job))
		case a.message != "":
			parts = append(parts, fmt.Sprintf("Job %s waits in %s: %s", a.job, where, a.message))
		default:
			parts = append(parts, fmt.Sprintf("Job %s waits in %s for quota", a.job, where))
		}
	}
	return strings.Join(parts, "; ")
}
