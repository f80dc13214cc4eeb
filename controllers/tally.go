package controllers

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/results"
)

// tally summarizes a run's records as they are read: each model on each
// dataset, their comparison with the baseline, and the records compressed
// while they are few enough to embed in NAME-results. The records come in
// parts (a shard's, or a pair's), each compressed apart as one gzip member:
// a part may be tallied before the parts that precede it (a shard that
// succeeded early), and the members are joined in part order, which is
// sample order (gzip readers read the members as one stream).
type tally struct {
	aggs     map[[2]string]*results.Aggregate
	order    []*results.Aggregate
	comparer *compare.Comparer

	members map[int][]byte
	size    int // of members, compressed
	over    bool
	wrote   bool
	// part is the part being written to gz (open); buf holds its member.
	part int
	open bool
	gz   *gzip.Writer
	buf  bytes.Buffer
}

// newTally tallies the records of ev's models on its datasets, total(model,
// dataset) samples each, compared with base if not nil.
func newTally(ev *v1alpha1.Evaluation, base *compare.Baseline, total func(model, dataset string) int64) *tally {
	t := &tally{aggs: map[[2]string]*results.Aggregate{}, members: map[int][]byte{}}
	metrics := metricNames(&ev.Spec)
	var pairs []results.Pair
	for _, model := range cluster.Subjects(&ev.Spec) {
		for _, d := range ev.Spec.Datasets {
			agg := results.NewAggregate(model, d.Name, total(model, d.Name), metrics)
			agg.SetPriced(priced(&ev.Spec, model))
			t.aggs[[2]string{model, d.Name}] = agg
			t.order = append(t.order, agg)
			pairs = append(pairs, results.Pair{Model: model, Dataset: d.Name})
		}
	}
	if base != nil {
		t.comparer = compare.New(base, ev.Spec.Baseline.Model, metrics, pairs)
	}
	return t
}

// gzipWriters are reused across parts and passes: a writer at
// BestCompression allocates about a megabyte.
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestCompression) // a valid level: no error
	return w
}}

// add takes a record of model on dataset, of part. A pair's records must
// come in sample order; a part's all at once (a new part ends the one
// before).
func (t *tally) add(part int, model, dataset string, l results.Line) error {
	if t.open && part != t.part {
		if err := t.endPart(); err != nil {
			return err
		}
	}
	// Emit writes the record into the open part's gzip member, or nowhere
	// once the records are too many to embed.
	var w io.Writer
	if !t.over {
		if !t.open {
			t.part, t.open = part, true
			t.buf = bytes.Buffer{}
			t.gz = gzipWriters.Get().(*gzip.Writer)
			t.gz.Reset(&t.buf)
		}
		w = embedWriter{t}
	}
	rec, err := results.Emit(l.Record, t.aggs[[2]string{model, dataset}], w)
	if err == nil && t.comparer != nil {
		t.comparer.Add(rec)
	}
	return err
}

// embedWriter compresses into the tally's open part, dropping every member
// once their total passes maxEmbeddedRecords.
type embedWriter struct{ t *tally }

func (e embedWriter) Write(b []byte) (int, error) {
	t := e.t
	if t.over {
		return len(b), nil
	}
	t.wrote = true
	if _, err := t.gz.Write(b); err != nil {
		return 0, err
	}
	if t.size+t.buf.Len() > maxEmbeddedRecords {
		t.drop()
	}
	return len(b), nil
}

// drop gives up embedding: the records are too many.
func (t *tally) drop() {
	t.over, t.members, t.size = true, nil, 0
	t.release()
	t.buf = bytes.Buffer{}
}

// release returns the open part's writer to the pool.
func (t *tally) release() {
	if t.gz != nil {
		gzipWriters.Put(t.gz)
		t.gz = nil
	}
	t.open = false
}

// endPart closes the open part's member, if any.
func (t *tally) endPart() error {
	if !t.open {
		return nil
	}
	defer t.release()
	if t.over {
		return nil
	}
	if err := t.gz.Close(); err != nil {
		return err
	}
	t.members[t.part] = t.buf.Bytes()
	t.size += t.buf.Len()
	t.buf = bytes.Buffer{}
	if t.size > maxEmbeddedRecords {
		t.drop()
	}
	return nil
}

// results are the summaries, the records compressed (nil if too many to
// embed, or none) and the comparison (nil without a baseline).
func (t *tally) results() ([]results.Summary, []byte, *compare.Report, error) {
	if err := t.endPart(); err != nil {
		return nil, nil, nil, err
	}
	summaries := make([]results.Summary, len(t.order))
	for i, agg := range t.order {
		summaries[i] = agg.Summary()
	}
	var rep *compare.Report
	if t.comparer != nil {
		r := t.comparer.Report()
		rep = &r
	}
	var embed []byte
	if t.wrote && !t.over {
		embed = make([]byte, 0, t.size)
		for _, part := range slices.Sorted(maps.Keys(t.members)) {
			embed = append(embed, t.members[part]...)
		}
	}
	return summaries, embed, rep, nil
}

