package controllers

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// pass is what one reconcile learns and decides.
type pass struct {
	// mu guards what the objects a pass makes at once (eachAtOnce) note:
	// requeueAfter, event, conflict and refused lock it.
	mu     sync.Mutex
	ev     *v1alpha1.Evaluation
	status *v1alpha1.EvaluationStatus
	now    time.Time
	run    string
	result ctrl.Result

	// pending says why the run cannot start yet (a reason and a message).
	pendingReason, pendingMessage string
	// endpointsMissing names the ModelEndpoints models call through that are
	// not there or not ready, with endpointsReason (EndpointNotFound or
	// EndpointNotReady); "" when all are.
	endpointsMissing, endpointsReason string
	// endpointsGone: some of them do not exist (no Job is made then).
	endpointsGone bool
	// agentEndpoints are the specs of the ModelEndpoints agents call, by name:
	// their keys go into the runner containers of those agents' pods.
	agentEndpoints map[string]*v1alpha1.ModelEndpointSpec
	// failure ends the run: a reason and a message.
	failureReason, failureMessage string

	// configMaps holds the data of dataset ConfigMaps read while checking references.
	configMaps map[string]*corev1.ConfigMap
	// cacheSources are record ConfigMaps of an earlier run this run may reuse.
	cacheSources []string
	// uploadSecrets are the run's shards' uploads Secrets (its records go
	// to the results store), which its runners read.
	uploadSecrets []string
	// cacheURLs is the run's cache URLs Secret, when it has one.
	cacheURLs string
	// store is the results store the run writes to (openStore), once
	// storeOpened; storeMissing says why the Evaluation's own cannot be used.
	store        *objstore.Store
	storeOpened  bool
	storeMissing string
	// shardObjects are the heads and chunk slots of the run's shards, which
	// their runners may update.
	shardObjects []string
	plan         *cluster.Plan
	// hashes are the spec's fingerprints (taken once a pass: the spec may
	// hold thousands of inline samples).
	hashes *cluster.Hashes
	jobs   map[string]*batchv1.Job // by model
	// queued are the run's Jobs Kueue has not admitted (yet, or again
	// after a preemption); workloads their Workloads, read once a pass.
	queued    []admission
	workloads map[types.UID]*unstructured.Unstructured
	shards    []shardState
	// headsInStore: some of the run's heads seal their records into the
	// results store.
	headsInStore bool
	finished     bool
	events       []event

	// problems are what is wrong with the run's pods now; healthObserved says
	// the pass looked. degraded summarizes them for the Degraded condition;
	// stalled is set when a stall lasted spec.runner.stallTimeout: it ends the run.
	problems       []problem
	healthObserved bool
	anyRunning     bool
	degraded       *problem
	stalled        *problem

	// conflicts are the objects of names the run needs that are not the
	// Evaluation's; ignored, objects labelled as its own that it does not
	// control. complete says every step ran (so no conflict is left).
	conflicts []string
	ignored   []string
	complete  bool

	// waiting says why a run whose samples all ran cannot end yet (its
	// baseline has no results yet).
	waiting *kube.Missing

	// throttled holds, by model, the runs of 429s the active shards reported:
	// the earliest start and the latest retry-after end.
	throttled map[string]cluster.Throttle
	// provider is what the providers' headers last said of each caller's key,
	// and used what the active shards sent each over the last minute;
	// endpointLimits what the ModelEndpoints called through say of theirs
	// (their LimitsMismatch conditions that are True).
	provider       map[string]cluster.ProviderSeen
	used           map[string]cluster.Usage
	endpointLimits []string
	endpointReason string
	// mismatch says where they disagree with the declared limits, and why.
	mismatch, mismatchReason string
	// refusal is why the API server refused to make an object the run needs
	// (a ResourceQuota on ConfigMaps or Jobs, an admission policy).
	refusal *problem
}

