package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// ModelEndpointReconciler divides each ModelEndpoint's limits among the runner
// pods, of every Evaluation of its namespace, that call through it (see
// cluster.DivideEndpoint for the protocol), and reports its use in status.
type ModelEndpointReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	Clock  clock.PassiveClock
	// Recorder, if set, says when the provider's limits disagree with the
	// endpoint's (events after the status write).
	Recorder events.EventRecorder
	// Options: StaleAfter (when a shard is taken for dead), ProgressInterval
	// (how often usage alone is written to status), RecheckAfter.
	Options Options

	heads *headTracker
	wrote *throttle
}

// +kubebuilder:rbac:groups=proctor.dev,resources=modelendpoints,verbs=get;list;watch
// +kubebuilder:rbac:groups=proctor.dev,resources=modelendpoints/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=proctor.dev,resources=modelquotas,verbs=get;list;watch

// SetupWithManager registers the controller: it reconciles an endpoint when it
// changes, when an Evaluation calling through it changes, and when a shard of
// such an Evaluation reports (its head ConfigMap, watched as metadata).
func (r *ModelEndpointReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options.defaults()
	reader := client.Reader(mgr.GetClient())
	sharedKeyMetrics.reader.Store(&reader)
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.heads, r.wrote = newHeadTracker(), newThrottle()
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ModelEndpoint{}).
		Owns(&corev1.ConfigMap{}, builder.OnlyMetadata).
		Watches(&v1alpha1.Evaluation{}, handler.EnqueueRequestsFromMapFunc(endpointsOf)).
		// A quota's new division (its annotation) or limits move its endpoints.
		Watches(&v1alpha1.ModelQuota{}, handler.EnqueueRequestsFromMapFunc(r.endpointsOfQuota)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.endpointsOfHead), builder.OnlyMetadata).
		Named("modelendpoint").
		Complete(r)
}

// endpointsOf maps an Evaluation to the endpoints its models call through.
func endpointsOf(_ context.Context, o client.Object) []reconcile.Request {
	ev := o.(*v1alpha1.Evaluation)
	var out []reconcile.Request
	for _, name := range ev.Spec.EndpointNames() {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ev.Namespace, Name: name}})
	}
	return out
}

// endpointsOfQuota maps a ModelQuota to the endpoints naming it.
func (r *ModelEndpointReconciler) endpointsOfQuota(ctx context.Context, o client.Object) []reconcile.Request {
	eps, err := endpointsNaming(ctx, r.Client, o.GetName())
	if err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(eps))
	for i := range eps {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&eps[i])}
	}
	return out
}

// endpointsNaming lists the ModelEndpoints (of every namespace the manager
// watches) whose quotaRef names quota.
func endpointsNaming(ctx context.Context, c client.Reader, quota string) ([]v1alpha1.ModelEndpoint, error) {
	var list v1alpha1.ModelEndpointList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(ep v1alpha1.ModelEndpoint) bool {
		return ep.Spec.QuotaRef == nil || ep.Spec.QuotaRef.Name != quota
	}), nil
}

