package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// ModelQuotaReconciler divides each ModelQuota's limits among the
// ModelEndpoints that name it (see cluster.DivideQuota for the protocol), in
// the quota's annotation, and reports its use in status.
type ModelQuotaReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	Clock  clock.PassiveClock
	// Options: ProgressInterval (how often usage alone is written to status),
	// StaleAfter (how long a part of an endpoint that is gone is counted).
	Options Options

	wrote *throttle
	// gone records since when each quota's division holds a part of an
	// endpoint that no longer names it.
	mu   sync.Mutex
	gone map[types.NamespacedName]map[string]time.Time
}

// +kubebuilder:rbac:groups=proctor.dev,resources=modelquotas,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=proctor.dev,resources=modelquotas/status,verbs=get;update;patch

// SetupWithManager registers the controller: a quota is divided again when it
// changes, when an endpoint naming it changes (its status says whether runner
// pods call through it), and when such an endpoint's budget changes (what it
// acknowledged).
func (r *ModelQuotaReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options.defaults()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.wrote, r.gone = newThrottle(), map[types.NamespacedName]map[string]time.Time{}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ModelQuota{}).
		Watches(&v1alpha1.ModelEndpoint{}, handler.EnqueueRequestsFromMapFunc(quotaOf)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.quotaOfBudget), builder.OnlyMetadata).
		Named("modelquota").
		Complete(r)
}

func quotaOf(_ context.Context, o client.Object) []reconcile.Request {
	ep := o.(*v1alpha1.ModelEndpoint)
	if ep.Spec.QuotaRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ep.Spec.QuotaRef.Name}}}
}

// quotaOfBudget maps an endpoint's budget to the quota its endpoint names.
func (r *ModelQuotaReconciler) quotaOfBudget(ctx context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "ModelEndpoint" || o.GetLabels()[cluster.LabelComponent] != cluster.ComponentBudget {
		return nil
	}
	var ep v1alpha1.ModelEndpoint
	if err := r.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}, &ep); err != nil {
		return nil
	}
	return quotaOf(ctx, &ep)
}

