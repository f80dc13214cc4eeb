package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// observeStorage says in status, and with a Warning event, when the shards store
// outputs cut or not at all (their records carry outputTruncated and
// outputBytes); the scores are whole either way.
func (r *EvaluationReconciler) observeStorage(_ context.Context, p *pass) (bool, error) {
	if p.plan == nil {
		return true, nil
	}
	cut, dropped := 0, 0
	for _, s := range p.shards {
		cut += s.progress.Cut
		dropped += s.progress.Dropped
	}
	var reason, msg string
	switch {
	case dropped > 0:
		reason = v1alpha1.ReasonStorageBudgetReached
		msg = fmt.Sprintf("the run's records reached its storage budget (%d MiB, the manager's --storage-budget): "+
			"outputs are no longer stored, scores are (records say outputTruncated, with outputBytes)", p.plan.StorageBytes>>20)
	case cut > 0:
		reason = v1alpha1.ReasonOutputsCut
		msg = fmt.Sprintf("outputs longer than %d KiB are stored cut (records say outputTruncated, with outputBytes)", cluster.MaxOutputBytes>>10)
	default:
		return true, nil
	}
	if old := meta.FindStatusCondition(p.status.Conditions, v1alpha1.ConditionOutputsTruncated); old == nil || old.Reason != reason {
		p.event(corev1.EventTypeWarning, reason, "%s", msg)
	}
	meta.SetStatusCondition(&p.status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionOutputsTruncated, Status: metav1.ConditionTrue, Reason: reason, Message: msg,
		ObservedGeneration: p.ev.Generation, LastTransitionTime: metav1.NewTime(p.now),
	})
	return true, nil
}

// admitStorage starts a run only when its storage budget fits beside the
// records the namespace's and the cluster's Evaluations keep: a run that has
// not ended counts its whole budget (its records may grow to it), an ended
// one what it stored. Until it fits the run waits, Pending (StorageFull),
// saying how to make room. A run admitted once (its results ConfigMap made)
// is never held again.
func (r *EvaluationReconciler) admitStorage(ctx context.Context, p *pass) (bool, error) {
	runBudget := r.Options.StorageBudget
	if runBudget <= 0 || p.status.Phase == v1alpha1.PhaseSucceeded || p.status.Phase == v1alpha1.PhaseFailed {
		return true, nil
	}
	results := &metav1.PartialObjectMetadata{}
	results.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err := r.Get(ctx, client.ObjectKey{Namespace: p.ev.Namespace, Name: cluster.ResultsName(p.ev.Name)}, results)
	switch {
	case err == nil && results.Annotations[cluster.AnnotationRun] == p.run:
		return true, nil // admitted
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	var evs v1alpha1.EvaluationList
	if err := r.List(ctx, &evs); err != nil {
		return false, err
	}
	var inNamespace, inCluster int64
	for i := range evs.Items {
		o := &evs.Items[i]
		if o.UID == p.ev.UID {
			continue
		}
		keeps := o.Status.StoredBytes
		switch o.Status.Phase {
		case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		case "", v1alpha1.PhasePending:
			if o.Status.Reason == v1alpha1.ReasonStorageFull || o.Status.Run == "" {
				continue // held, or not started: nothing made yet
			}
			keeps = max(keeps, runBudget)
		default:
			keeps = max(keeps, runBudget)
		}
		inCluster += keeps
		if o.Namespace == p.ev.Namespace {
			inNamespace += keeps
		}
	}
	full := func(used, limit int64, where, flag string) bool {
		if limit <= 0 || used+runBudget <= limit {
			return false
		}
		p.pendingReason = v1alpha1.ReasonStorageFull
		p.pendingMessage = fmt.Sprintf("the Evaluations of %s keep %d MiB of records, and a run may store %d MiB: over %s's storage budget "+
			"(%d MiB, the manager's %s); the run starts when there is room: delete Evaluations whose results you no longer need "+
			"(their records go with them), or raise the budget", where, used>>20, runBudget>>20, where, limit>>20, flag)
		return true
	}
	if full(inNamespace, r.Options.NamespaceStorageBudget, "namespace "+p.ev.Namespace, "--namespace-storage-budget") ||
		full(inCluster, r.Options.ClusterStorageBudget, "the cluster", "--cluster-storage-budget") {
		p.requeueAfter(r.Options.RecheckAfter)
		return false, nil
	}
	return true, nil
}