// endpointsOfHead maps a shard's head to the endpoints its Evaluation's models
// call through.
func (r *ModelEndpointReconciler) endpointsOfHead(ctx context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[cluster.LabelComponent] != cluster.ComponentShard || l[cluster.LabelEvaluation] == "" {
		return nil
	}
	var evs v1alpha1.EvaluationList
	if err := r.List(ctx, &evs, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range evs.Items {
		if cluster.LabelValue(evs.Items[i].Name) == l[cluster.LabelEvaluation] {
			out = append(out, endpointsOf(ctx, &evs.Items[i])...)
		}
	}
	return out
}

// endpointPass is what one reconcile of an endpoint found.
type endpointPass struct {
	ep     *v1alpha1.ModelEndpoint
	now    time.Time
	groups []cluster.Group
	acks   map[string]cluster.EndpointAck
	usage  cluster.Usage
	// evaluations and shards count those calling through the endpoint now.
	evaluations, shards int32
	anyActive           bool
	// seen are the heads looked at (the tracker forgets the others).
	seen map[string]bool
	// stale: the budget changed since the cache's copy; divide again soon.
	stale bool
	// limits are those in force: the endpoint's own, or with a ModelQuota its
	// part of the quota within its own; held while it has no part (then
	// limits are the quota's, so that every grant is lowered to nothing).
	limits ratelimit.Limits
	held   bool
	// quota is the division of its ModelQuota the limits come from.
	quota *cluster.QuotaApplied
	// notReady says why the endpoint cannot be called through ("" if it can).
	notReadyReason, notReady string
	// provider is what the provider's headers last said of the key, by any
	// shard calling through the endpoint; declared, the key's limits as
	// declared (the quota's, for an endpoint naming one: one account's), and
	// keyUsage what went through the key over the last minute (nil: unknown).
	provider cluster.ProviderSeen
	declared ratelimit.Limits
	keyUsage *cluster.Usage
}

// limitsInForce sets the pass's limits: the endpoint's own, or its part of
// its ModelQuota within them. An endpoint whose quota is missing, does not
// admit its namespace, or has given it no part yet holds its runners.
func (r *ModelEndpointReconciler) limitsInForce(ctx context.Context, p *endpointPass) error {
	var own v1alpha1.EndpointLimits
	if p.ep.Spec.Limits != nil {
		own = *p.ep.Spec.Limits
	}
	p.limits = apiconv.EndpointLimitsOf(own)
	p.declared = p.limits
	ref := p.ep.Spec.QuotaRef
	if ref == nil {
		return nil
	}
	var q v1alpha1.ModelQuota
	if err := r.Get(ctx, client.ObjectKey{Name: ref.Name}, &q); err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		p.held, p.notReadyReason = true, v1alpha1.ReasonQuotaNotFound
		p.notReady = fmt.Sprintf("ModelQuota %s (spec.quotaRef) not found: Evaluations calling through the endpoint wait", ref.Name)
		return nil
	}
	quotaLimits := apiconv.QuotaLimitsOf(&q)
	// The provider limits the account: every endpoint of the quota.
	p.declared = quotaLimits
	if u := q.Status.Usage; u != nil {
		p.keyUsage = &cluster.Usage{Requests: u.RequestsPerMinute, InputTokens: u.InputTokensPerMinute, OutputTokens: u.OutputTokensPerMinute}
	} else {
		p.keyUsage = &cluster.Usage{}
	}
	division, err := cluster.ParseBudget(q.Annotations)
	if err != nil {
		return fmt.Errorf("ModelQuota %s: %w", ref.Name, err)
	}
	// Recorded even while held, so that the quota learns when the endpoint has
	// applied a part of nothing.
	p.quota = &cluster.QuotaApplied{UID: string(q.UID), Version: division.Version}
	if _, ok := q.Spec.Admits(p.ep.Namespace); !ok {
		p.held, p.limits, p.notReadyReason = true, quotaLimits, v1alpha1.ReasonQuotaNotAllowed
		p.notReady = fmt.Sprintf("ModelQuota %s (spec.quotaRef) does not list namespace %s in spec.namespaces: Evaluations calling through the endpoint wait", ref.Name, p.ep.Namespace)
		return nil
	}
	part, limited, paused := division.Lookup(q.Name, cluster.QuotaUserKey(p.ep.Namespace, p.ep.Name))
	if !limited || paused {
		p.held, p.limits = true, quotaLimits
		return nil
	}
	in, held := cluster.QuotaLimits(quotaLimits, part, p.limits)
	if held {
		in = quotaLimits
	}
	p.limits, p.held = in, held
	return nil
}