// A running tally is a run's tally taken as its shards succeed, so that the
// run's end reads and tallies only the shards that ended last: the gather
// took most of a second at the end of every run (reading and decoding every
// record while the node tore down the run's pods). With a results store,
// the parts of the shards tallied are written to it then too.
//
// Each pair (model, dataset) is tallied in sample order: the shards of a
// pair are taken in order, each once every shard before it in the pair
// was. The run's end uses what was taken only if every ConfigMap of those
// shards is still the version read (else it gathers all over again), and
// only when the run has no baseline (its comparison is read at the end).
type runningTally struct {
	uid types.UID
	run string
	t   *tally
	// next is, by pair, how many of its shards are tallied.
	next map[[2]string]int
	// store writes the parts of the shards tallied to the results store
	// (nil: the run has none), once storeOpened.
	store       *storeWriter
	storeOpened bool
	// read is the version of each ConfigMap read, by the head of its shard.
	read    map[string]map[string]string
	foreign []*cluster.ForeignError
}

// runningTallies holds the running tally of each Evaluation's run. A pass
// takes one to add to it, and puts it back; a pass that fails with it in
// hand drops it (the end then gathers every shard).
type runningTallies struct {
	mu sync.Mutex
	by map[types.NamespacedName]*runningTally
}

func newRunningTallies() *runningTallies {
	return &runningTallies{by: map[types.NamespacedName]*runningTally{}}
}

// take removes and returns the running tally of run of ev; nil if it has none.
func (rt *runningTallies) take(ev *v1alpha1.Evaluation, run string) *runningTally {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	key := client2key(ev)
	t := rt.by[key]
	delete(rt.by, key)
	if t == nil || t.uid != ev.UID || t.run != run {
		return nil
	}
	return t
}

func (rt *runningTallies) put(key types.NamespacedName, t *runningTally) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.by[key] = t
}

func (rt *runningTallies) forget(key types.NamespacedName) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	delete(rt.by, key)
}

// tallyAtOnce is how many shards a pass reads at once for the running
// tally, and tallyPerPass how many it takes at most: a pass stays short,
// and the next takes the rest.
const (
	tallyAtOnce  = 4
	tallyPerPass = 32
)

// tallyShards adds to the run's running tally the shards that succeeded
// since, each pair's in order. It never fails the pass: a shard it cannot
// read now is read by a later pass, or at the end.
func (r *EvaluationReconciler) tallyShards(ctx context.Context, p *pass) (bool, error) {
	if p.plan == nil || p.ev.Spec.Baseline != nil || len(p.shards) == 0 || allSucceeded(p.shards) {
		// (Once all succeeded, the end gathers what is left at once.)
		return true, nil
	}
	ev := p.ev
	rt := r.tallies.take(ev, p.run)
	if rt == nil {
		rt = &runningTally{uid: ev.UID, run: p.run, next: map[[2]string]int{}, read: map[string]map[string]string{},
			t: newTally(ev, nil, func(_, dataset string) int64 { return int64(p.plan.Totals[dataset]) })}
	}
	defer r.tallies.put(client2key(ev), rt)
	if rt.t == nil {
		return true, nil // dropped: the end gathers every shard
	}
	succeeded := make(map[string]bool, len(p.shards))
	for i := range p.shards {
		if s := &p.shards[i]; s.progress.State == cluster.StateSucceeded {
			succeeded[s.head] = true
		}
	}
	// Which to take: by pair, those after the pair's tallied ones that
	// succeeded, up to the first that has not.
	shards := kube.RunShards(ev, *p.plan)
	var pairs [][2]string
	positions := map[[2]string][]int{}
	for pos, sh := range shards {
		pair := [2]string{sh.Model, sh.Dataset}
		if positions[pair] == nil {
			pairs = append(pairs, pair)
		}
		positions[pair] = append(positions[pair], pos)
	}
	var take []int
	for _, pair := range pairs {
		for _, pos := range positions[pair][min(rt.next[pair], len(positions[pair])):] {
			sh := shards[pos]
			if len(take) == tallyPerPass || !succeeded[cluster.HeadName(ev.Name, p.run, sh.Model, sh.Index)] {
				break
			}
			take = append(take, pos)
		}
	}
	if len(take) == 0 {
		return true, nil
	}
	if !rt.storeOpened {
		// The records go to the results store, if the run has one: their
		// parts are written as their shards are tallied.
		store, err := r.runStore(ctx, p)
		if err != nil {
			return true, nil // the end says what is wrong with the store
		}
		if store != nil {
			w, _, err := r.openRunStore(ctx, p)
			if err != nil || w == nil {
				// Unavailable, or committed already: the end sees to it.
				return true, nil
			}
			rt.store = w
		}
		rt.storeOpened = true
	}
	if p.headsInStore && rt.store == nil {
		return true, nil // their staging chunks are read where the end finds them
	}
	r.tallyTaken(ctx, p, rt, shards, take)
	return true, nil
}

