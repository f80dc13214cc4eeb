package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/source"
	"github.com/proctor-dev/proctor/runner/results/objects"
	"github.com/proctor-dev/proctor/runner/spend"
)

// startRun decides the run. A spec edit that changes the results (anything but
// suspend, parallelism and rate limits) starts a new run: the children of the old
// one are deleted and status starts over. With the cache on, the old run's records
// are kept until the new run ends, as its response cache; so are the records
// of a model whose answers the edit left as they were (the scoring alone
// changed), which the new run scores again without calling the model.
func (r *EvaluationReconciler) startRun(ctx context.Context, p *pass) (bool, error) {
	p.hashes = r.hashes.of(p.ev)
	p.run = p.hashes.RunID(p.ev)
	if p.status.Run != "" && p.hashes.IsRun(p.ev, p.status.Run) {
		p.run = p.status.Run // a run started by an older manager keeps its identity
	}
	if p.status.Run == p.run {
		return true, nil
	}
	old, oldStart := p.status.Run, p.status.StartTime
	if old != "" {
		p.event(corev1.EventTypeNormal, v1alpha1.ReasonNewRun, "The spec changed: starting run %s (was %s)", p.run, old)
	}
	*p.status = v1alpha1.EvaluationStatus{Run: p.run, StartTime: &metav1.Time{Time: p.now}}
	kept, err := r.deleteOtherRuns(ctx, p, old)
	if err != nil {
		return false, err
	}
	kept = r.storedSources(ctx, p, old, kept, runLocation(p.ev, old, oldStart))
	var rescored []string
	for _, k := range kept {
		if k.Answers && !slices.Contains(rescored, k.Model) {
			rescored = append(rescored, k.Model)
		}
	}
	if len(rescored) > 0 {
		slices.Sort(rescored)
		p.event(corev1.EventTypeNormal, v1alpha1.ReasonRescoring, "Only the scoring changed for model(s) %s: run %s scores the answers of run %s again, calling judges only",
			strings.Join(rescored, ", "), p.run, old)
	}
	for _, name := range []string{cluster.ResultsName(p.ev.Name), cluster.BudgetName(p.ev.Name)} {
		if err := r.deleteIfOurs(ctx, p, name); err != nil {
			return false, err
		}
	}
	if len(kept) > 0 {
		b, _ := json.Marshal(kept)
		cm := &corev1.ConfigMap{
			ObjectMeta: objectMeta(p.ev.Namespace, cluster.CacheSourcesName(p.ev.Name, p.run), cluster.Labels(p.ev.Name, p.run, cluster.ComponentCache)),
			Data:       map[string]string{cluster.KeySources: string(b)},
		}
		if ok, err := r.claim(ctx, p, cm); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

func cacheOn(spec *v1alpha1.EvaluationSpec) bool { return spec.Cache != nil && spec.Cache.Enabled }

// deleteOtherRuns removes the Jobs and ConfigMaps of runs other than the current
// one, except those records of run keep that the current run reuses, which it
// returns: all of them with the cache on, else those whose model's answers
// are the current run's too (cluster.AnswersHash).
func (r *EvaluationReconciler) deleteOtherRuns(ctx context.Context, p *pass, keep string) ([]cluster.CacheSource, error) {
	ns := client.InNamespace(p.ev.Namespace)
	// "!=" also matches objects without the label (the budget, the permissions):
	// require it.
	hasRun, _ := labels.NewRequirement(cluster.LabelRun, selection.Exists, nil)
	other, _ := labels.NewRequirement(cluster.LabelRun, selection.NotEquals, []string{p.run})
	own, _ := labels.NewRequirement(cluster.LabelEvaluation, selection.Equals, []string{cluster.LabelValue(p.ev.Name)})
	sel := client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*own, *hasRun, *other)}
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)

	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, ns, sel); err != nil {
		return nil, err
	}
	for i := range jobs.Items {
		if r.ignoreForeign(p, "Job", &jobs.Items[i]) {
			continue
		}
		if err := r.Delete(ctx, &jobs.Items[i], bg); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
	}
	cms, err := r.listConfigMaps(ctx, ns, sel)
	if err != nil {
		return nil, err
	}
	var kept []cluster.CacheSource
	for i := range cms {
		cm := &cms[i]
		if r.ignoreForeign(p, "ConfigMap", cm) {
			continue
		}
		if c := cm.Labels[cluster.LabelComponent]; keep != "" && cm.Labels[cluster.LabelRun] == keep && (c == cluster.ComponentShard || c == cluster.ComponentRecords) {
			model := cm.Labels[cluster.LabelModel]
			answers := cm.Labels[cluster.LabelAnswers] != "" && cm.Labels[cluster.LabelAnswers] == p.hashes.Answers(model)
			if answers || cacheOn(&p.ev.Spec) {
				src := cluster.CacheSource{Model: model, Dataset: cm.Labels[cluster.LabelDataset], Name: cm.Name, Answers: answers}
				if cluster.InStore(cm.Annotations) {
					// Its records are in the store (storedSources), read with these scorers.
					src.InStore, src.Scorers = true, cm.Annotations[cluster.AnnotationScorers]
				}
				kept = append(kept, src)
				continue
			}
		}
		if err := r.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
	}
	return kept, nil
}

