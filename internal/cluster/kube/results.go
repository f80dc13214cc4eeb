package kube

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/results"
)

// ResultRecords reads the records a results ConfigMap holds (ResultsName of
// ev, or a copy of one), in sample order, and calls fn with each line: its
// embedded results.jsonl.gz, else the records of the run's ConfigMaps it
// lists, which must be ev's (ForEachRunRecord; foreign is told of those that
// are not).
func ResultRecords(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, cm *corev1.ConfigMap,
	foreign func(*cluster.ForeignError), fn func(line []byte) error) error {
	if gz := cm.BinaryData[cluster.ResultsKeyRecords]; len(gz) > 0 {
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			return fmt.Errorf("%s: %w", cm.Name, err)
		}
		if err := results.EachRecordLine(zr, func(_ int, line []byte) error { return fn(line) }); err != nil {
			return fmt.Errorf("%s: %w", cm.Name, err)
		}
		return nil
	}
	run := cm.Annotations[cluster.AnnotationRun]
	plan, err := ReadPlan(ctx, r, ev, run)
	if err != nil {
		return err
	}
	return ForEachRunRecord(ctx, r, ev, run, plan, strings.Fields(cm.Data[cluster.ResultsKeyChunks]), foreign, func(_ cluster.Shard, l results.Line) error {
		return fn(l.Record)
	})
}