// Reconcile divides the endpoint's limits among the shards calling through
// it, then writes its status if it changed.
func (r *ModelEndpointReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ep := &v1alpha1.ModelEndpoint{}
	if err := r.Get(ctx, req.NamespacedName, ep); err != nil {
		if apierrors.IsNotFound(err) {
			// Runner pods calling through it hold their calls as soon as they
			// find its budget gone, until it is back.
			r.heads.forget(req.NamespacedName)
			r.wrote.forget(req.NamespacedName)
			return ctrl.Result{}, r.deleteBudget(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !ep.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	p := &endpointPass{ep: ep, now: r.Clock.Now(), acks: map[string]cluster.EndpointAck{}, seen: map[string]bool{}}
	status := ep.Status.DeepCopy()
	status.ObservedGeneration = ep.Generation
	setCond := func(s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionReady, Status: s, Reason: reason, Message: msg, ObservedGeneration: ep.Generation, LastTransitionTime: metav1.NewTime(p.now),
		})
	}

	budget, conflict, err := r.ensureBudget(ctx, ep)
	if err != nil {
		return ctrl.Result{}, err
	}
	var result ctrl.Result
	switch {
	case conflict:
		setCond(metav1.ConditionFalse, v1alpha1.ReasonBudgetNameConflict, fmt.Sprintf("ConfigMap %s, which the endpoint's budget needs, is not the endpoint's; "+
			"Evaluations calling through it wait. Rename or delete that ConfigMap", cluster.EndpointBudgetName(ep.Name)))
		result.RequeueAfter = r.Options.RecheckAfter
	case budget == nil:
		result.RequeueAfter = r.Options.RecheckAfter // being made
	default:
		if err := r.limitsInForce(ctx, p); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.observeShards(ctx, p); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.divide(ctx, p, budget); err != nil {
			return ctrl.Result{}, err
		}
		r.compareWithProvider(p, status)
		if p.stale {
			result.RequeueAfter = 100 * time.Millisecond
		}
		switch {
		case p.notReady != "":
			setCond(metav1.ConditionFalse, p.notReadyReason, p.notReady)
			result.RequeueAfter = nonZero(result.RequeueAfter, r.Options.RecheckAfter)
		case p.held:
			setCond(metav1.ConditionTrue, v1alpha1.ReasonWaitingForQuota, fmt.Sprintf("waiting for a part of ModelQuota %s", p.ep.Spec.QuotaRef.Name))
		case p.ep.Spec.QuotaRef != nil:
			setCond(metav1.ConditionTrue, v1alpha1.ReasonBudgetReady, fmt.Sprintf("Evaluations of the namespace may call through the endpoint, within its part of ModelQuota %s", p.ep.Spec.QuotaRef.Name))
		default:
			setCond(metav1.ConditionTrue, v1alpha1.ReasonBudgetReady, "Evaluations of the namespace may call through the endpoint")
		}
		status.Limits = nil
		if !p.held && !p.limits.IsZero() {
			status.Limits = &v1alpha1.EndpointLimits{RequestsPerMinute: p.limits.RequestsPerMinute,
				InputTokensPerMinute: p.limits.InputTokensPerMinute, OutputTokensPerMinute: p.limits.OutputTokensPerMinute,
				MaxInFlight: p.limits.MaxInFlight}
		}
	}
	status.Evaluations, status.Shards = p.evaluations, p.shards
	status.Usage = nil
	if p.usage != (cluster.Usage{}) {
		status.Usage = &v1alpha1.EndpointUsage{RequestsPerMinute: p.usage.Requests, InputTokensPerMinute: p.usage.InputTokens,
			OutputTokensPerMinute: p.usage.OutputTokens, ThrottledPerMinute: p.usage.Throttled}
	}
	if p.anyActive {
		// Staleness is noticed, and usage decays, even if no runner writes.
		result.RequeueAfter = min(nonZero(result.RequeueAfter, r.Options.StaleAfter), r.Options.StaleAfter)
	}
	wait, err := r.writeStatus(ctx, ep, status, p.now)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.limitsEvent(ep, status)
	if wait > 0 {
		result.RequeueAfter = min(nonZero(result.RequeueAfter, wait), wait)
	}
	return result, nil
}

func nonZero(d, fallback time.Duration) time.Duration {
	if d == 0 {
		return fallback
	}
	return d
}

// deleteBudget deletes the budget of a ModelEndpoint that is gone, at once:
// the garbage collector would too (it is the endpoint's), but in its own time.
func (r *ModelEndpointReconciler) deleteBudget(ctx context.Context, ep types.NamespacedName) error {
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.Get(ctx, client.ObjectKey{Namespace: ep.Namespace, Name: cluster.EndpointBudgetName(ep.Name)}, cm); err != nil {
		return client.IgnoreNotFound(err)
	}
	ref := metav1.GetControllerOf(cm)
	if ref == nil || ref.Kind != "ModelEndpoint" || ref.Name != ep.Name || ref.APIVersion != v1alpha1.GroupVersion.String() {
		return nil // not a ModelEndpoint's budget: never touched
	}
	// Only the budget of the endpoint that was deleted: one made again since
	// has a new budget, with its own UID.
	if err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the budget of ModelEndpoint %s: %w", ep.Name, err)
	}
	return nil
}

