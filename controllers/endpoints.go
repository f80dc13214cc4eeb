package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// resolveEndpoints gives the models with endpointRef what their ModelEndpoints
// say (provider, baseURL, key, headers), for the steps after it, as runner
// pods do. The stored spec keeps the reference, so the run's identity does
// not change when an endpoint is edited. A reference to another namespace
// fails the run (an Evaluation may use only its own namespace's keys); a
// missing endpoint keeps a run that has not started Pending, and lets a
// started one go on with those models' calls held by its runner pods
// (EndpointUnavailable) until the endpoint is back. An endpoint that is not
// Ready (its ModelQuota is missing or does not list the namespace) is said
// the same way; its runner pods wait for it.
func (r *EvaluationReconciler) resolveEndpoints(ctx context.Context, p *pass) (bool, error) {
	var missing, notReady []string
	for _, c := range apiconv.EndpointCallers(&p.ev.Spec) {
		ref := c.Ref
		if ref.Namespace != "" && ref.Namespace != p.ev.Namespace {
			p.fail(v1alpha1.ReasonInvalidSpec, "%s.namespace: ModelEndpoint %s/%s is in another namespace; an Evaluation may call only through "+
				"its own namespace's ModelEndpoints, each holding its namespace's key", c.Path, ref.Namespace, ref.Name)
			return false, nil
		}
		var ep v1alpha1.ModelEndpoint
		err := r.Get(ctx, client.ObjectKey{Namespace: p.ev.Namespace, Name: ref.Name}, &ep)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, fmt.Sprintf("ModelEndpoint %s (%s, model %s)", ref.Name, c.Path, c.Model.Name))
			continue
		case err != nil:
			return false, err
		}
		switch cond := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionReady); {
		case cond != nil && cond.Status == metav1.ConditionFalse:
			notReady = append(notReady, fmt.Sprintf("ModelEndpoint %s (%s, model %s) is not ready: %s", ref.Name, c.Path, c.Model.Name, cond.Message))
		case cond == nil || ep.Status.ObservedGeneration < ep.Generation:
			// Its controller has not looked at it yet (just made, or
			// edited): whether pods could call through it is not known.
			notReady = append(notReady, fmt.Sprintf("ModelEndpoint %s (%s, model %s) is not ready yet", ref.Name, c.Path, c.Model.Name))
		}
		if cond := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionLimitsMismatch); cond != nil && cond.Status == metav1.ConditionTrue {
			msg := fmt.Sprintf("ModelEndpoint %s (%s): %s", ref.Name, c.Path, cond.Message)
			if !slices.Contains(p.endpointLimits, msg) {
				p.endpointReason = cmp.Or(p.endpointReason, cond.Reason)
				p.endpointLimits = append(p.endpointLimits, msg)
			}
		}
		if c.Agent != nil {
			// The runner's proxy calls it with its key (keyEnv).
			if p.agentEndpoints == nil {
				p.agentEndpoints = map[string]*v1alpha1.ModelEndpointSpec{}
			}
			p.agentEndpoints[ref.Name] = &ep.Spec
			continue
		}
		c.Model.UseEndpoint(&ep.Spec)
	}
	if len(missing) == 0 {
		if len(notReady) == 0 {
			return true, nil
		}
		return r.waitForEndpoints(ctx, p, strings.Join(notReady, "; "))
	}
	p.endpointsReason, p.endpointsGone = v1alpha1.ReasonEndpointNotFound, true
	p.requeueAfter(r.Options.RecheckAfter)
	started, err := r.runStarted(ctx, p)
	if err != nil {
		return false, err
	}
	if !started {
		p.pendingReason = v1alpha1.ReasonEndpointNotFound
		p.pendingMessage = strings.Join(missing, "; ") + " not found"
		p.endpointsMissing = p.pendingMessage
		return false, nil
	}
	p.endpointsMissing = strings.Join(missing, "; ") + " not found: runner pods hold those models' calls until it is back; finished samples are kept"
	return true, nil
}