// Reconcile divides the quota among the endpoints using it, then writes its
// status if it changed.
func (r *ModelQuotaReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	q := &v1alpha1.ModelQuota{}
	if err := r.Get(ctx, req.NamespacedName, q); err != nil {
		if apierrors.IsNotFound(err) {
			// Its endpoints find it gone and hold their runners.
			r.wrote.forget(req.NamespacedName)
			r.mu.Lock()
			delete(r.gone, req.NamespacedName)
			r.mu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !q.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	division, err := cluster.ParseBudget(q.Annotations)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("ModelQuota %s: %w", q.Name, err)
	}
	eps, err := endpointsNaming(ctx, r.Client, q.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	status := q.Status.DeepCopy()
	status.ObservedGeneration = q.Generation
	status.Endpoints, status.Evaluations, status.Shards = 0, 0, 0
	var usage v1alpha1.EndpointUsage
	var users []cluster.QuotaUser
	acked := map[string]int64{}
	for i := range eps {
		ep := &eps[i]
		key := cluster.QuotaUserKey(ep.Namespace, ep.Name)
		doc, err := r.endpointBudget(ctx, ep)
		if err != nil {
			return ctrl.Result{}, err
		}
		if a := doc.Quota; a != nil && a.UID == string(q.UID) && doc.Fits(ep.Name) {
			acked[key] = a.Version
		}
		// An endpoint of a namespace the quota no longer lists gets nothing,
		// but is counted until it has held its runners.
		weight, admitted := q.Spec.Admits(ep.Namespace)
		active := admitted && ep.Status.Shards > 0
		if !active && !doc.InUse(ep.Name) && !division.Keeps(q.Name, key, acked[key]) {
			continue
		}
		var own v1alpha1.EndpointLimits
		if ep.Spec.Limits != nil {
			own = *ep.Spec.Limits
		}
		users = append(users, cluster.QuotaUser{Key: key, Weight: weight, Cap: apiconv.EndpointLimitsOf(own), Active: active})
		if active {
			status.Endpoints++
			status.Evaluations += ep.Status.Evaluations
			status.Shards += ep.Status.Shards
			if u := ep.Status.Usage; u != nil {
				usage.RequestsPerMinute += u.RequestsPerMinute
				usage.InputTokensPerMinute += u.InputTokensPerMinute
				usage.OutputTokensPerMinute += u.OutputTokensPerMinute
				usage.ThrottledPerMinute += u.ThrottledPerMinute
			}
		}
	}
	users = append(users, r.goneUsers(req.NamespacedName, division, q.Name, users, now)...)
	status.Usage = nil
	if usage != (v1alpha1.EndpointUsage{}) {
		status.Usage = &usage
	}
	var result ctrl.Result
	next, changed := cluster.DivideQuota(division, q.Name, apiconv.QuotaLimitsOf(q), users, acked)
	if changed {
		// Written only over the version it was computed from (see divideBudget).
		patch := client.MergeFromWithOptions(q.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if q.Annotations == nil {
			q.Annotations = map[string]string{}
		}
		if err := cluster.SetBudget(q.Annotations, next); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Patch(ctx, q, patch); err != nil {
			if !apierrors.IsConflict(err) {
				return ctrl.Result{}, fmt.Errorf("writing the division of ModelQuota %s: %w", q.Name, err)
			}
			result.RequeueAfter = 100 * time.Millisecond
		}
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonBudgetReady,
		Message: "ModelEndpoints naming the quota share its limits", ObservedGeneration: q.Generation, LastTransitionTime: metav1.NewTime(now)})
	if len(users) > 0 {
		// Usage decays, and endpoints' acknowledgements arrive, without events here.
		result.RequeueAfter = min(nonZero(result.RequeueAfter, r.Options.ProgressInterval), r.Options.ProgressInterval)
	}
	old := q.Status.DeepCopy()
	old.Usage = status.Usage
	updated := q.DeepCopy()
	updated.Status = *status
	wait, err := writeUsageStatus(ctx, r.Client, r.wrote, r.Options.ProgressInterval, updated,
		!apiequality.Semantic.DeepEqual(&q.Status, status), apiequality.Semantic.DeepEqual(old, status), now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wait > 0 {
		result.RequeueAfter = min(nonZero(result.RequeueAfter, wait), wait)
	}
	return result, nil
}

// goneUsers keeps, for StaleAfter, the parts of endpoints that are gone
// (deleted, or their quotaRef changed): their runner pods stop when they find
// the budget gone or held, which they read every few seconds, and nothing can
// acknowledge it for them.
func (r *ModelQuotaReconciler) goneUsers(key types.NamespacedName, division *cluster.Budget, quota string, users []cluster.QuotaUser, now time.Time) []cluster.QuotaUser {
	r.mu.Lock()
	defer r.mu.Unlock()
	since := r.gone[key]
	if since == nil {
		since = map[string]time.Time{}
		r.gone[key] = since
	}
	listed := map[string]bool{}
	for _, u := range users {
		listed[u.Key] = true
		delete(since, u.Key)
	}
	var out []cluster.QuotaUser
	if mb := division.Models[quota]; mb != nil {
		for k := range mb.Grants {
			if listed[k] {
				continue
			}
			if _, ok := since[k]; !ok {
				since[k] = now
			}
			if now.Sub(since[k]) < r.Options.StaleAfter {
				out = append(out, cluster.QuotaUser{Key: k})
			}
		}
	}
	return out
}

// endpointBudget is an endpoint's budget, as the cache holds it; empty if it
// has none (yet) or one that is not the endpoint's.
func (r *ModelQuotaReconciler) endpointBudget(ctx context.Context, ep *v1alpha1.ModelEndpoint) (*cluster.Budget, error) {
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.Get(ctx, client.ObjectKey{Namespace: ep.Namespace, Name: cluster.EndpointBudgetName(ep.Name)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return &cluster.Budget{}, nil
		}
		return nil, err
	}
	if !metav1.IsControlledBy(cm, ep) {
		return &cluster.Budget{}, nil
	}
	b, err := cluster.ParseBudget(cm.Annotations)
	if err != nil {
		return nil, fmt.Errorf("the budget of ModelEndpoint %s/%s: %w", ep.Namespace, ep.Name, err)
	}
	return b, nil
}
