package controllers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
)

// storeWriter writes a run's records into the cluster's results store while
// gather reads them: a Parquet part per shard, at a key named after the
// shard (so a pass tried again writes the same parts), then the manifest,
// committed last and once (commit).
type storeWriter struct {
	store *objstore.Store
	// at is the run's location under the store.
	at    *objstore.Store
	shard cluster.Shard
	lines []results.Line
	pairs []objects.PairParts
	index map[[2]string]int
	// uploads encode and write parts while gather reads on (two at a
	// time: they hold two shards' records); written are their parts, in
	// the order the shards were read.
	uploads *errgroup.Group
	written []*writtenPart
	// gen is the generation it commits.
	gen int64
}

// writtenPart is a part of pair, once its upload is done.
type writtenPart struct {
	pair int
	part objects.Part
}

// runLocation is where a run's records go: NAMESPACE/NAME/STARTED-RUN, so a
// name's runs list in the order they started, and outlive it.
func (p *pass) runLocation() []string { return runLocation(p.ev, p.run, p.status.StartTime) }

// runLocation is where run of ev, started at start, puts its records.
func runLocation(ev *v1alpha1.Evaluation, run string, start *metav1.Time) []string {
	started := "unstarted"
	if start != nil {
		started = start.UTC().Format("20060102T150405Z")
	}
	return []string{ev.Namespace, ev.Name, started + "-" + run}
}

func newStoreWriter(store *objstore.Store, p *pass) *storeWriter {
	w := &storeWriter{store: store, at: store.Sub(p.runLocation()...), index: map[[2]string]int{}, uploads: &errgroup.Group{}, gen: 1}
	w.uploads.SetLimit(2)
	for _, model := range cluster.Subjects(&p.ev.Spec) {
		for _, d := range p.ev.Spec.Datasets {
			w.index[[2]string{model, d.Name}] = len(w.pairs)
			header, _ := json.Marshal(pairHeader{Model: model, Dataset: d.Name, Run: p.run,
				Answers: p.hashes.Answers(model), Scorers: p.hashes.ScorersValue})
			w.pairs = append(w.pairs, objects.PairParts{Model: model, Dataset: d.Name, Parts: []objects.Part{}, Header: header})
		}
	}
	return w
}

// pairHeader is the header of each pair the controller commits. Besides
// naming the pair, it says what a later run needs to reuse its records
// once the run's heads are gone (tidyCommitted), as their labels said:
// whose answers they are and how they were scored.
type pairHeader struct {
	Model   string `json:"model"`
	Dataset string `json:"dataset"`
	Run     string `json:"run"`
	// Answers is cluster.AnswersHash of the model in the run's spec.
	Answers string `json:"answers,omitempty"`
	// Scorers is the run's scorer hashes, as a head's
	// cluster.AnnotationScorers holds them.
	Scorers string `json:"scorers,omitempty"`
}