// ensureBudget returns the endpoint's budget ConfigMap (metadata), creating it
// if absent. It returns nil while the budget is being made, with conflict set
// if its name is taken by a ConfigMap that is not a ModelEndpoint's.
func (r *ModelEndpointReconciler) ensureBudget(ctx context.Context, ep *v1alpha1.ModelEndpoint) (*metav1.PartialObjectMetadata, bool, error) {
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	key := client.ObjectKey{Namespace: ep.Namespace, Name: cluster.EndpointBudgetName(ep.Name)}
	err := r.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, cluster.NewEndpointBudgetConfigMap(ep)); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("creating the budget ConfigMap %s: %w", key.Name, err)
		}
		// Divided from the next pass, when the cache holds it (and its UID).
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case metav1.IsControlledBy(cm, ep):
		return cm, false, nil
	}
	ref := metav1.GetControllerOf(cm)
	if ref == nil || ref.Kind != "ModelEndpoint" || ref.Name != ep.Name || ref.APIVersion != v1alpha1.GroupVersion.String() {
		return nil, true, nil
	}
	// The budget of an endpoint of this name deleted before: its runners
	// stopped when it went, and the new one starts from a budget of its own.
	if err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return nil, false, fmt.Errorf("deleting the budget of the deleted ModelEndpoint %s: %w", ep.Name, err)
	}
	return nil, false, nil
}

// observeShards finds the running shards of every Evaluation calling through
// the endpoint: the groups that share its limits (an Evaluation's model each),
// what each shard acknowledged, and what they sent in the last minute.
func (r *ModelEndpointReconciler) observeShards(ctx context.Context, p *endpointPass) error {
	evs, err := evaluationsCalling(ctx, r.Client, p.ep.Namespace, p.ep.Name)
	if err != nil {
		return err
	}
	for i := range evs {
		if err := r.observeEvaluation(ctx, p, &evs[i]); err != nil {
			return err
		}
	}
	r.heads.retain(types.NamespacedName{Namespace: p.ep.Namespace, Name: p.ep.Name}, p.seen)
	return nil
}

