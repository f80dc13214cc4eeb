package controllers

import (
	"context"
	"errors"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/internal/cluster"
)

// listConfigMaps lists the metadata of the ConfigMaps opts select: all the
// manager caches of ConfigMaps (records stay out of its memory).
func (r *EvaluationReconciler) listConfigMaps(ctx context.Context, opts ...client.ListOption) ([]metav1.PartialObjectMetadata, error) {
	return listConfigMaps(ctx, r.Client, opts...)
}

// listConfigMaps lists ConfigMaps as metadata only (what the cache holds).
func listConfigMaps(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]metav1.PartialObjectMetadata, error) {
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// runConfigMaps are the ConfigMaps of the pass's run.
func (r *EvaluationReconciler) runConfigMaps(ctx context.Context, p *pass) ([]metav1.PartialObjectMetadata, error) {
	return r.listConfigMaps(ctx, client.InNamespace(p.ev.Namespace), client.MatchingLabels{
		cluster.LabelEvaluation: cluster.LabelValue(p.ev.Name), cluster.LabelRun: p.run,
	})
}

// claimResults makes the run's NAME-results ConfigMap (empty until the run
// ends) before anything is spent, so that a name taken by someone else's object
// stops the run at its start, not once its results are due.
func (r *EvaluationReconciler) claimResults(ctx context.Context, p *pass) (bool, error) {
	cm := &corev1.ConfigMap{ObjectMeta: objectMeta(p.ev.Namespace, cluster.ResultsName(p.ev.Name), cluster.Labels(p.ev.Name, p.run, cluster.ComponentResults))}
	cm.Annotations = map[string]string{cluster.AnnotationRun: p.run}
	return r.claimCached(ctx, p, cm)
}

// objectsAtOnce is how many of a run's per-shard objects a pass makes or
// deletes at once: one by one, a run's first pass (a head and an uploads
// Secret for each shard) and its last (deleting the Secrets) took a second
// or more of round trips each, at either end of every run; 8 at a time, the
// first pass of 40 shards still took 0.58 s before its Jobs were made, 16 at
// a time 0.38–0.47 s (with a results store), 48 at a time 0.26–0.36 s. The
// manager runs one pass at a time: this bounds its requests in flight.
const objectsAtOnce = 48

// eachAtOnce runs f(0) to f(n-1), objectsAtOnce at a time, and returns the
// first error (the others run to their end: what they made is made).
func eachAtOnce(n int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(objectsAtOnce)
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	return g.Wait()
}

// ensureShardObjects makes every shard's head and the chunk slots its records
// need, before the shard's runner writes to them (runners create nothing). A
// shard gets the slots its head asks for (cluster.SlotsWanted): none until its
// records outgrow the head, then always a few ahead of what it filled.
func (r *EvaluationReconciler) ensureShardObjects(ctx context.Context, p *pass) (bool, error) {
	if p.plan == nil {
		return true, nil
	}
	ev := p.ev
	cms, err := r.runConfigMaps(ctx, p)
	if err != nil {
		return false, err
	}
	have := make(map[string]*metav1.PartialObjectMetadata, len(cms))
	for i := range cms {
		have[cms[i].Name] = &cms[i]
	}
	// ensure makes obj unless the cache has it, and says whether it is ours.
	ensure := func(obj *corev1.ConfigMap) (bool, error) {
		if m := have[obj.Name]; m != nil {
			return r.ours(p, "ConfigMap", m), nil
		}
		return r.claim(ctx, p, obj)
	}
	store, err := r.runStore(ctx, p)
	var se *storeError
	if errors.As(err, &se) {
		return r.storeUnavailable(p, se.err, false)
	} else if err != nil {
		return false, err
	}
	// The heads first, all at once: a run's first pass makes one per shard.
	type shardHead struct {
		s    cluster.Shard
		head *corev1.ConfigMap
		mine bool
	}
	var heads []shardHead
	for _, model := range cluster.Subjects(&ev.Spec) {
		for _, s := range p.plan.Shards(&ev.Spec, model) {
			heads = append(heads, shardHead{s: s, head: cluster.NewHead(ev, p.hashes, p.run, s, store != nil)})
		}
	}
	if err := eachAtOnce(len(heads), func(i int) (err error) {
		heads[i].mine, err = ensure(heads[i].head)
		return err
	}); err != nil {
		return false, err
	}
	type shardUploads struct {
		head     string
		progress cluster.ShardProgress
		made     bool // by this pass
	}
	var uploads []shardUploads
	ok := true
	for _, h := range heads {
		s, head, mine := h.s, h.head, h.mine
		ok = ok && mine
		p.shardObjects = append(p.shardObjects, head.Name)
		var progress cluster.ShardProgress
		inStore := cluster.InStore(head.Annotations)
		if m := have[head.Name]; m != nil {
			// The head as made decides, whatever the manager's options say now.
			progress, _ = cluster.ParseProgress(m.Annotations)
			inStore = cluster.InStore(m.Annotations)
		}
		if !mine {
			continue
		}
		if inStore {
			// Every shard's, done or not: the runner's Role stays the
			// same as shards end, rather than being rewritten by each.
			p.uploadSecrets = append(p.uploadSecrets, cluster.UploadsName(head.Name))
			if progress.State == cluster.StateSucceeded || p.status.ResultsLocation != "" {
				// Its runner is done (and a pass that read a stale
				// Evaluation must not grant URLs the commit revoked).
				continue
			}
			uploads = append(uploads, shardUploads{head.Name, progress, have[head.Name] == nil})
			continue
		}
		want := 0
		if have[head.Name] != nil {
			want = cluster.SlotsWanted(progress)
		}
		for k := range want {
			slot := cluster.NewChunkSlot(ev, p.hashes, p.run, s, k)
			mine, err := ensure(slot)
			if err != nil {
				return false, err
			}
			ok = ok && mine
			p.shardObjects = append(p.shardObjects, slot.Name)
		}
	}
	granted := make([]bool, len(uploads))
	err = eachAtOnce(len(uploads), func(i int) (err error) {
		granted[i], err = r.ensureUploadsOf(ctx, p, store, uploads[i].head, uploads[i].progress, uploads[i].made)
		return err
	})
	if errors.As(err, &se) {
		return r.storeUnavailable(p, se.err, false)
	} else if err != nil {
		return false, err
	}
	for _, g := range granted {
		ok = ok && g
	}
	return ok, nil
}
