package controllers

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/results"
)

// Keys of the results ConfigMap.
const (
	ResultsKeySummary = "summary.json"
	ResultsKeyRecords = "results.jsonl.gz"
	ResultsKeyChunks  = "chunks"
	// maxEmbeddedRecords bounds the compressed records put in NAME-results itself;
	// beyond it, NAME-results lists the ConfigMaps that hold them.
	maxEmbeddedRecords = 700 << 10
	// maxSortedRecords bounds the raw records held in memory to sort them.
	maxSortedRecords = 16 << 20
)

// finish ends the run once every Job finished: it gathers every shard's records
// (one per sample, whatever crashes stored twice) into status.results and
// NAME-results, and fails the Evaluation, naming the shards, if any failed. The
// results of the shards that succeeded are kept either way.
func (r *EvaluationReconciler) finish(ctx context.Context, p *pass) (bool, error) {
	if p.plan == nil {
		return true, nil
	}
	done, anyFailed := jobsFinished(p.jobs)
	if !done && p.stalled == nil {
		return true, nil
	}
	// The run ends only once its results are written: a failure to gather
	// leaves it Running, and the pass is retried. (A run that ended is kept as
	// it ended by keepEnded; this step does not see it again.)
	end := func() {
		switch {
		case p.stalled != nil:
			// Its Jobs are stopped by the next pass, once status says so.
			p.fail(p.stalled.reason, "%s", p.stalled.message)
		case anyFailed:
			reason, msg := failedShards(p.shards, r.Options.ShardRetries)
			p.fail(reason, "%s", msg)
		default:
			p.finished = true
		}
	}
	summaries, records, chunks, err := r.gather(ctx, p)
	if err != nil {
		return false, err
	}
	if ok, err := r.writeResults(ctx, p, summaries, records, chunks); !ok || err != nil {
		return false, err
	}
	// The records an earlier run left as this run's cache are no longer needed.
	if _, err := r.deleteOtherRuns(ctx, p, ""); err != nil {
		return false, err
	}
	p.status.Results = make([]v1alpha1.ModelResult, len(summaries))
	var firstSum float64
	var firstDone int64
	subjects := cluster.Subjects(&p.ev.Spec)
	metric := firstMetric(&p.ev.Spec)
	for i, s := range summaries {
		mr := v1alpha1.ModelResult{
			Model: s.Model, Dataset: s.Dataset, Total: s.Total, Completed: s.Completed, Errored: s.Errored,
			Metrics:       map[string]string{},
			LatencyMillis: &v1alpha1.LatencySummary{P50: s.LatencyMillis.P50, P95: s.LatencyMillis.P95},
			Tokens: &v1alpha1.TokenUsage{Input: s.Tokens.Input, Output: s.Tokens.Output,
				JudgeInput: s.Tokens.JudgeInput, JudgeOutput: s.Tokens.JudgeOutput},
		}
		for k, v := range s.Metrics {
			mr.Metrics[k] = fmt.Sprintf("%.4f", v)
		}
		p.status.Results[i] = mr
		if len(subjects) > 0 && s.Model == subjects[0] && metric != "" {
			firstSum += s.Metrics[metric] * float64(s.Completed)
			firstDone += s.Completed
		}
	}
	if firstDone > 0 {
		p.status.Score = fmt.Sprintf("%.4f", firstSum/float64(firstDone))
	}
	p.status.ResultsConfigMap = cluster.ResultsName(p.ev.Name)
	end()
	return true, nil
}

