package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