// add takes one record of shard sh; a new shard writes the last one's part.
func (w *storeWriter) add(ctx context.Context, sh cluster.Shard, l results.Line) error {
	if len(w.lines) > 0 && sh != w.shard {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	w.shard = sh
	l.Record = bytes.Clone(l.Record)
	w.lines = append(w.lines, l)
	return nil
}

// flush writes the current shard's part.
func (w *storeWriter) flush(ctx context.Context) error {
	if len(w.lines) == 0 {
		return nil
	}
	sh := w.shard
	i, ok := w.index[[2]string{sh.Model, sh.Dataset}]
	if !ok {
		return fmt.Errorf("shard %s of dataset %s is of no model and dataset of the run", sh.Key(), sh.Dataset)
	}
	lines, key, done := w.lines, objects.PartKey(sh.Model, sh.Dataset, shardPartName(sh, w.gen)), &writtenPart{pair: i}
	w.written = append(w.written, done)
	w.lines = nil
	w.uploads.Go(func() error {
		part, err := objects.PutPart(ctx, w.at, key, lines)
		done.part = part
		return err
	})
	return nil
}

// commit writes the last part and commits the run's manifest, with its
// summary; stopped says the run stopped before its end, and may go on. A
// manifest of this generation of the run committed by an earlier pass (the
// manager restarted before it wrote status) stands.
func (w *storeWriter) commit(ctx context.Context, p *pass, summary []byte, stopped bool) (string, error) {
	var mark string
	if stopped {
		mark = recordsMark(p)
	}
	if err := w.flush(ctx); err != nil {
		return "", err
	}
	if err := w.uploads.Wait(); err != nil {
		return "", err
	}
	for _, d := range w.written {
		w.pairs[d.pair].Parts = append(w.pairs[d.pair].Parts, d.part)
	}
	where := w.at.Location().String()
	m := &objects.Manifest{Generation: w.gen, ID: p.run, Writer: "the Proctor controller", Committed: p.now.UTC(), Pairs: w.pairs, Summary: summary, Stopped: mark}
	err := objects.Commit(ctx, w.at, where, m)
	var ce *objects.ConflictError
	if errors.As(err, &ce) {
		if had, rerr := objects.ReadManifest(ctx, w.at, w.gen); rerr == nil && had.ID == p.run {
			return where, nil
		}
	}
	if err != nil {
		return "", err
	}
	return where, nil
}

// storeError is a failure of the results store, as opposed to one of the
// cluster: the run waits for the store (ResultsStoreUnavailable).
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// openRunStore is the writer of the run's records into the results store;
// nil when the cluster has none, or when an earlier pass committed them
// already (location says where).
func (r *EvaluationReconciler) openRunStore(ctx context.Context, p *pass) (*storeWriter, string, error) {
	store, err := r.runStore(ctx, p)
	if store == nil || err != nil {
		return nil, "", err
	}
	w := newStoreWriter(store, p)
	had, err := objects.Latest(ctx, w.at)
	switch {
	case err != nil:
		return nil, "", err
	case had == nil:
		return w, "", nil
	case had.ID != p.run:
		return nil, "", fmt.Errorf("%s holds another run's records (%s)", w.at.Location(), had.ID)
	case had.Stopped == "" || had.Stopped == recordsMark(p):
		return nil, w.at.Location().String(), nil
	}
	// The run stopped before its end, committed what it had then, and
	// kept its staging chunks: it went on, and commits all it has now.
	w.gen = had.Generation + 1
	return w, "", nil
}

// recordsMark is a mark of what records the run's shards hold, as their
// heads say: a run that stopped commits it, so that a pass finding the
// same (one that read the Evaluation before it stopped) commits nothing
// new, while one of a run that went on does.
func recordsMark(p *pass) string {
	h := sha256.New()
	for _, s := range p.shards {
		pr := s.progress
		fmt.Fprintf(h, "%s %d %d %d %d %d\n", s.head, pr.Done, pr.Errored, pr.Chunks, pr.Awaiting, pr.Stored)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// storeUnavailable keeps the run Running, saying why, until the store
// takes its records: it is tried again every RecheckAfter. The Warning
// event is made once, when the run starts waiting. ran says every sample
// ran (the run waits at its end), else the run waits to start its shards.
func (r *EvaluationReconciler) storeUnavailable(p *pass, err error, ran bool) (bool, error) {
	msg := fmt.Sprintf("the records could not be written to the results store (tried again every %v): %v", r.Options.RecheckAfter, err)
	if ran {
		msg = "every sample ran, but " + msg
	}
	p.waiting = &kube.Missing{Reason: v1alpha1.ReasonResultsStoreUnavailable, Message: msg}
	if p.ev.Status.Reason != v1alpha1.ReasonResultsStoreUnavailable {
		p.event(corev1.EventTypeWarning, v1alpha1.ReasonResultsStoreUnavailable, "%s", msg)
	}
	p.requeueAfter(r.Options.RecheckAfter)
	return false, nil
}

// storedBaseline is the latest run committed to the results store of the
// Evaluation spec.baseline.evaluation names, for one deleted since; nil
// when there is no store, no such name, or no committed run of it.
func (r *EvaluationReconciler) storedBaseline(ctx context.Context, p *pass) (*objects.Results, error) {
	name := p.ev.Spec.Baseline.Evaluation
	if name == "" || name == p.ev.Name {
		return nil, nil
	}
	store, err := r.runStore(ctx, p)
	if store == nil || err != nil {
		return nil, err
	}
	of := store.Sub(p.ev.Namespace, name)
	runs, err := of.Dirs(ctx, "")
	if err != nil {
		return nil, err
	}
	// Newest first: run directories start with the time the run started.
	for i := len(runs) - 1; i >= 0; i-- {
		at := of.Sub(runs[i])
		m, err := objects.Latest(ctx, at)
		switch {
		case err != nil:
			return nil, err
		case m == nil:
			continue // a run whose records were never committed
		}
		return &objects.Results{Bucket: at, Where: at.Location().String(), Manifest: m}, nil
	}
	return nil, nil
}

// cleanStaging removes what only served to carry the run's records to the
// store, once they are committed: the shards' uploads Secrets, the
// presigned URLs of what it reused, and, with chunks, its staging chunks
// (a run that may go on reads them again). A failure to delete chunks is
// logged, not retried: the committed manifest never names them.
func (r *EvaluationReconciler) cleanStaging(ctx context.Context, p *pass, chunks bool) error {
	if err := r.deleteSecrets(ctx, p, cacheSecrets(p)); err != nil {
		return err
	}
	// The list of what the run reused goes too, so that a pass reading the
	// Evaluation as it was before this one does not grant its URLs again.
	if err := r.deleteIfOurs(ctx, p, cluster.CacheSourcesName(p.ev.Name, p.run)); err != nil {
		return err
	}
	store, err := r.runStore(ctx, p)
	if store == nil || err != nil || !chunks {
		return err
	}
	at := store.Sub(p.runLocation()...)
	keys, err := at.List(ctx, cluster.StagingPrefix(""))
	if err == nil {
		err = at.Delete(ctx, keys...)
	}
	if err != nil {
		log.FromContext(ctx).Info("Left staging chunks in the results store", "location", at.Location().String(), "error", err.Error())
	}
	return nil
}

// shardPartName names a shard's part in commit generation gen: a pass
// tried again writes the same, and a later commit of a run that stopped
// and went on leaves the parts of the one before as they were.
func shardPartName(sh cluster.Shard, gen int64) string {
	if gen > 1 {
		return fmt.Sprintf("shard-%05d-g%d", sh.Index, gen)
	}
	return fmt.Sprintf("shard-%05d", sh.Index)
}

// isShardPart says whether key is a part of shard sh, of any generation.
func isShardPart(key string, sh cluster.Shard) bool {
	first := objects.PartKey(sh.Model, sh.Dataset, shardPartName(sh, 1))
	return key == first || strings.HasPrefix(key, strings.TrimSuffix(first, ".parquet")+"-g")
}

// openLocation opens, in the manager's results store, a location a
// baseline's results name: only one of the Evaluation's own namespace, as
// the results ConfigMap naming it may be anyone's copy.
func (r *EvaluationReconciler) openLocation(p *pass) kube.OpenLocation {
	return func(ctx context.Context, location string) (objects.Bucket, error) { return r.storeAt(ctx, p, location) }
}

// storeAt is a location of the Evaluation's namespace in the manager's
// results store, which an object (a results ConfigMap, a cache sources
// list) names.
func (r *EvaluationReconciler) storeAt(ctx context.Context, p *pass, location string) (*objstore.Store, error) {
	store, err := r.runStore(ctx, p)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("the records are in the results store at %s, and the manager has none (--results-store)", location)
	}
	loc, err := objstore.ParseURL(location)
	ns := store.Sub(p.ev.Namespace).Location()
	if err != nil || loc.Bucket != ns.Bucket || !strings.HasPrefix(loc.Prefix+"/", ns.Prefix+"/") {
		return nil, fmt.Errorf("%s is not a location of this namespace's runs in the results store (%s)", location, ns)
	}
	return store.Sub(p.ev.Namespace, strings.TrimPrefix(loc.Prefix, ns.Prefix+"/")), nil
}
