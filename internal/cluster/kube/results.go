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
	"github.com/proctor-dev/proctor/runner/results/objects"
)

// OpenLocation opens a results store location (an s3:// URL) a results
// ConfigMap names.
type OpenLocation func(ctx context.Context, location string) (objects.Bucket, error)

// ResultRecords reads the records a results ConfigMap holds (ResultsName of
// ev, or a copy of one), in sample order, and calls fn with each line: its
// embedded results.jsonl.gz, else the records of the run's ConfigMaps it
// lists, which must be ev's (ForEachRunRecord; foreign is told of those that
// are not), else those of the results store location it names, opened by
// open.
func ResultRecords(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, cm *corev1.ConfigMap, open OpenLocation,
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
	if loc := cm.Data[cluster.ResultsKeyLocation]; loc != "" && cm.Data[cluster.ResultsKeyChunks] == "" {
		if open == nil {
			return fmt.Errorf("%s: the records are in the results store, at %s", cm.Name, loc)
		}
		b, err := open(ctx, loc)
		if err != nil {
			return fmt.Errorf("%s: the records are in the results store, at %s: %w", cm.Name, loc, err)
		}
		res, err := objects.ReadResults(ctx, b, loc)
		if err != nil {
			return fmt.Errorf("%s: the records are in the results store, at %s, which needs its credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3 for a store other than AWS S3): %w", cm.Name, loc, err)
		}
		return res.Each(ctx, func(_ *objects.PairParts, l results.Line) error { return fn(l.Record) })
	}
	run := cm.Annotations[cluster.AnnotationRun]
	plan, err := ReadPlan(ctx, r, ev, run)
	if err != nil {
		return err
	}
	return ForEachRunRecord(ctx, r, ev, run, plan, strings.Fields(cm.Data[cluster.ResultsKeyChunks]), nil, foreign, func(_ cluster.Shard, l results.Line) error {
		return fn(l.Record)
	})
}