// noteRefusal makes a refused object a problem of the run, as pods that
// cannot start are: Degraded, a warning, and the run fails after
// spec.runner.stallTimeout if nothing changes; a run not started yet waits
// in Pending saying so.
func (r *EvaluationReconciler) noteRefusal(p *pass) {
	if p.refusal == nil {
		return
	}
	if len(p.jobs) == 0 && p.pendingReason == "" {
		p.pendingReason, p.pendingMessage = v1alpha1.ReasonFailedCreate, "the run cannot make its objects"
	}
	p.problems = append(p.problems, *p.refusal)
	p.requeueAfter(r.Options.RecheckAfter)
	r.judgeHealth(p)
	if p.stalled != nil && p.failureReason == "" {
		p.fail(p.stalled.reason, "%s", p.stalled.message)
	}
}

// refused notes that creating an object of kind was refused for good until
// someone changes something (forbidden: a quota, an admission policy), and
// reports whether it was: the pass then stops, and the status says why,
// which the manager's log alone used to (for minutes, with no phase).
func (p *pass) refused(kind, name string, err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refusal == nil {
		p.refusal = &problem{reason: v1alpha1.ReasonFailedCreate, stall: true,
			message: fmt.Sprintf("creating %s %s was refused: %s", kind, name, detail(err.Error()))}
	}
	return true
}

// noteProvider adds what an active shard saw of its keys and sent to them.
func (p *pass) noteProvider(seen map[string]cluster.ProviderSeen, used map[string]cluster.Usage) {
	for m, s := range seen {
		if p.provider == nil {
			p.provider = map[string]cluster.ProviderSeen{}
		}
		p.provider[m] = p.provider[m].Latest(s)
	}
	for m, u := range used {
		if p.used == nil {
			p.used = map[string]cluster.Usage{}
		}
		have := p.used[m]
		have.Add(u)
		p.used[m] = have
	}
}

// limitsMismatch says where a provider's headers disagree with the declared
// limits: the models' own rateLimits (their keys are the Evaluation's), and
// the ModelEndpoints called through (as their status says).
func (p *pass) limitsMismatch() (reason, msg string) {
	var parts []string
	for i := range p.ev.Spec.Models {
		m := &p.ev.Spec.Models[i]
		seen, ok := p.provider[m.Name]
		if m.EndpointRef != nil || m.RateLimit == nil || !ok {
			continue
		}
		var used *cluster.Usage
		if u, ok := p.used[m.Name]; ok {
			used = &u
		}
		if r, why := cluster.LimitsMismatchOf(apiconv.LimitsOf(m.RateLimit), seen, used, p.now); r != "" {
			reason = cmp.Or(reason, r)
			parts = append(parts, fmt.Sprintf("model %s (spec.models[%d].rateLimit): %s", m.Name, i, why))
		}
	}
	if len(p.endpointLimits) > 0 {
		reason = cmp.Or(reason, p.endpointReason)
		parts = append(parts, p.endpointLimits...)
	}
	return reason, strings.Join(parts, "; ")
}

// noteThrottled adds a shard's rate-limited models to the pass.
func (p *pass) noteThrottled(models map[string]cluster.Throttle) {
	for m, t := range models {
		if p.throttled == nil {
			p.throttled = map[string]cluster.Throttle{}
		}
		have, ok := p.throttled[m]
		if !ok || t.Since.Before(&have.Since) {
			have.Since = t.Since
		}
		if t.Until != nil && (have.Until == nil || have.Until.Before(t.Until)) {
			have.Until = t.Until
		}
		have.Refusals += t.Refusals
		p.throttled[m] = have
	}
}

// rateLimitMessage says which models are rate limited, since when, and what
// that means for the run. It names times, not durations, so that it does not
// change (and rewrite the status) while the throttling lasts.
func (p *pass) rateLimitMessage() string {
	models := slices.Sorted(maps.Keys(p.throttled))
	parts := make([]string, len(models))
	for i, m := range models {
		parts[i] = fmt.Sprintf("model %s since %s", m, p.throttled[m].Since.UTC().Format(time.RFC3339))
	}
	wait := v1alpha1.DefaultMaxThrottleWait
	if r := p.ev.Spec.Retry; r != nil && r.MaxThrottleWait != nil {
		wait = r.MaxThrottleWait.Duration
	}
	return fmt.Sprintf("rate limited by the server (HTTP 429): %s; calls wait for it and no sample fails for it, "+
		"but the run fails if a model has no successful call for retry.maxThrottleWait (%v)", strings.Join(parts, ", "), wait)
}