// checkReferences makes sure what the run needs exists before anything starts: a
// missing Secret, ConfigMap or PVC leaves the Evaluation Pending with the reason,
// and it is looked for again shortly (and on any edit). A model that needs an API
// key but names no Secret cannot run in a cluster at all.
func (r *EvaluationReconciler) checkReferences(ctx context.Context, p *pass) (bool, error) {
	// Once the run's Jobs exist, references no longer decide anything: a Secret
	// deleted after a run finished must not send it back to Pending.
	if started, err := r.runStarted(ctx, p); err != nil || started {
		return started, err
	}
	ns := p.ev.Namespace
	for i, m := range p.ev.Spec.Models {
		path := fmt.Sprintf("spec.models[%d]", i)
		if m.Agent != nil && m.Agent.Image == "" {
			// Admission refuses it too; this covers objects stored before that rule.
			p.fail(v1alpha1.ReasonInvalidSpec, "%s.agent.image: an agent model needs an image in a cluster: the image holding the agent CLI", path)
			return false, nil
		}
		if m.NeedsAPIKey() && (m.APIKey == nil || m.APIKey.SecretKeyRef == nil) {
			p.fail(v1alpha1.ReasonInvalidSpec, "%s.apiKey.secretKeyRef: model %q needs an API key, which a cluster reads from a Secret", path, m.Name)
			return false, nil
		}
		if m.APIKey != nil && m.APIKey.SecretKeyRef != nil {
			ok, err := r.exists(ctx, ns, m.APIKey.SecretKeyRef.Name, &corev1.Secret{})
			if err != nil {
				return false, err
			}
			if !ok {
				p.pendingReason = v1alpha1.ReasonSecretNotFound
				p.pendingMessage = fmt.Sprintf("Secret %s (%s.apiKey.secretKeyRef) not found", m.APIKey.SecretKeyRef.Name, path)
				p.requeueAfter(r.Options.RecheckAfter)
				return false, nil
			}
		}
	}
	if p.ev.Spec.ResultsStore != nil {
		if err := r.openStore(ctx, p); err != nil {
			return false, err
		}
		if p.storeMissing != "" {
			p.pendingReason, p.pendingMessage = v1alpha1.ReasonSecretNotFound, p.storeMissing
			p.requeueAfter(r.Options.RecheckAfter)
			return false, nil
		}
	}
	if p.ev.Spec.Baseline != nil {
		// A baseline that is not there would leave the run unjudged: it
		// waits for it. One that has not ended yet is waited for at the end.
		_, missing, err := kube.FindBaseline(ctx, r.APIReader, p.ev)
		if err == nil && missing != nil && missing.Reason == v1alpha1.ReasonBaselineNotFound {
			// An Evaluation deleted since: its runs are in the results store.
			var stored *objects.Results
			if stored, err = r.storedBaseline(ctx, p); stored != nil {
				missing = nil
			}
		}
		switch {
		case err != nil:
			return false, fmt.Errorf("looking for the baseline: %w", err)
		case missing != nil && missing.Reason == v1alpha1.ReasonBaselineNotFound:
			p.pendingReason, p.pendingMessage = missing.Reason, missing.Message
			p.requeueAfter(r.Options.RecheckAfter)
			return false, nil
		}
	}
	for i := range p.ev.Spec.Datasets {
		d := &p.ev.Spec.Datasets[i]
		k, ok := source.Of(&d.Source).(source.Referencing)
		if !ok {
			continue
		}
		found, err := k.Lookup(ctx, kube.Getter(r.APIReader), ns, d, fmt.Sprintf("spec.datasets[%d].source", i))
		switch {
		case err != nil:
			return false, err
		case found.Invalid != "":
			p.fail(v1alpha1.ReasonInvalidSpec, "%s", found.Invalid)
			return false, nil
		case found.Missing != nil:
			p.pendingReason, p.pendingMessage = found.Missing.Reason, found.Missing.Message
			p.requeueAfter(r.Options.RecheckAfter)
			return false, nil
		case found.Held != nil:
			p.configMaps[d.Name] = found.Held
		}
	}
	return true, nil
}

