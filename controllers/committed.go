package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
)

// A run whose records are committed to a results store needs nothing of
// what carried them there: its Jobs, their pods and its shard heads would
// otherwise stay in etcd as long as the Evaluation does, one pod and one
// head per shard. Once status shows the commit, they are deleted
// (tidyCommitted), and a later judgement of the run (judgeCommitted) or a
// later run's reuse of its records (storedSources) reads the committed
// records instead.
//
// Only a pass that read the commit in the Evaluation it was given
// deletes: the cache only moves forward, so no later pass reads an
// Evaluation from before it, which would make them again.

// keptLongEnough says whether an ended run's runners were kept as long as
// spec.runner.keepFor (else the manager's KeepRunnersFor) says, from when
// it ended; if not, the pass is asked again then.
func (r *EvaluationReconciler) keptLongEnough(p *pass) bool {
	keep := r.Options.KeepRunnersFor
	if rn := p.ev.Spec.Runner; rn != nil && rn.KeepFor != nil {
		keep = rn.KeepFor.Duration
	}
	if wait := endedAt(p).Add(keep).Sub(p.now); wait > 0 {
		p.requeueAfter(wait)
		return false
	}
	return true
}

// tidyCommitted deletes the Jobs (their pods go with them, by the garbage
// collector) and the shard heads of an ended run committed to the results
// store, if every one of its Jobs completed: a failed Job keeps its pods'
// logs, and a run that stopped (stalled, over its budget) may yet go on.
// It reports whether it did.
func (r *EvaluationReconciler) tidyCommitted(ctx context.Context, p *pass, jobs []batchv1.Job) (bool, error) {
	var ours []*batchv1.Job
	for i := range jobs {
		j := &jobs[i]
		if cluster.Owned("Job", j, p.ev) != nil {
			continue
		}
		if !jobFinished(j, batchv1.JobComplete) {
			return false, nil
		}
		ours = append(ours, j)
	}
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, j := range ours {
		if j.DeletionTimestamp != nil {
			continue
		}
		if err := r.Delete(ctx, j, bg); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting Job %s of the committed run: %w", j.Name, err)
		}
	}
	cms, err := r.runConfigMaps(ctx, p)
	if err != nil {
		return false, err
	}
	heads := 0
	for i := range cms {
		cm := &cms[i]
		if c := cm.Labels[cluster.LabelComponent]; (c != cluster.ComponentShard && c != cluster.ComponentRecords) || cluster.Owned("ConfigMap", cm, p.ev) != nil {
			continue
		}
		if err := r.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting %s of the committed run: %w", cm.Name, err)
		}
		heads++
	}
	if len(ours) > 0 || heads > 0 {
		log.FromContext(ctx).Info("Deleted the Jobs and shard heads of a run committed to the results store",
			"run", p.run, "location", p.ev.Status.ResultsLocation, "jobs", len(ours), "heads", heads)
	}
	return true, nil
}

// judgeCommitted compares and gates again a run committed to the results
// store whose spec.baseline or spec.gate changed, reading its records
// there (its heads may be gone). The new judgement is committed as the
// location's next manifest, with the same parts, so that a reader of the
// store sees the verdict status shows. The store failing keeps the run
// as it was judged, and it is tried again.
func (r *EvaluationReconciler) judgeCommitted(ctx context.Context, p *pass) (bool, error) {
	st := &p.ev.Status
	keep := func() {
		if st.Phase == v1alpha1.PhaseSucceeded {
			p.finished = true
		} else {
			p.fail(st.Reason, "%s", st.Message)
		}
	}
	var base *compare.Baseline
	var lost *kube.Missing
	if p.ev.Spec.Baseline != nil {
		b, missing, err := r.readBaseline(ctx, p)
		switch {
		case err != nil:
			return false, err
		case missing != nil && missing.Reason == v1alpha1.ReasonWaitingForBaseline:
			keep()
			p.requeueAfter(r.Options.RecheckAfter)
			return false, nil
		}
		base, lost = b, missing
	}
	unavailable := func(err error) (bool, error) {
		log.FromContext(ctx).Info("Failed to judge the run again from the results store; trying again", "location", st.ResultsLocation, "error", err.Error())
		keep()
		p.requeueAfter(r.Options.RecheckAfter)
		return false, nil
	}
	at, err := r.storeAt(ctx, p, st.ResultsLocation)
	if err != nil {
		return unavailable(err)
	}
	m, err := objects.Latest(ctx, at)
	switch {
	case err != nil:
		return unavailable(err)
	case m == nil || m.ID != p.run:
		return unavailable(fmt.Errorf("%s holds no commit of run %s", st.ResultsLocation, p.run))
	}
	var was compare.Summary
	if err := json.Unmarshal(m.Summary, &was); err != nil {
		return unavailable(fmt.Errorf("the committed summary: %w", err))
	}
	totals := map[[2]string]int64{}
	for _, s := range was.Results {
		totals[[2]string{s.Model, s.Dataset}] = s.Total
	}
	t := newTally(p.ev, base, func(model, dataset string) int64 { return totals[[2]string{model, dataset}] })
	for i := range m.Pairs {
		pp := &m.Pairs[i]
		if err := objects.ReadPair(ctx, at, pp, func(l results.Line) error { return t.add(i, pp.Model, pp.Dataset, l) }); err != nil {
			return unavailable(err)
		}
	}
	summaries, records, comparison, err := t.results()
	if err != nil {
		return false, err
	}
	sum := compare.Summary{Results: summaries, Comparison: comparison}
	if p.ev.Spec.Gate != nil {
		v := compare.Check(apiconv.Gate(p.ev.Spec.Gate), summaries, comparison)
		sum.Gate = &v
	}
	compact, err := json.Marshal(&sum)
	if err != nil {
		return false, err
	}
	next := *m
	next.Generation, next.Committed, next.Summary = m.Generation+1, p.now.UTC(), compact
	if err := objects.Commit(ctx, at, st.ResultsLocation, &next); err != nil {
		return unavailable(err)
	}
	if ok, err := r.writeResults(ctx, p, &sum, records, nil, st.ResultsLocation); !ok || err != nil {
		return false, err
	}
	recordResults(p, summaries, &sum, st.ResultsLocation)
	p.finished = true
	judge(p, lost, &sum)
	return false, nil
}