type event struct {
	eventType, reason, note string
}

func newPass(ev *v1alpha1.Evaluation, now time.Time) *pass {
	return &pass{ev: ev, status: ev.Status.DeepCopy(), now: now, configMaps: map[string]*corev1.ConfigMap{}, jobs: map[string]*batchv1.Job{}}
}

func (p *pass) requeueAfter(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d > 0 && (p.result.RequeueAfter == 0 || d < p.result.RequeueAfter) {
		p.result.RequeueAfter = d
	}
}

func (p *pass) event(eventType, reason, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, event{eventType, reason, fmt.Sprintf(format, args...)})
}

// conflict notes a name the run needs that another object holds.
func (p *pass) conflict(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.conflicts, err.Error()) {
		p.conflicts = append(p.conflicts, err.Error())
	}
}

func (p *pass) fail(reason, format string, args ...any) {
	p.failureReason, p.failureMessage = reason, fmt.Sprintf(format, args...)
}

// setPhase derives the phase and conditions from what the pass found.
func (r *EvaluationReconciler) setPhase(p *pass) {
	st := p.status
	gen := p.ev.Generation
	st.ObservedGeneration = gen
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(p.now),
		})
	}
	suspended := p.ev.Spec.Suspend != nil && *p.ev.Spec.Suspend
	st.Reason = ""
	p.mismatchReason, p.mismatch = p.limitsMismatch()
	r.noteRefusal(p)
	switch {
	case p.failureReason != "":
		st.Phase, st.Message, st.Reason = v1alpha1.PhaseFailed, p.failureMessage, p.failureReason
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, p.failureReason, p.failureMessage)
		set(v1alpha1.ConditionFailed, metav1.ConditionTrue, p.failureReason, p.failureMessage)
		set(v1alpha1.ConditionComplete, metav1.ConditionFalse, p.failureReason, "")
	case p.finished:
		st.Phase, st.Message = v1alpha1.PhaseSucceeded, ""
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonCompleted, "every sample was evaluated")
		set(v1alpha1.ConditionComplete, metav1.ConditionTrue, v1alpha1.ReasonCompleted, "every sample was evaluated")
		set(v1alpha1.ConditionFailed, metav1.ConditionFalse, v1alpha1.ReasonCompleted, "")
	case suspended:
		st.Phase, st.Message = v1alpha1.PhaseSuspended, "spec.suspend is true; finished samples are kept"
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonSuspended, st.Message)
	case len(p.conflicts) > 0 && len(p.jobs) == 0:
		st.Phase, st.Message, st.Reason = v1alpha1.PhasePending, p.conflictMessage(), v1alpha1.ReasonNameConflict
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonNameConflict, st.Message)
	case p.pendingReason != "":
		st.Phase, st.Message = v1alpha1.PhasePending, p.pendingMessage
		if p.pendingReason != v1alpha1.ReasonPlanning {
			st.Reason = p.pendingReason
		}
		if p.degraded != nil {
			st.Message, st.Reason = p.pendingMessage+": "+p.degraded.message, p.degraded.reason
		}
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, p.pendingReason, st.Message)
	case len(p.jobs) > 0 && len(p.queued) == len(p.jobs) && !p.anyRunning:
		// Kueue holds every Job: queued, not stalled.
		st.Phase, st.Message, st.Reason = v1alpha1.PhasePending, p.queuedMessage(), v1alpha1.ReasonQueued
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonQueued, st.Message)
	case len(p.jobs) > 0:
		st.Phase, st.Message = v1alpha1.PhaseRunning, ""
		switch {
		case len(p.queued) > 0 && !p.anyRunning:
			st.Message, st.Reason = p.queuedMessage(), v1alpha1.ReasonQueued
			set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonQueued, st.Message)
		case len(p.conflicts) > 0:
			st.Message, st.Reason = p.conflictMessage(), v1alpha1.ReasonNameConflict
			set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonRunning, "shards are running")
		case p.degraded != nil && !p.anyRunning:
			// Nothing runs: say why instead of "shards are running".
			st.Message, st.Reason = p.degraded.message, p.degraded.reason
			set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, p.degraded.reason, p.degraded.message)
		case p.degraded != nil:
			st.Message, st.Reason = p.degraded.message, p.degraded.reason
			set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonRunning, "shards are running")
		case p.endpointsMissing != "":
			st.Message, st.Reason = p.endpointsMissing, p.endpointsReason
			set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonRunning, "shards are running")
		case p.waiting != nil:
			st.Message, st.Reason = p.waiting.Message, p.waiting.Reason
			set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonRunning, "shards are running")
		case len(p.throttled) > 0:
			st.Message, st.Reason = p.rateLimitMessage(), v1alpha1.ReasonRateLimited
			set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonRunning, "shards are running")
		case p.mismatchReason != "":
			st.Message, st.Reason = p.mismatch, p.mismatchReason
			set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonRunning, "shards are running")
		default:
			set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonRunning, "shards are running")
		}
	default:
		st.Phase = v1alpha1.PhasePending
		set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonPlanning, "planning shards")
	}
	if st.Phase != v1alpha1.PhaseSucceeded && st.Phase != v1alpha1.PhaseFailed {
		// A run that had ended goes on (its spec.budget was raised).
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
			set(v1alpha1.ConditionFailed, metav1.ConditionFalse, v1alpha1.ReasonResumed, "the run resumed")
			st.CompletionTime = nil
		}
		if suspended {
			set(v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonSuspended, "spec.suspend is true")
		} else {
			meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionSuspended)
		}
		switch {
		case r.queueName(&p.ev.Spec) == "" || len(p.jobs) == 0 || suspended:
			meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionAdmitted)
		case len(p.queued) > 0:
			set(v1alpha1.ConditionAdmitted, metav1.ConditionFalse, v1alpha1.ReasonQueued, p.queuedMessage())
		default:
			set(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted, "Kueue admitted every runner Job")
		}
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionOutputsTruncated); st.Reason == "" && st.Phase != v1alpha1.PhaseFailed &&
		c != nil && c.Status == metav1.ConditionTrue {
		// Nothing more pressing: the REASON column says outputs are cut.
		st.Reason = c.Reason
		if st.Message == "" {
			st.Message = c.Message
		}
	}
	r.setDegraded(p, set, suspended)
	setStandardConditions(p, set)
	r.setRateLimited(p, set)
	setLimitsMismatchOf(p, set)
	r.setNameConflict(p, set)
	setEndpointUnavailable(p, set)
	if (st.Phase == v1alpha1.PhaseSucceeded || st.Phase == v1alpha1.PhaseFailed) && st.CompletionTime == nil {
		st.CompletionTime = &metav1.Time{Time: p.now}
	}
	r.emitPhaseEvents(p)
}

