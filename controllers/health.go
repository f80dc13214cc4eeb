package controllers

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// DefaultStallTimeout is spec.runner.stallTimeout's default.
const DefaultStallTimeout = v1alpha1.DefaultStallTimeout

// stallTimeout is spec.runner.stallTimeout, defaulted.
func stallTimeout(spec *v1alpha1.EvaluationSpec) time.Duration {
	if spec.Runner != nil && spec.Runner.StallTimeout != nil && spec.Runner.StallTimeout.Duration > 0 {
		return spec.Runner.StallTimeout.Duration
	}
	return DefaultStallTimeout
}

// judgeHealth turns the problems the pass found into the Degraded state: the
// first problem names the reason (stalls first: they are what blocks the run,
// and of those one that needs a fix before one that waits for room), and a
// stall while no shard runs ends the run once it has lasted
// spec.runner.stallTimeout (counted from when the run became Degraded, which
// status keeps across restarts of the manager).
func (r *EvaluationReconciler) judgeHealth(p *pass) {
	p.healthObserved = true
	if len(p.problems) == 0 {
		return
	}
	first := p.problems[0]
	for _, pr := range p.problems {
		if pr.fatal {
			p.stalled = &pr
			first = pr
			break
		}
	}
	if !first.fatal {
		var room *problem
		for i, pr := range p.problems {
			if pr.stall && !pr.waitsForRoom {
				first, room = pr, nil
				break
			}
			if pr.stall && room == nil {
				room = &p.problems[i]
			}
		}
		if room != nil {
			first = *room
		}
	}
	d := first
	if n := len(p.problems) - 1; n > 0 {
		d.message += fmt.Sprintf(" (and %d more pod problem(s))", n)
	}
	if first.stall && !p.anyRunning {
		timeout := stallTimeout(&p.ev.Spec)
		since := p.now
		if c := meta.FindStatusCondition(p.ev.Status.Conditions, v1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue && p.ev.Status.Run == p.run {
			since = c.LastTransitionTime.Time
		}
		deadline := since.Add(timeout)
		if !p.now.Before(deadline) {
			p.stalled = &problem{reason: first.reason, stall: true,
				message: fmt.Sprintf("%s; no runner pod could start for %s (spec.runner.stallTimeout)", first.message, timeout)}
		} else {
			d.message += fmt.Sprintf("; the run fails at %s unless a runner pod starts (spec.runner.stallTimeout %s)",
				deadline.UTC().Format(time.RFC3339), timeout)
			p.requeueAfter(deadline.Sub(p.now))
		}
	}
	p.degraded = &d
}

// livePlanError reads the plan ConfigMap from the API server and returns the
// error the planner wrote into it, if any.
func (r *EvaluationReconciler) livePlanError(ctx context.Context, p *pass) (string, error) {
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.ev.Namespace, Name: cluster.PlanName(p.ev.Name, p.run)}, cm)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the plan ConfigMap: %w", err)
	}
	_, failed, _ := cluster.ParsePlan(cm.Annotations)
	return failed, nil
}

// observePlanner looks at the planner Job's pod: a failed Job fails the run,
// naming why its pod failed; a pod that cannot start makes the run Degraded,
// and fails it after spec.runner.stallTimeout. It reports whether the run ended.
func (r *EvaluationReconciler) observePlanner(ctx context.Context, p *pass, job *batchv1.Job) (bool, error) {
	podsByJob, err := r.listJobPods(ctx, job.Namespace, []*batchv1.Job{job})
	if err != nil {
		return false, err
	}
	pods := podsByJob[job.Name]
	var newest *corev1.Pod
	for i := range pods {
		if newest == nil || newer(&pods[i], newest) {
			newest = &pods[i]
		}
	}
	var view podView
	if newest != nil {
		view = viewPod(newest, "planner", 0)
		p.anyRunning = view.running
	}
	if jobFinished(job, batchv1.JobFailed) {
		// The planner says why it failed in the plan ConfigMap, which the cache
		// may not hold yet when it holds the Job's end: read it live.
		failed, err := r.livePlanError(ctx, p)
		switch {
		case err != nil:
			return false, err
		case failed != "":
			p.fail(v1alpha1.ReasonPlanningFailed, "planning failed: %s", failed)
		case view.problem != nil:
			p.fail(v1alpha1.ReasonPlanningFailed, "the planner Job %s failed: %s", job.Name, view.problem.message)
		default:
			p.fail(v1alpha1.ReasonPlanningFailed, "the planner Job %s failed; see its pod's log", job.Name)
		}
		return true, nil
	}
	if view.problem != nil {
		p.problems = append(p.problems, *view.problem)
	}
	fc, err := r.failedCreate(ctx, job, pods)
	if err != nil {
		return false, err
	}
	if fc != nil {
		p.problems = append(p.problems, *fc)
	}
	r.judgeHealth(p)
	if p.stalled != nil {
		p.fail(p.stalled.reason, "%s", p.stalled.message)
		return true, nil
	}
	return false, nil
}
