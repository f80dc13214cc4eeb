package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
)

// uploadURLLifetime is how long presigned URLs hold. An hour, as
// credentials from a web identity (IRSA) last about that long and a URL
// holds no longer than the credentials that signed it; new ones are signed
// once half of it is gone.
const uploadURLLifetime = time.Hour

// grant is what a shard's uploads Secret holds: URLs writing chunks
// [first, end), reading chunks [0, gets), until expires.
type grant struct {
	first, end, gets int
	expires          time.Time
	// none: the Secret is not needed (a run without store cache sources).
	none bool
}

// uploadGrants remembers what each uploads Secret holds, so that a pass
// reads a Secret only after the manager starts (Secrets are not cached:
// a cache would hold every Secret of the cluster).
type uploadGrants struct {
	mu sync.Mutex
	m  map[types.NamespacedName]grant
}

func newUploadGrants() *uploadGrants { return &uploadGrants{m: map[types.NamespacedName]grant{}} }

func (g *uploadGrants) get(k types.NamespacedName) (grant, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.m[k]
	return v, ok
}

func (g *uploadGrants) set(k types.NamespacedName, v grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m[k] = v
}

func (g *uploadGrants) forget(k types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, k)
}

// ensureUploads keeps a shard whose records go to the results store
// supplied with presigned URLs (cluster.Uploads): a window of UploadWindow
// chunks from the first it has not sealed, reaching what it asks for, and
// URLs reading its sealed chunks while it has records awaiting a judge's
// batch. It reports false when the Secret's name is taken by an object the
// Evaluation does not control.
func (r *EvaluationReconciler) ensureUploads(ctx context.Context, p *pass, store *objstore.Store, head string, progress cluster.ShardProgress) (bool, error) {
	return r.ensureUploadsOf(ctx, p, store, head, progress, false)
}

// ensureUploadsOf is ensureUploads; made says the pass made the head, so
// its Secret is taken as not there without reading it (a run's first pass
// read 40 Secrets only to find none). One there all the same (the head made
// by a pass that failed after) is written over.
func (r *EvaluationReconciler) ensureUploadsOf(ctx context.Context, p *pass, store *objstore.Store, head string, progress cluster.ShardProgress, made bool) (bool, error) {
	if store == nil {
		return false, &storeError{fmt.Errorf("shard %s writes its records to the results store, and the manager has none (--results-store)", head)}
	}
	name := cluster.UploadsName(head)
	key := types.NamespacedName{Namespace: p.ev.Namespace, Name: name}
	want := max(cluster.SlotsWanted(progress), progress.Chunks+1)
	gets := 0
	if progress.Awaiting > 0 {
		gets = progress.Chunks
	}
	renew := uploadURLLifetime / 2
	g, known := r.grants.get(key)
	absent := made && !known
	if !known && !absent {
		var sec corev1.Secret
		err := r.APIReader.Get(ctx, key, &sec)
		switch {
		case apierrors.IsNotFound(err):
			absent = true
		case err != nil:
			return false, err
		case !r.ours(p, "Secret", &sec):
			return false, nil
		default:
			var u cluster.Uploads
			if json.Unmarshal(sec.Data[cluster.KeyUploads], &u) == nil {
				g, known = grant{first: u.First, end: u.First + len(u.Put), gets: len(u.Get), expires: u.Expires}, true
			}
		}
	}
	if known && g.first <= progress.Chunks && g.end >= want && g.gets >= gets && g.expires.Sub(p.now) > renew {
		p.requeueAfter(g.expires.Sub(p.now) - renew)
		return true, nil
	}
	u := cluster.Uploads{Expires: p.now.Add(uploadURLLifetime), First: progress.Chunks}
	end := max(progress.Chunks+cluster.UploadWindow, want)
	if gets > 0 {
		gets = end // ahead too, so that sealing more does not ask for new ones each time
	}
	at := store.Sub(p.runLocation()...)
	for k := u.First; k < end; k++ {
		url, err := at.PresignPut(ctx, cluster.StagingKey(head, k), uploadURLLifetime)
		if err != nil {
			return false, &storeError{err}
		}
		u.Put = append(u.Put, url)
	}
	for k := range gets {
		url, err := at.PresignGet(ctx, cluster.StagingKey(head, k), uploadURLLifetime)
		if err != nil {
			return false, &storeError{err}
		}
		u.Get = append(u.Get, url)
	}
	data, err := json.Marshal(&u)
	if err != nil {
		return false, err
	}
	write := r.writeSecret
	if absent {
		// Just read as not there (a run's first pass, 40 shards): made
		// without reading it again.
		write = r.createSecret
	}
	if ok, err := write(ctx, p, name, cluster.ComponentUploads, map[string][]byte{cluster.KeyUploads: data}); !ok || err != nil {
		return ok, err
	}
	r.grants.set(key, grant{first: u.First, end: end, gets: gets, expires: u.Expires})
	p.requeueAfter(uploadURLLifetime - renew)
	return true, nil
}