// setStandardConditions sets Ready, Reconciling and Stalled from the phase the
// pass decided, for kstatus (Flux, Helm), Argo CD and kubectl wait: Ready is
// True only for a run that succeeded (and met its gate); Stalled is True when
// the run cannot go on without a change (a failure, a missing reference, pods
// that cannot start), but not while pods only wait for room on a node or in
// the namespace's quota (a busy cluster makes some without a change;
// stallTimeout ends the wait); otherwise Reconciling is True. Messages do not
// carry progress, which would rewrite the status with every sample.
func setStandardConditions(p *pass, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	st := p.status
	reason, msg := st.Reason, st.Message
	stalled := false
	switch st.Phase {
	case v1alpha1.PhaseSucceeded:
		msg = "every sample was evaluated"
		if p.ev.Spec.Gate != nil {
			msg += ", and the run met its gate"
		}
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSucceeded, msg)
		set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonSucceeded, "")
		set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonSucceeded, "")
		return
	case v1alpha1.PhaseFailed:
		stalled = true
	case v1alpha1.PhaseSuspended:
		reason = v1alpha1.ReasonSuspended
	case v1alpha1.PhasePending:
		switch {
		case p.degraded != nil:
			// The planner's pod cannot start (stalled), or failed and is
			// retried by its Job (not).
			stalled, reason = p.degraded.stall && !p.degraded.waitsForRoom, p.degraded.reason
		case reason == v1alpha1.ReasonNameConflict:
			stalled = true
		case p.pendingReason != "" && p.pendingReason != v1alpha1.ReasonPlanning:
			// A missing Secret, ConfigMap, PVC, ModelEndpoint or baseline.
			stalled, reason = true, p.pendingReason
		}
	case v1alpha1.PhaseRunning:
		// Nothing runs, and nothing will until the pods' problem is fixed
		// (spec.runner.stallTimeout ends the run if it is not). A pod that
		// failed is not that: the Job runs its shard again by itself
		// (OOMKilled, Evicted, preempted), or its retries run out and the run
		// ends; kstatus would take the moment between two pods for a failure.
		stalled = p.degraded != nil && p.degraded.stall && !p.anyRunning && !p.degraded.waitsForRoom
	}
	if reason == "" {
		reason, msg = v1alpha1.ReasonPlanning, "planning shards"
		if st.Phase == v1alpha1.PhaseRunning {
			reason, msg = v1alpha1.ReasonRunning, "shards are running"
		}
	}
	if msg == "" {
		msg = "the run is " + strings.ToLower(string(st.Phase))
	}
	set(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	if stalled {
		set(v1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
		set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, reason, "")
	} else {
		set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
		set(v1alpha1.ConditionStalled, metav1.ConditionFalse, reason, "")
	}
}