// evaluationsCalling lists the Evaluations of namespace whose models call
// through the endpoint, by name.
func evaluationsCalling(ctx context.Context, c client.Reader, namespace, endpoint string) ([]v1alpha1.Evaluation, error) {
	var evs v1alpha1.EvaluationList
	if err := c.List(ctx, &evs, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(evs.Items, func(ev v1alpha1.Evaluation) bool { return !slices.Contains(ev.Spec.EndpointNames(), endpoint) })
	slices.SortFunc(out, func(a, b v1alpha1.Evaluation) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (r *ModelEndpointReconciler) observeEvaluation(ctx context.Context, p *endpointPass, ev *v1alpha1.Evaluation) error {
	st := &ev.Status
	if st.Run == "" || st.Phase == v1alpha1.PhaseSucceeded || st.Phase == v1alpha1.PhaseFailed {
		return nil
	}
	v1alpha1.SetDefaults(&ev.Spec)
	// The models calling through this endpoint, and who calls them: a model
	// its own shards, a judge every shard.
	judges := ev.Spec.JudgeModels()
	var callers []apiconv.EndpointCaller
	for _, c := range apiconv.EndpointCallers(&ev.Spec) {
		if c.Ref.Name == p.ep.Name && (c.Ref.Namespace == "" || c.Ref.Namespace == ev.Namespace) {
			callers = append(callers, c)
		}
	}
	if len(callers) == 0 {
		return nil
	}
	planCM := &metav1.PartialObjectMetadata{}
	planCM.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.Get(ctx, client.ObjectKey{Namespace: ev.Namespace, Name: cluster.PlanName(ev.Name, st.Run)}, planCM); err != nil {
		return client.IgnoreNotFound(err)
	}
	plan := planOf(planCM, ev)
	if plan == nil {
		return nil
	}
	heads, err := listConfigMaps(ctx, r.Client, client.InNamespace(ev.Namespace), client.MatchingLabels{
		cluster.LabelEvaluation: cluster.LabelValue(ev.Name), cluster.LabelRun: st.Run, cluster.LabelComponent: cluster.ComponentShard,
	})
	if err != nil {
		return err
	}
	byName := map[string]*metav1.PartialObjectMetadata{}
	for i := range heads {
		if cluster.Owned("ConfigMap", &heads[i], ev) == nil {
			byName[heads[i].Name] = &heads[i]
		}
	}
	groups := make([]cluster.Group, len(callers))
	for i, c := range callers {
		groups[i] = cluster.Group{Name: ev.Name + "/" + c.Name, Weight: c.Ref.EndpointWeight()}
		if c.Agent == nil {
			// A model's rateLimit caps its own calls, not its agent's.
			groups[i].Cap = apiconv.LimitsOf(c.Model.RateLimit)
		}
	}
	key := types.NamespacedName{Namespace: p.ep.Namespace, Name: p.ep.Name}
	active := false
	for _, subject := range cluster.Subjects(&ev.Spec) {
		for _, s := range plan.Shards(&ev.Spec, subject) {
			name := cluster.HeadName(ev.Name, st.Run, subject, s.Index)
			h := byName[name]
			if h == nil {
				continue
			}
			p.seen[name] = true
			prog, _ := cluster.ParseProgress(h.Annotations)
			fresh := p.now.Sub(r.heads.changedAt(key, name, h.ResourceVersion, p.now)) < r.Options.StaleAfter
			if prog.State != cluster.StateRunning || !fresh {
				continue
			}
			calls := false
			for i, c := range callers {
				if c.Model.Name != subject && !judges[c.Model.Name] {
					continue
				}
				k := cluster.EndpointUserKey(ev.Name, st.Run, s, c.Name)
				groups[i].Keys = append(groups[i].Keys, k)
				if a, ok := prog.Endpoints[p.ep.Name]; ok {
					p.acks[k] = a
				}
				p.usage.Add(prog.Usage[c.Name])
				p.provider = p.provider.Latest(prog.Provider[c.Name])
				calls = true
			}
			if calls {
				p.shards++
				active = true
			}
		}
	}
	if active {
		p.evaluations++
		p.anyActive = true
	}
	p.groups = append(p.groups, groups...)
	return nil
}

// compareWithProvider shows what the provider's headers last said of the
// key (status.provider) and whether it agrees with the declared limits
// (condition LimitsMismatch), once a runner pod saw them.
func (r *ModelEndpointReconciler) compareWithProvider(p *endpointPass, status *v1alpha1.ModelEndpointStatus) {
	if p.provider.At.IsZero() {
		return
	}
	seen := p.provider
	status.Provider = &v1alpha1.ProviderLimits{RequestsPerMinute: seen.Requests.Limit, InputTokensPerMinute: seen.InputTokens.Limit,
		OutputTokensPerMinute: seen.OutputTokens.Limit, TokensPerMinute: seen.Tokens.Limit, RemainingRequests: seen.Requests.Remaining,
		ObservedAt: &seen.At}
	used := p.keyUsage
	if p.ep.Spec.QuotaRef == nil {
		used = &p.usage
	}
	setLimitsMismatch(&status.Conditions, p.ep.Generation, p.now, p.declared, seen, used)
}

// setLimitsMismatch sets condition LimitsMismatch from a key's declared
// limits and what its provider's headers said.
func setLimitsMismatch(conds *[]metav1.Condition, generation int64, now time.Time, declared ratelimit.Limits, seen cluster.ProviderSeen, used *cluster.Usage) {
	reason, msg := cluster.LimitsMismatch(declared, seen, used, now)
	c := metav1.Condition{Type: v1alpha1.ConditionLimitsMismatch, Status: metav1.ConditionTrue, Reason: reason, Message: msg,
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)}
	if reason == "" {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonLimitsAgree, "the provider's rate-limit headers agree with the declared limits"
	}
	meta.SetStatusCondition(conds, c)
}

// limitsEvent warns, after the status write, when the provider's limits
// came to disagree with the endpoint's.
func (r *ModelEndpointReconciler) limitsEvent(ep *v1alpha1.ModelEndpoint, status *v1alpha1.ModelEndpointStatus) {
	now := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionLimitsMismatch)
	if r.Recorder == nil || now == nil || now.Status != metav1.ConditionTrue {
		return
	}
	if was := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionLimitsMismatch); was != nil && was.Status == now.Status && was.Reason == now.Reason {
		return
	}
	r.Recorder.Eventf(ep, nil, corev1.EventTypeWarning, now.Reason, now.Reason, "%s", now.Message)
}