// gather reads every shard ConfigMap of the run once, counting one record per
// sample (a crash between sealing and updating a head can store a sample twice),
// and summarizes each model on each dataset as it goes, so memory grows with the
// number of samples by a bit and a latency each, not by their records. It also
// returns the records in sample order while they are few enough to embed, and
// the names of the ConfigMaps that hold them.
func (r *EvaluationReconciler) gather(ctx context.Context, p *pass) ([]results.Summary, [][]byte, []string, error) {
	ev := p.ev
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := r.List(ctx, &list, client.InNamespace(ev.Namespace), client.MatchingLabels{
		cluster.LabelEvaluation: cluster.LabelValue(ev.Name), cluster.LabelRun: p.run,
	}); err != nil {
		return nil, nil, nil, err
	}
	var names []string
	for i := range list.Items {
		m := &list.Items[i]
		if c := m.Labels[cluster.LabelComponent]; (c == cluster.ComponentShard || c == cluster.ComponentRecords) && !r.ignoreForeign(p, "ConfigMap", m) {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)

	metrics := make([]string, len(ev.Spec.Scoring))
	for i := range ev.Spec.Scoring {
		metrics[i] = ev.Spec.Scoring[i].MetricName()
	}
	type pairKey struct{ model, dataset string }
	type pair struct {
		agg  *results.Aggregate
		seen []bool
		raw  map[int][]byte
	}
	pairs := map[pairKey]*pair{}
	var order []*pair
	for _, model := range cluster.Subjects(&ev.Spec) {
		for _, d := range ev.Spec.Datasets {
			total := p.plan.Totals[d.Name]
			pp := &pair{agg: results.NewAggregate(model, d.Name, int64(total), metrics), seen: make([]bool, total), raw: map[int][]byte{}}
			pairs[pairKey{model, d.Name}] = pp
			order = append(order, pp)
		}
	}
	rawBytes, keep := 0, true
	foreign := func(fe *cluster.ForeignError) { r.ignoreForeign(p, fe.Kind, &metav1.ObjectMeta{Name: fe.Name}) }
	err := cluster.ForEachRecord(ctx, r.APIReader, ev, names, foreign, func(l cluster.Line, rec *results.Record) error {
		pp := pairs[pairKey{rec.Model, rec.Dataset}]
		if pp == nil || l.Index < 0 || l.Index >= len(pp.seen) || pp.seen[l.Index] {
			return nil
		}
		pp.seen[l.Index] = true
		pp.agg.Add(rec)
		if keep {
			pp.raw[l.Index] = l.Record
			if rawBytes += len(l.Record); rawBytes > maxSortedRecords {
				keep = false
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	summaries := make([]results.Summary, len(order))
	var sorted [][]byte
	for i, pp := range order {
		summaries[i] = pp.agg.Summary()
		if keep {
			for idx := range pp.seen {
				if raw, ok := pp.raw[idx]; ok {
					sorted = append(sorted, raw)
				}
			}
		}
	}
	if !keep {
		sorted = nil
	}
	return summaries, sorted, names, nil
}

// writeResults writes NAME-results: the summary (as summary.json, the same as a
// local run's) and the records: results.jsonl.gz in sample order when small
// enough, else the list of ConfigMaps that hold them. It writes only into a
// NAME-results the Evaluation controls, and reports false otherwise.
func (r *EvaluationReconciler) writeResults(ctx context.Context, p *pass, summaries []results.Summary, records [][]byte, chunks []string) (bool, error) {
	summary, err := json.MarshalIndent(struct {
		Results []results.Summary `json:"results"`
	}{summaries}, "", "  ")
	if err != nil {
		return false, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: objectMeta(p.ev.Namespace, cluster.ResultsName(p.ev.Name), cluster.Labels(p.ev.Name, p.run, cluster.ComponentResults)),
		Data:       map[string]string{ResultsKeySummary: string(summary) + "\n"},
	}
	cm.Annotations = map[string]string{cluster.AnnotationRun: p.run}
	gz, ok := gzipRecords(records)
	if ok && len(gz) <= maxEmbeddedRecords {
		cm.BinaryData = map[string][]byte{ResultsKeyRecords: gz}
	} else {
		cm.Data[ResultsKeyChunks] = strings.Join(chunks, "\n") + "\n"
	}

	// Read directly: a typed cached read would make the manager cache whole
	// ConfigMaps, which it deliberately keeps as metadata only.
	var existing corev1.ConfigMap
	err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(cm), &existing)
	switch {
	case apierrors.IsNotFound(err):
		return r.claim(ctx, p, cm)
	case err != nil:
		return false, err
	case !r.ours(p, "ConfigMap", &existing):
		return false, nil
	}
	existing.Labels, existing.Annotations, existing.Data, existing.BinaryData = cm.Labels, cm.Annotations, cm.Data, cm.BinaryData
	return true, r.Update(ctx, &existing)
}

func gzipRecords(records [][]byte) ([]byte, bool) {
	if records == nil {
		return nil, false
	}
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	for _, r := range records {
		w.Write(r)
		w.Write([]byte{'\n'})
	}
	if w.Close() != nil {
		return nil, false
	}
	return buf.Bytes(), true
}