// conflictMessage says which names are taken, and what to do.
func (p *pass) conflictMessage() string {
	return strings.Join(p.conflicts, "; ") + ". Rename or delete it to let the run go on"
}

// setNameConflict sets the NameConflict condition, with an event when a name
// is found taken and when none is any more. A pass that stopped early (before
// every object was checked) leaves it alone.
func (r *EvaluationReconciler) setNameConflict(p *pass, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	old := meta.FindStatusCondition(p.status.Conditions, v1alpha1.ConditionNameConflict)
	was := old != nil && old.Status == metav1.ConditionTrue
	switch {
	case len(p.conflicts) > 0:
		msg := p.conflictMessage()
		if !was || old.Message != msg {
			p.event(corev1.EventTypeWarning, v1alpha1.ReasonNameConflict, "%s", msg)
		}
		set(v1alpha1.ConditionNameConflict, metav1.ConditionTrue, v1alpha1.ReasonNameConflict, msg)
	case was && p.complete:
		p.event(corev1.EventTypeNormal, v1alpha1.ReasonNamesFreed, "Every name the run needs is free or its own now")
		set(v1alpha1.ConditionNameConflict, metav1.ConditionFalse, v1alpha1.ReasonNamesFreed, "")
	}
}

// setDegraded sets the Degraded condition from what the pass saw of the pods
// (nothing, if it did not look), with an event when the problem appears or
// changes reason, and when it goes away.
func (r *EvaluationReconciler) setDegraded(p *pass, set func(t string, status metav1.ConditionStatus, reason, msg string), suspended bool) {
	if !p.healthObserved {
		return
	}
	old := meta.FindStatusCondition(p.status.Conditions, v1alpha1.ConditionDegraded)
	wasDegraded := old != nil && old.Status == metav1.ConditionTrue
	switch {
	case p.degraded != nil:
		if !wasDegraded || old.Reason != p.degraded.reason {
			p.event(corev1.EventTypeWarning, p.degraded.reason, "%s", p.degraded.message)
		}
		set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, p.degraded.reason, p.degraded.message)
	case wasDegraded && suspended:
		set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonSuspended, "spec.suspend is true: no runner pod runs")
	case wasDegraded:
		p.event(corev1.EventTypeNormal, v1alpha1.ReasonRecovered, "The runner pods recovered from %s", old.Reason)
		set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonRecovered, "")
	}
}