// tallyTaken reads the shards at positions take of shards, at once, and adds
// them to rt in order; those of a pair after one it could not read wait for
// a later pass.
func (r *EvaluationReconciler) tallyTaken(ctx context.Context, p *pass, rt *runningTally, shards []cluster.Shard, take []int) {
	ev := p.ev
	logger := log.FromContext(ctx)
	cms, err := r.runConfigMaps(ctx, p)
	if err != nil {
		logger.V(1).Info("Failed to list the run's ConfigMaps before the end; the end reads them", "error", err.Error())
		return
	}
	names := r.recordNames(p, cms)
	var staged kube.Staged
	if rt.store != nil {
		staged = stagedRecords(rt.store.at)
	}
	got := make([]kube.ShardRecords, len(take))
	errs := make([]error, len(take))
	var g errgroup.Group
	g.SetLimit(tallyAtOnce)
	for i, pos := range take {
		g.Go(func() error {
			got[i], errs[i] = kube.ReadShardRecords(ctx, r.APIReader, ev, p.run, shards[pos], names, staged)
			return nil
		})
	}
	_ = g.Wait()
	drop := func(err error) {
		// Half added: the tally is of no use; the end gathers every
		// shard (and fails as it would have).
		logger.V(1).Info("Dropped the running tally; the end gathers every shard", "error", err.Error())
		if rt.store != nil {
			_ = rt.store.uploads.Wait() // none outlives the pass
		}
		rt.t.release()
		rt.t, rt.store = nil, nil
	}
	stopped := map[[2]string]bool{}
	for i, pos := range take {
		sh := shards[pos]
		pair := [2]string{sh.Model, sh.Dataset}
		if stopped[pair] {
			continue
		}
		if errs[i] != nil {
			logger.V(1).Info("Failed to read a shard's records before the end; a later pass reads them", "shard", sh.Key(), "error", errs[i].Error())
			stopped[pair] = true
			continue
		}
		err := got[i].Latest.Each(func(_ int, l results.Line) error {
			err := rt.t.add(pos, sh.Model, sh.Dataset, l)
			if err == nil && rt.store != nil {
				err = rt.store.add(ctx, sh, l)
			}
			return err
		})
		if err == nil {
			err = rt.t.endPart()
		}
		if err == nil && rt.store != nil {
			err = rt.store.flush(ctx)
		}
		if err != nil {
			drop(fmt.Errorf("shard %s: %w", sh.Key(), err))
			return
		}
		rt.next[pair]++
		rt.read[cluster.HeadName(ev.Name, p.run, sh.Model, sh.Index)] = got[i].Versions
		rt.foreign = append(rt.foreign, got[i].Foreign...)
	}
	if rt.store != nil {
		// None outlives the pass.
		if err := rt.store.uploads.Wait(); err != nil {
			drop(err)
		}
	}
}

// recordNames are the names of the run's ConfigMaps in cms that hold
// records (heads and chunk slots) and that the Evaluation controls.
func (r *EvaluationReconciler) recordNames(p *pass, cms []metav1.PartialObjectMetadata) []string {
	var names []string
	for i := range cms {
		m := &cms[i]
		if c := m.Labels[cluster.LabelComponent]; (c == cluster.ComponentShard || c == cluster.ComponentRecords) && !r.ignoreForeign(p, "ConfigMap", m) {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return names
}

// usable reports whether rt still stands for the run whose record
// ConfigMaps are now cms, and whose records store writes (nil: none): every
// ConfigMap of the shards it tallied is the version it read, none was added
// or removed since, and it wrote their parts to the same generation of the
// same run in the store.
func (rt *runningTally) usable(cms []metav1.PartialObjectMetadata, store *storeWriter) bool {
	if rt == nil || rt.t == nil || (rt.store == nil) != (store == nil) {
		return false
	}
	if store != nil && (rt.store.gen != store.gen || rt.store.at.Location() != store.at.Location()) {
		return false
	}
	now := map[string]map[string]string{} // by head, as rt.read
	note := func(head string, m *metav1.PartialObjectMetadata) {
		if _, ok := rt.read[head]; !ok {
			return
		}
		if now[head] == nil {
			now[head] = map[string]string{}
		}
		now[head][m.Name] = m.ResourceVersion
	}
	for i := range cms {
		m := &cms[i]
		note(m.Name, m)
		if head, _, ok := cluster.ChunkOf(m.Name); ok {
			note(head, m)
		}
	}
	for head, read := range rt.read {
		if !maps.Equal(now[head], read) {
			return false
		}
	}
	return true
}