// waitForEndpoints holds a run whose ModelEndpoints are not Ready (their
// ModelQuota is missing, or does not list the namespace): its runner pods
// could not call. A run not started starts no pod (Pending); a started one's
// pods hold those models' calls. Either way the wait ends with the run, the
// reason said, after spec.runner.stallTimeout: runner pods used to sit
// Running for as long as no one fixed the quota.
func (r *EvaluationReconciler) waitForEndpoints(ctx context.Context, p *pass, notReady string) (bool, error) {
	p.endpointsReason, p.endpointsMissing = v1alpha1.ReasonEndpointNotReady, notReady
	p.requeueAfter(r.Options.RecheckAfter)
	timeout := stallTimeout(&p.ev.Spec)
	since := p.now
	if c := meta.FindStatusCondition(p.ev.Status.Conditions, v1alpha1.ConditionEndpointUnavailable); c != nil && c.Status == metav1.ConditionTrue &&
		c.Reason == v1alpha1.ReasonEndpointNotReady && p.ev.Status.Run == p.run {
		since = c.LastTransitionTime.Time
	}
	if deadline := since.Add(timeout); p.now.Before(deadline) {
		p.requeueAfter(deadline.Sub(p.now))
	} else {
		p.fail(v1alpha1.ReasonEndpointNotReady, "%s; waited %s (spec.runner.stallTimeout)", notReady, timeout)
		return false, nil
	}
	started, err := r.runStarted(ctx, p)
	if err != nil || started {
		return err == nil, err
	}
	p.pendingReason, p.pendingMessage = v1alpha1.ReasonEndpointNotReady, notReady+": no runner pod starts until it is"
	return false, nil
}

// runStarted reports whether the current run has a Job of its own.
func (r *EvaluationReconciler) runStarted(ctx context.Context, p *pass) (bool, error) {
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(p.ev.Namespace), client.MatchingLabels{
		cluster.LabelEvaluation: cluster.LabelValue(p.ev.Name), cluster.LabelRun: p.run, cluster.LabelComponent: cluster.ComponentRunner,
	}); err != nil {
		return false, err
	}
	for i := range jobs.Items {
		if cluster.Owned("Job", &jobs.Items[i], p.ev) == nil {
			return true, nil
		}
	}
	return false, nil
}

// setEndpointUnavailable sets EndpointUnavailable while a ModelEndpoint is
// missing, with an event when it goes and when it is back.
func setEndpointUnavailable(p *pass, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	old := meta.FindStatusCondition(p.status.Conditions, v1alpha1.ConditionEndpointUnavailable)
	was := old != nil && old.Status == metav1.ConditionTrue
	ended := p.status.Phase == v1alpha1.PhaseSucceeded || p.status.Phase == v1alpha1.PhaseFailed
	switch {
	case p.endpointsMissing != "" && !ended:
		if !was || old.Message != p.endpointsMissing {
			p.event(corev1.EventTypeWarning, p.endpointsReason, "%s", p.endpointsMissing)
		}
		set(v1alpha1.ConditionEndpointUnavailable, metav1.ConditionTrue, p.endpointsReason, p.endpointsMissing)
	case was && (p.complete || ended):
		p.event(corev1.EventTypeNormal, v1alpha1.ReasonEndpointFound, "Every ModelEndpoint the models call through is there")
		set(v1alpha1.ConditionEndpointUnavailable, metav1.ConditionFalse, v1alpha1.ReasonEndpointFound, "")
	}
}

// evaluationsOfEndpoint maps a ModelEndpoint to the Evaluations calling
// through it.
func (r *EvaluationReconciler) evaluationsOfEndpoint(ctx context.Context, o client.Object) []reconcile.Request {
	evs, err := evaluationsCalling(ctx, r.Client, o.GetNamespace(), o.GetName())
	if err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(evs))
	for i := range evs {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&evs[i])}
	}
	return out
}
