package kube

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/results"
)

// ForEachRunRecord reads the records of run, one shard at a time in the order
// of a local run's results.jsonl (models as Subjects lists them, datasets in
// spec order, samples in order), and calls fn with one record per sample: the
// last written (results.Collector). A shard's record log is its chunk slots
// HEAD-0, HEAD-1, ... in the order it sealed them (by number: HEAD-10 after
// HEAD-9), then its head's pending records. Only the ConfigMaps named in names are read; those gone meanwhile
// are skipped, and one that ev does not control is skipped and passed to
// foreign. With staged, a shard's staging chunks in the results store
// (which staged reads, in the order sealed) come before its ConfigMaps.
// Memory holds one shard's records.
func ForEachRunRecord(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, run string, plan cluster.Plan, names []string,
	staged Staged, foreign func(*cluster.ForeignError), fn func(cluster.Shard, results.Line) error) error {
	listed := make(map[string]bool, len(names))
	chunks := map[string][]int{} // by head: the slots listed, HEAD-k
	for _, n := range names {
		listed[n] = true
		if i := strings.LastIndexByte(n, '-'); i > 0 {
			if k, err := strconv.Atoi(n[i+1:]); err == nil && k >= 0 {
				chunks[n[:i]] = append(chunks[n[:i]], k)
			}
		}
	}
	for _, model := range cluster.Subjects(&ev.Spec) {
		for _, sh := range plan.Shards(&ev.Spec, model) {
			head := cluster.HeadName(ev.Name, run, sh.Model, sh.Index)
			var log []string
			ks := chunks[head]
			slices.Sort(ks)
			for _, k := range ks {
				log = append(log, cluster.ChunkName(head, k))
			}
			if listed[head] {
				log = append(log, head) // its pending records were written after every sealed chunk
			}
			latest := results.NewCollector[results.Line](sh.Start, sh.End-sh.Start)
			if staged != nil {
				// A head that seals into the results store says how many
				// chunks it sealed (those its done set counts): exactly those
				// are read. It is read here, not taken from a listing, which
				// may not show it yet.
				var cm corev1.ConfigMap
				err := GetConfigMap(ctx, r, ev, head, &cm)
				if err != nil && !apierrors.IsNotFound(err) && !isForeign(err) {
					return err
				}
				var lines []results.Line
				if err == nil && cluster.InStore(cm.Annotations) {
					p, _ := cluster.ParseProgress(cm.Annotations)
					if lines, err = staged(ctx, sh, head, p.Chunks); err != nil {
						return err
					}
					// Then what it holds unsealed, from the same read.
					pending, err := cluster.ReadRecords(&cm)
					if err != nil {
						return err
					}
					lines = append(lines, pending...)
					log = slices.DeleteFunc(log, func(n string) bool { return n == head })
				}
				for _, l := range lines {
					latest.Add(l.Index, l)
				}
			}
			for _, name := range log {
				lines, err := readOurs(ctx, r, ev, name, foreign)
				if err != nil {
					return err
				}
				for _, l := range lines {
					latest.Add(l.Index, l)
				}
			}
			if err := latest.Each(func(_ int, l results.Line) error { return fn(sh, l) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// Staged reads a shard's staging chunks from the results store, in the
// order they were sealed: the first sealed of them, as its head counts.
type Staged func(ctx context.Context, sh cluster.Shard, head string, sealed int) ([]results.Line, error)

func isForeign(err error) bool {
	var fe *cluster.ForeignError
	return errors.As(err, &fe)
}

// readOurs reads the records of the named shard ConfigMap if ev controls it;
// none if it is gone or foreign (passed to foreign).
func readOurs(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, name string, foreign func(*cluster.ForeignError)) ([]results.Line, error) {
	var cm corev1.ConfigMap
	err := GetConfigMap(ctx, r, ev, name, &cm)
	var fe *cluster.ForeignError
	switch {
	case errors.As(err, &fe):
		if foreign != nil {
			foreign(fe)
		}
		return nil, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return cluster.ReadRecords(&cm)
}