// setRateLimited sets the RateLimited condition from the shards' reports, with
// an event when a model starts being throttled and when none is any more. It
// is left alone by passes that did not look at the shards.
func (r *EvaluationReconciler) setRateLimited(p *pass, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	old := meta.FindStatusCondition(p.status.Conditions, v1alpha1.ConditionRateLimited)
	was := old != nil && old.Status == metav1.ConditionTrue
	running := p.status.Phase == v1alpha1.PhaseRunning
	switch {
	case running && len(p.throttled) > 0:
		msg := p.rateLimitMessage()
		if !was {
			p.event(corev1.EventTypeWarning, v1alpha1.ReasonRateLimited, "%s", msg)
		}
		set(v1alpha1.ConditionRateLimited, metav1.ConditionTrue, v1alpha1.ReasonRateLimited, msg)
	case was && (p.plan != nil || !running):
		if running {
			p.event(corev1.EventTypeNormal, v1alpha1.ReasonRateLimitLifted, "No model is rate limited any more")
		}
		set(v1alpha1.ConditionRateLimited, metav1.ConditionFalse, v1alpha1.ReasonRateLimitLifted, "")
	}
}

// setLimitsMismatchOf sets LimitsMismatch while a provider's headers
// disagree with what the run declares, with a warning when they come to; it
// is left alone by passes that did not look at the shards, and once the run
// ended.
func setLimitsMismatchOf(p *pass, set func(t string, status metav1.ConditionStatus, reason, msg string)) {
	if p.plan == nil || p.status.Phase != v1alpha1.PhaseRunning {
		return
	}
	old := meta.FindStatusCondition(p.status.Conditions, v1alpha1.ConditionLimitsMismatch)
	switch {
	case p.mismatchReason != "":
		if old == nil || old.Status != metav1.ConditionTrue || old.Reason != p.mismatchReason {
			p.event(corev1.EventTypeWarning, p.mismatchReason, "%s", p.mismatch)
		}
		set(v1alpha1.ConditionLimitsMismatch, metav1.ConditionTrue, p.mismatchReason, p.mismatch)
	case old != nil && old.Status == metav1.ConditionTrue:
		set(v1alpha1.ConditionLimitsMismatch, metav1.ConditionFalse, v1alpha1.ReasonLimitsAgree, "")
	}
}

// emitPhaseEvents adds the events a phase change deserves.
func (r *EvaluationReconciler) emitPhaseEvents(p *pass) {
	from, to := p.ev.Status.Phase, p.status.Phase
	if from == to && p.ev.Status.Run == p.status.Run {
		return
	}
	sameRun := p.ev.Status.Run == p.status.Run
	switch to {
	case v1alpha1.PhaseRunning:
		switch {
		case sameRun && from == v1alpha1.PhasePending && p.ev.Status.Reason == v1alpha1.ReasonQueued &&
			p.ev.Status.Progress != nil && p.ev.Status.Progress.Completed > 0:
			// Admitted again after a preemption: it goes on, it does not start.
			p.event(corev1.EventTypeNormal, v1alpha1.ReasonAdmitted, "Kueue admitted the run's Jobs again: it goes on from %s", p.ev.Status.Progress.Text)
		case from != v1alpha1.PhaseSuspended || !sameRun:
			p.event(corev1.EventTypeNormal, v1alpha1.ReasonStarted, "Started run %s: %d Job(s), %d samples per model",
				p.status.Run, len(p.jobs), p.plan.Total())
		}
	case v1alpha1.PhasePending:
		if sameRun && from == v1alpha1.PhaseRunning && p.status.Reason == v1alpha1.ReasonQueued {
			// Preempted: finished samples are kept.
			done := "0"
			if pr := p.status.Progress; pr != nil {
				done = pr.Text
			}
			p.event(corev1.EventTypeNormal, v1alpha1.ReasonQueued, "Kueue holds the run's Jobs (%s done, kept): %s", done, p.status.Message)
		}
	case v1alpha1.PhaseSucceeded:
		p.event(corev1.EventTypeNormal, v1alpha1.ReasonCompleted, "Every sample was evaluated: %s", p.status.Progress.Text)
	case v1alpha1.PhaseFailed:
		p.event(corev1.EventTypeWarning, v1alpha1.ReasonFailed, "%s", p.status.Message)
	}
}

