package kube

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/results"
)

// Results are the results of a run found in a cluster: a results ConfigMap
// and the Evaluation whose run's records it holds or lists.
type Results struct {
	// Label says where they are: evaluation/NAME or configMap/NAME, and the
	// run.
	Label string
	// Open opens the results store location the results name, if they
	// are there.
	Open  OpenLocation
	owner *v1alpha1.Evaluation
	cm    *corev1.ConfigMap
}

// Missing says why results are not there (yet): a reason of the API
// (BaselineNotFound, WaitingForBaseline) and a message.
type Missing struct{ Reason, Message string }

// FindResults finds the results spec.baseline names, in namespace ns: an
// Evaluation's (its status.resultsConfigMap, which it must control), or a
// results ConfigMap's (a copy of one, say). Missing says why there are none
// yet; a read's errors are returned as they are.
func FindResults(ctx context.Context, r client.Reader, ns string, b *v1alpha1.Baseline) (*Results, *Missing, error) {
	return findResults(ctx, r, ns, "", b)
}

// FindBaseline is FindResults for Evaluation self: it cannot be its own
// baseline (it would wait for itself to end).
func FindBaseline(ctx context.Context, r client.Reader, self *v1alpha1.Evaluation) (*Results, *Missing, error) {
	return findResults(ctx, r, self.Namespace, self.Name, self.Spec.Baseline)
}

func findResults(ctx context.Context, r client.Reader, ns, self string, b *v1alpha1.Baseline) (*Results, *Missing, error) {
	switch {
	case b.Evaluation != "" && b.Evaluation == self:
		return nil, &Missing{v1alpha1.ReasonBaselineNotFound, "spec.baseline.evaluation names this Evaluation: a run cannot be its own baseline"}, nil
	case b.Evaluation != "":
		ev := &v1alpha1.Evaluation{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: b.Evaluation}, ev); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &Missing{v1alpha1.ReasonBaselineNotFound, fmt.Sprintf("Evaluation %s (spec.baseline.evaluation) not found", b.Evaluation)}, nil
			}
			return nil, nil, err
		}
		if ev.Status.ResultsConfigMap == "" || (ev.Status.Phase != v1alpha1.PhaseSucceeded && ev.Status.Phase != v1alpha1.PhaseFailed) {
			return nil, &Missing{v1alpha1.ReasonWaitingForBaseline, fmt.Sprintf("waiting for Evaluation %s (spec.baseline.evaluation) to end with results (it is %s)",
				b.Evaluation, phaseOrNew(ev.Status.Phase))}, nil
		}
		cm := &corev1.ConfigMap{}
		if err := GetConfigMap(ctx, r, ev, ev.Status.ResultsConfigMap, cm); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &Missing{v1alpha1.ReasonBaselineNotFound, fmt.Sprintf("Evaluation %s's results ConfigMap %s not found", b.Evaluation, ev.Status.ResultsConfigMap)}, nil
			}
			return nil, nil, err
		}
		return &Results{Label: fmt.Sprintf("evaluation/%s (run %s)", ev.Name, cm.Annotations[cluster.AnnotationRun]), owner: ev, cm: cm}, nil, nil
	case b.ConfigMap != "":
		cm := &corev1.ConfigMap{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: b.ConfigMap}, cm); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &Missing{v1alpha1.ReasonBaselineNotFound, fmt.Sprintf("ConfigMap %s (spec.baseline.configMap) not found", b.ConfigMap)}, nil
			}
			return nil, nil, err
		}
		if _, ok := cm.Data[cluster.ResultsKeySummary]; !ok {
			return nil, &Missing{v1alpha1.ReasonBaselineNotFound, fmt.Sprintf("ConfigMap %s (spec.baseline.configMap) holds no results: no %s", b.ConfigMap, cluster.ResultsKeySummary)}, nil
		}
		res := &Results{Label: fmt.Sprintf("configMap/%s (run %s)", cm.Name, cm.Annotations[cluster.AnnotationRun]), cm: cm}
		if len(cm.BinaryData[cluster.ResultsKeyRecords]) == 0 {
			// Its records are in the run's ConfigMaps, which the Evaluation
			// it was copied from controls.
			owner := &v1alpha1.Evaluation{}
			name := cm.Labels[cluster.LabelEvaluation]
			if name == "" {
				return nil, &Missing{v1alpha1.ReasonBaselineNotFound, fmt.Sprintf("ConfigMap %s lists its records in another run's ConfigMaps (%s) but names no Evaluation: keep its label %s", cm.Name, cluster.ResultsKeyChunks, cluster.LabelEvaluation)}, nil
			}
			if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, owner); err != nil {
				if apierrors.IsNotFound(err) {
					return nil, &Missing{v1alpha1.ReasonBaselineNotFound, fmt.Sprintf("ConfigMap %s lists its records in ConfigMaps of Evaluation %q, which is not found", cm.Name, name)}, nil
				}
				return nil, nil, err
			}
			res.owner = owner
		}
		return res, nil, nil
	}
	return nil, &Missing{v1alpha1.ReasonBaselineNotFound, "spec.baseline names no Evaluation nor ConfigMap"}, nil
}

func phaseOrNew(p v1alpha1.Phase) string {
	if p == "" {
		return "new"
	}
	return string(p)
}

// Summaries are the summaries of the results' summary.json.
func (res *Results) Summaries() ([]results.Summary, error) {
	s, err := res.Summary()
	if err != nil {
		return nil, err
	}
	return s.Results, nil
}

// Summary is the results' summary.json: the summaries, the comparison with
// a baseline and the gate's verdict.
func (res *Results) Summary() (*compare.Summary, error) {
	var s compare.Summary
	if err := json.Unmarshal([]byte(res.cm.Data[cluster.ResultsKeySummary]), &s); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", res.cm.Name, cluster.ResultsKeySummary, err)
	}
	return &s, nil
}

// Evaluation is the Evaluation whose results they are, if they were
// found by its name.
func (res *Results) Evaluation() *v1alpha1.Evaluation { return res.owner }

// Records calls fn with each record of the results.
func (res *Results) Records(ctx context.Context, r client.Reader, foreign func(*cluster.ForeignError), fn func(*results.Record)) error {
	owner := res.owner
	if owner == nil {
		owner = &v1alpha1.Evaluation{}
	}
	return ResultRecords(ctx, r, owner, res.cm, res.Open, foreign, func(line []byte) error {
		var rec results.Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("%s: a record: %w", res.Label, err)
		}
		fn(&rec)
		return nil
	})
}

// Baseline reads the results as a baseline scored by metrics.
func (res *Results) Baseline(ctx context.Context, r client.Reader, metrics []string, foreign func(*cluster.ForeignError)) (*compare.Baseline, error) {
	b := compare.NewBaseline(res.Label, metrics)
	if err := res.Records(ctx, r, foreign, b.Add); err != nil {
		return nil, err
	}
	return b, nil
}
