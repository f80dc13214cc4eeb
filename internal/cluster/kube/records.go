package kube

import (
	"context"
	"errors"
	"slices"

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
// The next ReadAhead shards are read while fn takes one (reading is mostly
// waiting for the API server and the store); fn and foreign are called from
// the caller's goroutine, in order. Memory holds the records of those shards.
func ForEachRunRecord(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, run string, plan cluster.Plan, names []string,
	staged Staged, foreign func(*cluster.ForeignError), fn func(cluster.Shard, results.Line) error) error {
	return ForEachShardRecord(ctx, r, ev, run, RunShards(ev, plan), names, staged, foreign, fn)
}

// RunShards are the shards of a run in the order of its results.jsonl.
func RunShards(ev *v1alpha1.Evaluation, plan cluster.Plan) []cluster.Shard {
	var shards []cluster.Shard
	for _, model := range cluster.Subjects(&ev.Spec) {
		shards = append(shards, plan.Shards(&ev.Spec, model)...)
	}
	return shards
}

// ForEachShardRecord is ForEachRunRecord over the given shards of run only,
// in the order given.
func ForEachShardRecord(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, run string, shards []cluster.Shard, names []string,
	staged Staged, foreign func(*cluster.ForeignError), fn func(cluster.Shard, results.Line) error) error {
	log := newRecordLogs(names)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reads := make([]chan ShardRecords, len(shards))
	for i := range reads {
		reads[i] = make(chan ShardRecords, 1)
	}
	// Up to ReadAhead reads at once, started in order; each frees its place
	// once the caller has taken it.
	places := make(chan struct{}, ReadAhead)
	go func() {
		for i, sh := range shards {
			select {
			case places <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				got, err := log.read(ctx, r, ev, run, sh, staged)
				got.err = err
				reads[i] <- got
			}()
		}
	}()
	for i, sh := range shards {
		var got ShardRecords
		select {
		case got = <-reads[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		<-places
		if got.err != nil {
			return got.err
		}
		for _, fe := range got.Foreign {
			if foreign != nil {
				foreign(fe)
			}
		}
		if err := got.Latest.Each(func(_ int, l results.Line) error { return fn(sh, l) }); err != nil {
			return err
		}
	}
	return nil
}

// ReadAhead is how many shards ForEachRunRecord reads at once, beside the
// one it hands to fn: the manager holds their records (up to MaxShards'
// worth of a big run each) within its memory limit.
const ReadAhead = 2

// ShardRecords is what was read of a shard: its latest record of each
// sample, the ConfigMaps named as its that ev does not control, and the
// resourceVersion of each of its ConfigMaps read.
type ShardRecords struct {
	Latest   *results.Collector[results.Line]
	Foreign  []*cluster.ForeignError
	Versions map[string]string
	err      error
}

// ReadShardRecords reads one shard's record log (see ForEachRunRecord) from
// the ConfigMaps named in names, and with staged its staging chunks.
func ReadShardRecords(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, run string, sh cluster.Shard, names []string, staged Staged) (ShardRecords, error) {
	return newRecordLogs(names).read(ctx, r, ev, run, sh, staged)
}

// recordLogs is what a listing of a run's ConfigMaps says of its shards'
// record logs: the names listed, and by head the chunk slots listed.
type recordLogs struct {
	listed map[string]bool
	chunks map[string][]int // by head: the slots listed, HEAD-k
}

func newRecordLogs(names []string) recordLogs {
	l := recordLogs{listed: make(map[string]bool, len(names)), chunks: map[string][]int{}}
	for _, n := range names {
		l.listed[n] = true
		if head, k, ok := cluster.ChunkOf(n); ok {
			l.chunks[head] = append(l.chunks[head], k)
		}
	}
	return l
}

// read reads one shard's record log (see ForEachRunRecord): its staging
// chunks with staged, then the slots listed, then its head.
func (rl recordLogs) read(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, run string, sh cluster.Shard,
	staged Staged) (out ShardRecords, _ error) {
	head := cluster.HeadName(ev.Name, run, sh.Model, sh.Index)
	var log []string
	for _, k := range slices.Sorted(slices.Values(rl.chunks[head])) {
		log = append(log, cluster.ChunkName(head, k))
	}
	if rl.listed[head] {
		log = append(log, head) // its pending records were written after every sealed chunk
	}
	out.Latest = results.NewCollector[results.Line](sh.Start, sh.End-sh.Start)
	out.Versions = map[string]string{}
	if staged != nil {
		// A head that seals into the results store says how many
		// chunks it sealed (those its done set counts): exactly those
		// are read. It is read here, not taken from a listing, which
		// may not show it yet.
		var cm corev1.ConfigMap
		err := GetConfigMap(ctx, r, ev, head, &cm)
		if err != nil && !apierrors.IsNotFound(err) && !isForeign(err) {
			return out, err
		}
		var lines []results.Line
		if err == nil && cluster.InStore(cm.Annotations) {
			out.Versions[head] = cm.ResourceVersion
			p, _ := cluster.ParseProgress(cm.Annotations)
			if lines, err = staged(ctx, sh, head, p.Chunks); err != nil {
				return out, err
			}
			// Then what it holds unsealed, from the same read.
			pending, err := cluster.ReadRecords(&cm)
			if err != nil {
				return out, err
			}
			lines = append(lines, pending...)
			log = slices.DeleteFunc(log, func(n string) bool { return n == head })
		}
		for _, l := range lines {
			out.Latest.Add(l.Index, l)
		}
	}
	for _, name := range log {
		lines, version, err := readOurs(ctx, r, ev, name, func(fe *cluster.ForeignError) { out.Foreign = append(out.Foreign, fe) })
		if err != nil {
			return out, err
		}
		if version != "" {
			out.Versions[name] = version
		}
		for _, l := range lines {
			out.Latest.Add(l.Index, l)
		}
	}
	return out, nil
}

// Staged reads a shard's staging chunks from the results store, in the
// order they were sealed: the first sealed of them, as its head counts.
type Staged func(ctx context.Context, sh cluster.Shard, head string, sealed int) ([]results.Line, error)

func isForeign(err error) bool {
	var fe *cluster.ForeignError
	return errors.As(err, &fe)
}

// readOurs reads the records of the named shard ConfigMap if ev controls it,
// and the version read; none if it is gone or foreign (passed to foreign).
func readOurs(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, name string, foreign func(*cluster.ForeignError)) ([]results.Line, string, error) {
	var cm corev1.ConfigMap
	err := GetConfigMap(ctx, r, ev, name, &cm)
	var fe *cluster.ForeignError
	switch {
	case errors.As(err, &fe):
		if foreign != nil {
			foreign(fe)
		}
		return nil, "", nil
	case apierrors.IsNotFound(err):
		return nil, "", nil
	case err != nil:
		return nil, "", err
	}
	lines, err := cluster.ReadRecords(&cm)
	return lines, cm.ResourceVersion, err
}