// emit sends the pass's events, after its status was written.
func (r *EvaluationReconciler) emit(p *pass) {
	if r.Recorder == nil {
		return
	}
	for _, e := range p.events {
		r.Recorder.Eventf(p.ev, nil, e.eventType, e.reason, e.reason, "%s", eventNote(e.note))
	}
}

// maxEventNote is what the events API accepts of a note (it refuses longer ones).
const maxEventNote = 1024

// eventNote cuts a note to what the events API accepts, on a rune boundary.
func eventNote(note string) string {
	if len(note) <= maxEventNote {
		return note
	}
	cut := maxEventNote - len("...")
	for cut > 0 && !utf8Start(note[cut]) {
		cut--
	}
	return note[:cut] + "..."
}

// onlyProgress reports whether two statuses differ only in running progress
// (samples done, the live score). Shard counts are not progress: a shard
// finishing or failing is written at once, with its events.
func onlyProgress(a, b *v1alpha1.EvaluationStatus) bool {
	x, y := a.DeepCopy(), b.DeepCopy()
	x.Progress, y.Progress = nil, nil
	x.Score, y.Score = "", ""
	x.StoredBytes, y.StoredBytes = 0, 0
	if x.Shards != nil && y.Shards != nil {
		x.Shards.Active, y.Shards.Active = 0, 0
		x.Shards.Pending, y.Shards.Pending = 0, 0
		// Shards done are progress: a worker finishes one every few
		// seconds. (The run's end is a phase, written at once.)
		x.Shards.Succeeded, y.Shards.Succeeded = 0, 0
	}
	x.ObservedGeneration = y.ObservedGeneration
	for i := range x.Conditions {
		x.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	for i := range y.Conditions {
		y.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	return equalStatus(x, y)
}

// headTracker remembers when the controller last saw each shard head change, so
// staleness is judged on the controller's clock, not the runners'.
type headTracker struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]map[string]headSeen
}

type headSeen struct {
	version string
	at      time.Time
	// active is when the shard was last seen running; using, what it may use
	// of each model's limits since (cluster.Budget.Using, by model).
	active time.Time
	using  map[string]ratelimit.Limits
}

func newHeadTracker() *headTracker {
	return &headTracker{seen: map[types.NamespacedName]map[string]headSeen{}}
}

// changedAt returns when the head last changed (first sight counts as a change).
func (h *headTracker) changedAt(ev types.NamespacedName, head, version string, now time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.seen[ev]
	if m == nil {
		m = map[string]headSeen{}
		h.seen[ev] = m
	}
	s, ok := m[head]
	if !ok || s.version != version {
		s = headSeen{version: version, at: now, active: s.active, using: s.using}
		m[head] = s
	}
	return s.at
}

// sawActive notes that the shard of head runs now.
func (h *headTracker) sawActive(ev types.NamespacedName, head string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.seen[ev][head]; ok {
		s.active = now
		h.seen[ev][head] = s
	}
}

// lastActive is when the shard of head was last seen running; zero if never
// (by this controller).
func (h *headTracker) lastActive(ev types.NamespacedName, head string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[ev][head].active
}

// noteUsing notes what the running shard of head may use of model's limits.
func (h *headTracker) noteUsing(ev types.NamespacedName, head, model string, l ratelimit.Limits) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.seen[ev][head]; ok {
		if s.using == nil {
			s.using = map[string]ratelimit.Limits{}
		}
		s.using[model] = l
		h.seen[ev][head] = s
	}
}

