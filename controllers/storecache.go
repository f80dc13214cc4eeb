package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/runner/results/objects"
)

// storedSources adds to what a new run reuses of run old the records old
// put in the results store (at location). Once old committed, they are its
// committed parts, of each model and dataset whose answers the new run
// shares (or all, with the cache on), as the pairs' headers say: its heads
// may be gone (tidyCommitted), and those left hold nothing the parts do
// not. Before that (the spec was edited while old ran), they are the
// staging chunks of the heads that say so, which come before the heads,
// since the heads hold what was not sealed, so a head's records win as the
// newer. The store failing only costs the reuse: the run calls the models
// instead, and says so in the log.
func (r *EvaluationReconciler) storedSources(ctx context.Context, p *pass, old string, kept []cluster.CacheSource, location []string) []cluster.CacheSource {
	if old == "" {
		return kept
	}
	store, err := r.runStore(ctx, p)
	if store == nil || err != nil {
		return kept // where the earlier run's records are is not to be reached (logged where it matters)
	}
	at := store.Sub(location...)
	fail := func(err error) []cluster.CacheSource {
		log.FromContext(ctx).Info("Failed to read the earlier run's records in the results store; the run calls the models for them", "location", at.Location().String(), "error", err.Error())
		return kept
	}
	m, err := objects.Latest(ctx, at)
	if err != nil {
		return fail(err)
	}
	if m != nil && m.ID == old {
		return append(committedSources(p, m, at.Location().String()), slices.DeleteFunc(kept, func(k cluster.CacheSource) bool { return k.InStore })...)
	}
	type pair struct{ model, dataset string }
	var pairs []pair
	heads := map[pair][]cluster.CacheSource{}
	for _, k := range kept {
		pk := pair{k.Model, k.Dataset}
		if !k.InStore {
			continue
		}
		if heads[pk] == nil {
			pairs = append(pairs, pk)
		}
		heads[pk] = append(heads[pk], k)
	}
	var stored []cluster.CacheSource
	for _, pk := range pairs {
		src := cluster.CacheSource{Model: pk.model, Dataset: pk.dataset, Answers: heads[pk][0].Answers, Scorers: heads[pk][0].Scorers,
			Location: at.Location().String()}
		for _, h := range heads[pk] {
			keys, err := at.List(ctx, cluster.StagingPrefix(h.Name))
			if err != nil {
				return fail(err)
			}
			for _, k := range keys {
				src.Objects = append(src.Objects, cluster.StoredObject{Key: k, First: 0, Last: -1})
			}
		}
		if len(src.Objects) > 0 {
			stored = append(stored, src)
		}
	}
	return append(stored, kept...)
}

// committedSources are the pairs of a committed run (m, at location) that
// the new run reuses: those whose model answers as it did, or all, with
// the cache on (deleteOtherRuns decides the same for heads).
func committedSources(p *pass, m *objects.Manifest, location string) []cluster.CacheSource {
	var out []cluster.CacheSource
	for _, pp := range m.Pairs {
		var h pairHeader
		if json.Unmarshal(pp.Header, &h) != nil || len(pp.Parts) == 0 {
			continue
		}
		answers := h.Answers != "" && h.Answers == p.hashes.Answers(pp.Model)
		if !answers && !cacheOn(&p.ev.Spec) {
			continue
		}
		src := cluster.CacheSource{Model: pp.Model, Dataset: pp.Dataset, Answers: answers, Scorers: h.Scorers, Location: location}
		for _, part := range pp.Parts {
			src.Objects = append(src.Objects, cluster.StoredObject{Key: part.Key, First: part.First, Last: part.Last})
		}
		out = append(out, src)
	}
	return out
}

// ensureCacheURLs keeps the run's runners supplied with presigned URLs of
// the earlier run's records in the results store its cache sources list
// (storedSources), signed again once half their lifetime is gone.
func (r *EvaluationReconciler) ensureCacheURLs(ctx context.Context, p *pass) (bool, error) {
	if p.status.ResultsLocation != "" {
		return true, nil // committed: the runners are done (a pass that read a stale Evaluation)
	}
	name := cluster.CacheURLsName(p.ev.Name, p.run)
	key := types.NamespacedName{Namespace: p.ev.Namespace, Name: name}
	renew := uploadURLLifetime / 2
	g, known := r.grants.get(key)
	switch {
	case known && g.none:
		return true, nil
	case known && g.expires.Sub(p.now) > renew:
		p.cacheURLs = name
		p.requeueAfter(g.expires.Sub(p.now) - renew)
		return true, nil
	}
	var list corev1.ConfigMap
	err := kube.GetConfigMap(ctx, r.APIReader, p.ev, cluster.CacheSourcesName(p.ev.Name, p.run), &list)
	switch {
	case apierrors.IsNotFound(err):
		r.grants.set(key, grant{none: true})
		return true, nil
	case err != nil:
		return false, err
	}
	var sources []cluster.CacheSource
	if err := json.Unmarshal([]byte(list.Data[cluster.KeySources]), &sources); err != nil {
		return false, fmt.Errorf("reading the cache sources: %w", err)
	}
	urls := cluster.CacheURLs{Expires: p.now.Add(uploadURLLifetime), URLs: map[string]string{}}
	for _, src := range sources {
		if src.Location == "" {
			continue
		}
		at, err := r.storeAt(ctx, p, src.Location)
		if err != nil {
			// Only the reuse is lost: the runners call the models instead.
			log.FromContext(ctx).Info("Not reusing the earlier run's records in the results store", "error", err.Error())
			continue
		}
		for _, o := range src.Objects {
			u, err := at.PresignGet(ctx, o.Key, uploadURLLifetime)
			if err != nil {
				return false, err
			}
			urls.URLs[src.Location+"/"+o.Key] = u
		}
	}
	if len(urls.URLs) == 0 {
		r.grants.set(key, grant{none: true})
		return true, nil
	}
	data, err := json.Marshal(&urls)
	if err != nil {
		return false, err
	}
	if ok, err := r.writeSecret(ctx, p, name, cluster.ComponentCache, map[string][]byte{cluster.KeyCacheURLs: data}); !ok || err != nil {
		return ok, err
	}
	r.grants.set(key, grant{expires: urls.Expires})
	p.cacheURLs = name
	p.requeueAfter(uploadURLLifetime - renew)
	return true, nil
}

// cacheSecrets are the run's Secrets of presigned URLs, once the records
// are committed: its shards' uploads Secrets and its cache URLs Secret.
func cacheSecrets(p *pass) []string {
	var names []string
	for _, model := range cluster.Subjects(&p.ev.Spec) {
		if p.plan == nil {
			break // no plan, no shards
		}
		for _, sh := range p.plan.Shards(&p.ev.Spec, model) {
			names = append(names, cluster.UploadsName(cluster.HeadName(p.ev.Name, p.run, sh.Model, sh.Index)))
		}
	}
	return slices.Concat(names, []string{cluster.CacheURLsName(p.ev.Name, p.run)})
}
