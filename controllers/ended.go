package controllers

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/spend"
)

// keepEnded keeps a run that ended as it ended: its status is not derived
// again, none of its Jobs is created or resumed, and those still running (a
// run that stalled) are suspended, so that their pods go away; those of a run
// that succeeded, only after windDown. Only a spec edit that starts a new run
// starts anything again.
func (r *EvaluationReconciler) keepEnded(ctx context.Context, p *pass) (bool, error) {
	st := &p.ev.Status
	if st.Run != p.run || (st.Phase != v1alpha1.PhaseSucceeded && st.Phase != v1alpha1.PhaseFailed) {
		return true, nil
	}
	if regate(p.ev) {
		if st.ResultsLocation != "" {
			// Its records are committed, and its heads may be gone.
			return r.judgeCommitted(ctx, p)
		}
		// spec.baseline or spec.gate changed since the run was judged: the
		// pass goes on to Finish, which compares and gates its records again.
		return true, nil
	}
	if st.Phase == v1alpha1.PhaseSucceeded {
		p.finished = true
	} else {
		reason := v1alpha1.ReasonFailed
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFailed); c != nil && c.Reason != "" {
			reason = c.Reason
		}
		if reason == v1alpha1.ReasonBudgetExceeded && budgetRaised(p.ev) {
			// The run goes on: its Jobs are resumed, and its shards get
			// allowances of what the budget now leaves.
			p.event(corev1.EventTypeNormal, v1alpha1.ReasonResumed, "spec.budget was raised: the run resumes")
			// Its records go to the results store again, and are
			// committed anew when it ends.
			p.status.ResultsLocation = ""
			return true, nil
		}
		p.fail(reason, "%s", st.Message)
	}
	if err := r.tidyEnded(ctx, p); err != nil {
		return false, err
	}
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(p.ev.Namespace), client.MatchingLabels{
		cluster.LabelEvaluation: cluster.LabelValue(p.ev.Name), cluster.LabelRun: p.run,
	}); err != nil {
		return false, err
	}
	if st.ResultsLocation != "" && r.keptLongEnough(p) {
		if tidied, err := r.tidyCommitted(ctx, p, jobs.Items); tidied || err != nil {
			return false, err
		}
	}
	if st.Phase == v1alpha1.PhaseSucceeded {
		// It ended when its last head said so (finish): its pods are exiting,
		// after a last metrics scrape, and their Jobs complete on their own.
		// Only one still running a while later is stopped.
		if wait := windDown - p.now.Sub(endedAt(p)); wait > 0 {
			p.requeueAfter(wait)
			return false, nil
		}
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if cluster.Owned("Job", j, p.ev) != nil {
			continue
		}
		if jobFinished(j, batchv1.JobComplete) || jobFinished(j, batchv1.JobFailed) || j.DeletionTimestamp != nil {
			continue
		}
		if kueueManaged(j) {
			// Kueue unsuspends what it admitted: it stops the Job itself
			// once its Workload is inactive.
			if err := r.setActive(ctx, p, j, false); err != nil {
				return false, err
			}
			continue
		}
		if ptr.Deref(j.Spec.Suspend, false) {
			continue
		}
		patch := client.MergeFrom(j.DeepCopy())
		j.Spec.Suspend = ptr.To(true)
		if err := r.Patch(ctx, j, patch); err != nil {
			return false, fmt.Errorf("stopping Job %s of the ended run: %w", j.Name, err)
		}
	}
	return false, nil
}

// tidyEnded deletes, once status says the run ended, what carried its
// records there: its shards' upload grants and the list of what it reused
// (and, in the results store, its staging chunks, unless it stopped over
// its budget and may go on), and the records an earlier run left as its
// cache. The pass that ended the run wrote its status first, so that
// kubectl sees the run end without waiting for this. It is done once per
// manager for each end of a run, and only in the first tidyWithin after it
// ended: a manager started later does not read every ended run's objects
// again (what a manager that stopped in between left stays until the
// Evaluation is deleted).
func (r *EvaluationReconciler) tidyEnded(ctx context.Context, p *pass) error {
	key := client.ObjectKeyFromObject(p.ev)
	// A run over its budget may go on and end again: each end is tidied.
	var at string
	if t := p.ev.Status.CompletionTime; t != nil {
		at = t.UTC().Format(time.RFC3339)
	}
	end := []string{fmt.Sprintf("%s %s %s %s", p.run, p.ev.Status.Phase, p.failureReason, at)}
	if len(r.tidied.fresh(key, end)) == 0 || p.now.Sub(endedAt(p)) > tidyWithin {
		return nil
	}
	began := r.Clock.Now()
	st := &p.ev.Status
	if st.ResultsLocation != "" {
		if err := r.readPlan(ctx, p); err != nil {
			return err
		}
		resumable := st.Phase == v1alpha1.PhaseFailed && p.failureReason == v1alpha1.ReasonBudgetExceeded
		if err := r.cleanStaging(ctx, p, !resumable); err != nil {
			return err
		}
	}
	if _, err := r.deleteOtherRuns(ctx, p, ""); err != nil {
		return err
	}
	r.tidied.mark(key, end)
	log.FromContext(ctx).V(1).Info("Tidied an ended run", "run", p.run, "took", r.Clock.Since(began).Round(time.Millisecond).String())
	return nil
}

// tidyWithin is how long after a run ended a manager tidies it (tidyEnded).
const tidyWithin = 10 * time.Minute

// readPlan reads the run's plan, when a pass that does not load it needs
// it (nil if it is not there).
func (r *EvaluationReconciler) readPlan(ctx context.Context, p *pass) error {
	cm, err := r.planConfigMap(ctx, p)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case cluster.Owned("ConfigMap", cm, p.ev) != nil:
		return nil //nolint:nilerr // not ours: no plan of this run
	}
	plan, _, err := cluster.ParsePlan(cm.Annotations)
	if err != nil {
		return fmt.Errorf("plan %s: %w", cm.Name, err)
	}
	p.plan = plan
	return nil
}

// windDown is how long the Jobs of a run that succeeded may go on: their
// pods wait up to half a minute for a last metrics scrape (the runner's
// finalScrapeWait), then shut down.
const windDown = time.Minute

// endedAt is when the run ended (now, if its status does not say).
func endedAt(p *pass) time.Time {
	if t := p.ev.Status.CompletionTime; t != nil {
		return t.Time
	}
	return p.now
}

// regate reports whether an ended run is to be compared and gated again: it
// succeeded, missed its gate or lost its baseline, and spec.baseline or
// spec.gate is not what it was judged with.
func regate(ev *v1alpha1.Evaluation) bool {
	st := &ev.Status
	if st.Gated == cluster.GateHash(&ev.Spec) {
		return false
	}
	return st.Phase == v1alpha1.PhaseSucceeded || st.Reason == v1alpha1.ReasonRegressionDetected || st.Reason == v1alpha1.ReasonBaselineNotFound
}

// budgetRaised reports whether spec.budget now allows more than it did when
// it stopped the run (status.spend holds the limits it had then), in a
// dimension that stopped it.
func budgetRaised(ev *v1alpha1.Evaluation) bool {
	was := ev.Status.Spend
	if was == nil {
		return false
	}
	now, err := apiconv.SpendLimit(ev.Spec.Budget)
	if err != nil {
		return false
	}
	if was.MaxCost != "" {
		old, err := spend.ParseDollars(was.MaxCost)
		if err == nil && (now.Cost == 0 || now.Cost > old) {
			return true
		}
	}
	return was.MaxTokens > 0 && (now.Tokens == 0 || now.Tokens > was.MaxTokens)
}