// planOf is the plan ev's plan ConfigMap holds; nil if it is not ev's, not
// made yet, or failed (which the Evaluation's controller reports): then no
// shard runs.
func planOf(cm *metav1.PartialObjectMetadata, ev *v1alpha1.Evaluation) *cluster.Plan {
	if cluster.Owned("ConfigMap", cm, ev) != nil {
		return nil
	}
	plan, _, err := cluster.ParsePlan(cm.Annotations)
	if err != nil {
		return nil
	}
	return plan
}

// divide writes the next division of the endpoint's limits into its budget.
func (r *ModelEndpointReconciler) divide(ctx context.Context, p *endpointPass, cm *metav1.PartialObjectMetadata) error {
	prev, err := cluster.ParseBudget(cm.Annotations)
	if err != nil {
		return err
	}
	next, changed := cluster.DivideEndpointInQuota(prev, string(cm.UID), p.ep.Name, p.limits, p.groups, p.acks, p.held, p.quota)
	if !changed {
		return nil
	}
	// Divided from what the cache holds, so written only over that version: a
	// division from a stale budget would miscount the grants in use.
	patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	if err := cluster.SetBudget(cm.Annotations, next); err != nil {
		return err
	}
	if err := r.Patch(ctx, cm, patch); err != nil {
		if apierrors.IsConflict(err) {
			p.stale = true
			return nil
		}
		return fmt.Errorf("writing the budget of ModelEndpoint %s: %w", p.ep.Name, err)
	}
	log.FromContext(ctx).V(1).Info("Divided the endpoint's limits", "version", next.Version, "shards", p.shards)
	return nil
}

// writeStatus writes the endpoint's status if it changed; a change of usage
// alone at most every ProgressInterval (it returns how long to wait then).
func (r *ModelEndpointReconciler) writeStatus(ctx context.Context, ep *v1alpha1.ModelEndpoint, st *v1alpha1.ModelEndpointStatus, now time.Time) (time.Duration, error) {
	old := ep.Status.DeepCopy()
	old.Usage = st.Usage
	if old.Provider != nil && st.Provider != nil && old.Provider.RequestsPerMinute == st.Provider.RequestsPerMinute &&
		old.Provider.InputTokensPerMinute == st.Provider.InputTokensPerMinute && old.Provider.OutputTokensPerMinute == st.Provider.OutputTokensPerMinute &&
		old.Provider.TokensPerMinute == st.Provider.TokensPerMinute {
		// What remains, and when it was seen, change with every call: like
		// usage, written at most every ProgressInterval.
		old.Provider = st.Provider
	}
	updated := ep.DeepCopy()
	updated.Status = *st
	return writeUsageStatus(ctx, r.Client, r.wrote, r.Options.ProgressInterval, updated,
		!apiequality.Semantic.DeepEqual(&ep.Status, st), apiequality.Semantic.DeepEqual(old, st), now)
}

// writeUsageStatus writes updated's status (a ModelEndpoint's or a
// ModelQuota's) if it changed; when only its usage changed, at most every
// interval per object, as t records. It returns how long to wait before
// writing again (a conflict: a second).
func writeUsageStatus(ctx context.Context, c client.Client, t *throttle, interval time.Duration, updated client.Object, changed, onlyUsage bool, now time.Time) (time.Duration, error) {
	if !changed {
		return 0, nil
	}
	key := client.ObjectKeyFromObject(updated)
	if onlyUsage {
		if wait := t.wait(key, now, interval); wait > 0 {
			return wait, nil
		}
	}
	if err := c.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			return time.Second, nil
		}
		return 0, fmt.Errorf("writing the status of %T %s: %w", updated, key, err)
	}
	t.wrote(key, now)
	return 0, nil
}