// exists reads an object's metadata only: the manager never needs Secret values.
func (r *EvaluationReconciler) exists(ctx context.Context, ns, name string, obj client.Object) (bool, error) {
	gvk, err := r.GroupVersionKindFor(obj)
	if err != nil {
		return false, err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// planConfigMap reads the run's plan ConfigMap (its metadata: the plan is
// in its annotations).
func (r *EvaluationReconciler) planConfigMap(ctx context.Context, p *pass) (*metav1.PartialObjectMetadata, error) {
	key := client.ObjectKey{Namespace: p.ev.Namespace, Name: cluster.PlanName(p.ev.Name, p.run)}
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err := r.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		// The cache may not have the planner's plan yet when it already has the
		// planner Job's end: read it from the API server, so its error is said.
		err = r.APIReader.Get(ctx, key, cm)
	}
	return cm, err
}

// loadPlan reads the run's plan, or makes it when the controller can count every
// dataset itself (inline and ConfigMap data). Otherwise the planner Job counts.
func (r *EvaluationReconciler) loadPlan(ctx context.Context, p *pass) (bool, error) {
	cm, err := r.planConfigMap(ctx, p)
	exists := err == nil
	switch {
	case exists && !r.ours(p, "ConfigMap", cm):
		return false, nil
	case !exists && !apierrors.IsNotFound(err):
		return false, err
	case exists:
		plan, failed, err := cluster.ParsePlan(cm.Annotations)
		switch {
		case err != nil:
			return false, fmt.Errorf("plan %s: %w", cm.Name, err)
		case failed != "":
			p.fail(v1alpha1.ReasonPlanningFailed, "planning failed: %s", failed)
			return false, nil
		case plan != nil:
			p.plan = plan
			observeEstimate(p, cm.Annotations[cluster.AnnotationEstimate])
			if p.ev.Status.Shards == nil {
				shardSizeRaised(p, plan) // the planner's plan, first read
			}
			return true, nil
		}
	}
	// No plan yet (or only the empty ConfigMap the planner is to fill in).

	totals := map[string]int{}
	for i := range p.ev.Spec.Datasets {
		d := &p.ev.Spec.Datasets[i]
		data, _ := heldData(d, p.configMaps[d.Name])
		n, ok, err := source.CountInMemory(d, data)
		if err != nil {
			p.fail(v1alpha1.ReasonPlanningFailed, "spec.datasets[%d]: %v", i, err)
			return false, nil
		}
		if !ok {
			return true, nil // a pod must count: ensurePlanner runs it
		}
		totals[d.Name] = n
	}
	if apiconv.WantsEstimate(&p.ev.Spec) {
		// Counting the prompts' tokens takes the models' keys, which only
		// the planner Job is given.
		return true, nil
	}
	if err := r.checkSpec(ctx, p); err != nil {
		p.fail(v1alpha1.ReasonPlanningFailed, "planning failed: %v", err)
		return false, nil
	}
	plan := cluster.NewPlan(&p.ev.Spec, totals, r.Options.StorageBudget)
	if exists {
		patch := client.MergeFrom(cm.DeepCopy())
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cluster.SetPlan(cm.Annotations, plan)
		if err := r.Patch(ctx, cm, patch); err != nil {
			return false, fmt.Errorf("writing the plan into %s: %w", cm.Name, err)
		}
	} else {
		planCM := cluster.NewPlanConfigMap(p.ev, p.run)
		cluster.SetPlan(planCM.Annotations, plan)
		if ok, err := r.claim(ctx, p, planCM); !ok || err != nil {
			return false, err
		}
	}
	shardSizeRaised(p, &plan)
	p.plan = &plan
	return true, nil
}

// shardSizeRaised says that a new plan's shards are bigger than
// spec.shardSize asked.
func shardSizeRaised(p *pass, plan *cluster.Plan) {
	if plan.Requested > 0 {
		limit := cluster.ShardLimit(&p.ev.Spec)
		if len(plan.Shards(&p.ev.Spec, "")) > limit {
			limit = cluster.MaxShards // shards of MaxRaisedShardSize were still too many
		}
		p.event(corev1.EventTypeNormal, v1alpha1.ReasonShardSizeRaised, "spec.shardSize %d would make more than %d shards a model "+
			"(%d for each of the pods that run them, %d at most; ConfigMaps each): raised to %d",
			plan.Requested, limit, cluster.ShardsPerWorker, cluster.MaxShards, plan.ShardSize)
	}
}

// observeEstimate shows the planner's estimate (the plan ConfigMap's
// annotation) in status.estimate, with an event when it first shows, and a
// warning when the run may cost more than its budget.
func observeEstimate(p *pass, annotation string) {
	if annotation == "" {
		p.status.Estimate = nil
		return
	}
	var st v1alpha1.EstimateStatus
	if err := json.Unmarshal([]byte(annotation), &st); err != nil {
		st = v1alpha1.EstimateStatus{Cost: v1alpha1.CostUnknown, Message: "No estimate: the planner's could not be read: " + err.Error()}
	}
	first := p.status.Estimate == nil
	p.status.Estimate = &st
	if !first {
		return
	}
	if st.Cost == "" || st.Cost == v1alpha1.CostUnknown {
		p.event(corev1.EventTypeNormal, v1alpha1.ReasonEstimated, "Estimated %d input tokens and at most %d output tokens; the cost is unknown. %s",
			st.InputTokens, st.OutputTokens, st.Message)
		return
	}
	p.event(corev1.EventTypeNormal, v1alpha1.ReasonEstimated, "The run will cost at most $%s (%d input tokens, at most %d output tokens)",
		st.Cost, st.InputTokens, st.OutputTokens)
	b := p.ev.Spec.Budget
	if b == nil || b.MaxCost == nil {
		return
	}
	limit, err1 := spend.ParseDollars(string(*b.MaxCost))
	cost, err2 := spend.ParseDollars(st.Cost)
	if err1 == nil && err2 == nil && cost > limit {
		p.event(corev1.EventTypeWarning, v1alpha1.ReasonEstimateOverBudget,
			"The run may cost up to $%s, more than spec.budget.maxCost $%s: it stops when the budget is spent, unless answers are shorter than their bound", st.Cost, limit.Decimal())
	}
}

// ensurePlanner runs the planner Job when the plan needs a pod to read the data.
func (r *EvaluationReconciler) ensurePlanner(ctx context.Context, p *pass) (bool, error) {
	if p.plan != nil {
		return true, nil
	}
	// The planner may not create objects: it fills in the plan ConfigMap made here.
	if ok, err := r.claim(ctx, p, cluster.NewPlanConfigMap(p.ev, p.run)); !ok || err != nil {
		return false, err
	}
	job := r.plannerJob(p)
	if ok, err := r.claim(ctx, p, job); !ok || err != nil {
		return false, err
	}
	var existing batchv1.Job
	if err := r.Get(ctx, client.ObjectKeyFromObject(job), &existing); err == nil {
		// Its pod's failure, or a stall, ends the run (observePlanner says why).
		if ended, err := r.observePlanner(ctx, p, &existing); err != nil || ended {
			return false, err
		}
	}
	p.pendingReason, p.pendingMessage = v1alpha1.ReasonPlanning, "counting the samples of url and pvc datasets"
	if apiconv.WantsEstimate(&p.ev.Spec) {
		p.pendingMessage = "counting the samples, and the prompts' tokens for status.estimate"
	}
	if existing.UID != "" && kueueManaged(&existing) && !jobFinished(&existing, batchv1.JobComplete) {
		// The planner waits in Kueue's queue too.
		w, err := r.workloadOf(ctx, p, &existing)
		if err != nil {
			return false, err
		}
		if a := admissionOf(&existing, w); !a.admitted {
			p.queued = []admission{a}
			p.pendingReason, p.pendingMessage = v1alpha1.ReasonQueued, "the planner "+p.queuedMessage()
		}
	}
	return false, nil
}

func jobFinished(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