// createSecret creates the Secret name of the run holding data, read as
// not there; one made since is written as writeSecret writes it.
func (r *EvaluationReconciler) createSecret(ctx context.Context, p *pass, name, component string, data map[string][]byte) (bool, error) {
	sec := &corev1.Secret{ObjectMeta: objectMeta(p.ev.Namespace, name, cluster.Labels(p.ev.Name, p.run, component)), Data: data}
	created, err := r.createOwned(ctx, p, sec)
	if apierrors.IsAlreadyExists(err) {
		return r.writeSecret(ctx, p, name, component, data)
	}
	return created, err
}

// writeSecret creates the Secret name of the run holding data, or updates
// the Evaluation's own; it reports false when the name is someone else's.
func (r *EvaluationReconciler) writeSecret(ctx context.Context, p *pass, name, component string, data map[string][]byte) (bool, error) {
	key := types.NamespacedName{Namespace: p.ev.Namespace, Name: name}
	sec := &corev1.Secret{ObjectMeta: objectMeta(p.ev.Namespace, name, cluster.Labels(p.ev.Name, p.run, component)), Data: data}
	var existing corev1.Secret
	err := r.APIReader.Get(ctx, key, &existing)
	switch {
	case apierrors.IsNotFound(err):
		return r.claim(ctx, p, sec)
	case err != nil:
		return false, err
	case !r.ours(p, "Secret", &existing):
		return false, nil
	}
	existing.Data = data
	if err := r.Update(ctx, &existing); err != nil {
		r.grants.forget(key) // read it again next time
		return false, fmt.Errorf("updating Secret %s: %w", name, err)
	}
	return true, nil
}

// deleteSecrets deletes the run's Secrets of presigned URLs once its
// records are committed: the URLs are not needed any more.
func (r *EvaluationReconciler) deleteSecrets(ctx context.Context, p *pass, names []string) error {
	return eachAtOnce(len(names), func(i int) error {
		sec := &corev1.Secret{}
		sec.Namespace, sec.Name = p.ev.Namespace, names[i]
		key := client.ObjectKeyFromObject(sec)
		// Only the Evaluation's own: the precondition makes a Secret of that
		// name someone else made since stay.
		err := r.APIReader.Get(ctx, key, sec)
		switch {
		case apierrors.IsNotFound(err):
			r.grants.forget(key)
			return nil
		case err != nil:
			return err
		case !r.ours(p, "Secret", sec):
			return nil
		}
		err = r.Delete(ctx, sec, client.Preconditions{UID: &sec.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Secret %s: %w", names[i], err)
		}
		r.grants.forget(key)
		return nil
	})
}

// stagedRecords reads the staging chunks a shard sealed from the run's
// location, in the order it sealed them. They are read by their keys, not
// listed: a listing may lag behind what was written, and a chunk the head
// counts but the store does not have is an error to wait out (the run
// waits, ResultsStoreUnavailable), never records silently missing.
func stagedRecords(at *objstore.Store) kube.Staged {
	return func(ctx context.Context, _ cluster.Shard, head string, sealed int) ([]results.Line, error) {
		chunks := make([][]results.Line, sealed)
		var g errgroup.Group
		g.SetLimit(4)
		for i := range sealed {
			k := cluster.StagingKey(head, i)
			g.Go(func() error {
				gz, err := at.Get(ctx, k)
				if errors.Is(err, objstore.ErrNotFound) {
					return &storeError{fmt.Errorf("%s is missing: shard %s sealed %d chunks", at.Location().Join(k), head, sealed)}
				}
				if err != nil {
					return &storeError{err}
				}
				if chunks[i], err = cluster.ParseChunk(gz); err != nil {
					return fmt.Errorf("%s: %w", at.Location().Join(k), err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		return slices.Concat(chunks...), nil
	}
}

// runStaged reads the shards' records that went to the results store: from
// their staging chunks, or, once this run's manifest is committed (store is
// nil: a pass before this one committed it, and may have removed the
// staging chunks since), from the parts it names.
func (r *EvaluationReconciler) runStaged(ctx context.Context, p *pass, w *storeWriter) (kube.Staged, error) {
	if w != nil {
		return stagedRecords(w.at), nil
	}
	store, err := r.runStore(ctx, p)
	switch {
	case err != nil:
		return nil, err
	case store == nil:
		return nil, &storeError{errors.New("the run's shards wrote their records to the results store, and the manager has none (--results-store)")}
	}
	at := store.Sub(p.runLocation()...)
	m, err := objects.Latest(ctx, at)
	switch {
	case err != nil:
		return nil, &storeError{err}
	case m == nil || m.ID != p.run:
		return nil, &storeError{fmt.Errorf("%s holds no commit of run %s", at.Location(), p.run)}
	}
	return func(ctx context.Context, sh cluster.Shard, _ string, _ int) ([]results.Line, error) {
		pair := m.Pair(sh.Model, sh.Dataset)
		if pair == nil {
			return nil, nil
		}
		i := slices.IndexFunc(pair.Parts, func(pt objects.Part) bool { return isShardPart(pt.Key, sh) })
		if i < 0 {
			return nil, nil // the shard had no record
		}
		one := *pair
		one.Parts = pair.Parts[i : i+1]
		var out []results.Line
		err := objects.ReadPair(ctx, at, &one, func(l results.Line) error {
			l.Record = slices.Clone(l.Record)
			out = append(out, l)
			return nil
		})
		if err != nil {
			return nil, &storeError{err}
		}
		return out, nil
	}, nil
}