// using is what the shard of head may use of model's limits since it last
// ran (zero if this controller never saw it run).
func (h *headTracker) using(ev types.NamespacedName, head, model string) ratelimit.Limits {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[ev][head].using[model]
}

// retain forgets the heads of key that are not in keep.
func (h *headTracker) retain(key types.NamespacedName, keep map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for head := range h.seen[key] {
		if !keep[head] {
			delete(h.seen[key], head)
		}
	}
}

func (h *headTracker) forget(ev types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.seen, ev)
}

// throttle remembers when progress was last written, per Evaluation.
type throttle struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

func newThrottle() *throttle { return &throttle{last: map[types.NamespacedName]time.Time{}} }

func (t *throttle) wait(key types.NamespacedName, now time.Time, interval time.Duration) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, ok := t.last[key]
	if !ok {
		return 0
	}
	return last.Add(interval).Sub(now)
}

func (t *throttle) wrote(key types.NamespacedName, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last[key] = now
}

func (t *throttle) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.last, key)
}

// versions remembers, per Evaluation, the resourceVersion this manager's
// last status write replaced: a pass that reads that version read the
// Evaluation before its own write came back through the watch.
type versions struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName]string
}

func newVersions() *versions { return &versions{replaced: map[types.NamespacedName]string{}} }

// replace notes that a status write replaced version rv of key.
func (v *versions) replace(key types.NamespacedName, rv string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.replaced[key] = rv
}

// isReplaced reports whether version rv of key is one a status write replaced.
func (v *versions) isReplaced(key types.NamespacedName, rv string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, ok := v.replaced[key]
	return ok && rv != "" && old == rv
}

func (v *versions) forget(key types.NamespacedName) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.replaced, key)
}

// nameSet remembers, per Evaluation, the names already reported.
type nameSet struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]map[string]bool
}

func newNameSet() *nameSet { return &nameSet{seen: map[types.NamespacedName]map[string]bool{}} }

// fresh returns the names not reported yet for ev.
func (n *nameSet) fresh(ev types.NamespacedName, names []string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, name := range names {
		if !n.seen[ev][name] {
			out = append(out, name)
		}
	}
	return out
}

func (n *nameSet) mark(ev types.NamespacedName, names []string) {
	if len(names) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen[ev] == nil {
		n.seen[ev] = map[string]bool{}
	}
	for _, name := range names {
		n.seen[ev][name] = true
	}
}

func (n *nameSet) forget(ev types.NamespacedName) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.seen, ev)
}

// specHashes keeps, per Evaluation, its spec's fingerprints at its current
// generation: taken on every pass, they encoded the whole spec each time
// (20-90 ms of CPU for 3,000 inline samples, on the 90-odd passes of a
// run). The spec changes only with the generation.
type specHashes struct {
	mu sync.Mutex
	m  map[types.NamespacedName]hashesAt
}

type hashesAt struct {
	uid        types.UID
	generation int64
	h          *cluster.Hashes
}

func newSpecHashes() *specHashes { return &specHashes{m: map[types.NamespacedName]hashesAt{}} }

// of returns ev's fingerprints, ev defaulted. An Evaluation without a
// generation (one no API server has stored) is hashed every time.
func (c *specHashes) of(ev *v1alpha1.Evaluation) *cluster.Hashes {
	key := types.NamespacedName{Namespace: ev.Namespace, Name: ev.Name}
	c.mu.Lock()
	at, ok := c.m[key]
	c.mu.Unlock()
	if ok && ev.Generation != 0 && at.uid == ev.UID && at.generation == ev.Generation {
		return at.h
	}
	h := cluster.HashSpec(&ev.Spec)
	if ev.Generation != 0 {
		c.mu.Lock()
		c.m[key] = hashesAt{uid: ev.UID, generation: ev.Generation, h: h}
		c.mu.Unlock()
	}
	return h
}

func (c *specHashes) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}
