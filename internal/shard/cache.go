package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
)

// recordCache answers from the records the previous run of the Evaluation kept:
// in a cluster the response cache is the last run's answers, keyed by the
// requests that produced them, so a spec edit that leaves a sample's request as
// it was reuses its answer. Answers made now are cached for the rest of the shard.
type recordCache struct {
	mu sync.Mutex
	m  map[string]*cache.Entry
}

func (c *recordCache) Get(key string) (*cache.Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	return e, ok
}

func (c *recordCache) Put(key string, e *cache.Entry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = e
	return nil
}

// storeHTTP reads the earlier run's records from the results store.
var storeHTTP = &http.Client{Timeout: 5 * time.Minute}

// earlier is what a run reuses of the run before it: the response cache
// (with the cache on), and the answers to score again of a model whose
// answers the spec edit left as they were, by sample position.
type earlier struct {
	cache   *recordCache
	answers map[int]*results.Record
	// unread are the earlier records in the results store that could not
	// be read (the store down): their samples are asked again.
	unread []error
}

// loadEarlier reads, from the sources the controller listed for this run,
// what it reuses for the shard's own samples.
func loadEarlier(ctx context.Context, c client.Client, ev *v1alpha1.Evaluation, run string, sh cluster.Shard) (*earlier, error) {
	out := &earlier{cache: &recordCache{m: map[string]*cache.Entry{}}, answers: map[int]*results.Record{}}
	var list corev1.ConfigMap
	err := kube.GetConfigMap(ctx, c, ev, cluster.CacheSourcesName(ev.Name, run), &list)
	if apierrors.IsNotFound(err) {
		return out, nil // the first run, or nothing kept: nothing to reuse
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cache sources: %w", err)
	}
	var sources []cluster.CacheSource
	if err := json.Unmarshal([]byte(list.Data[cluster.KeySources]), &sources); err != nil {
		return nil, fmt.Errorf("reading the cache sources: %w", err)
	}
	cacheOn := ev.Spec.Cache != nil && ev.Spec.Cache.Enabled
	var urls *cluster.CacheURLs
	for _, src := range sources {
		if src.Model != sh.Model || src.Dataset != sh.Dataset || (!cacheOn && !src.Answers) {
			continue
		}
		var cm corev1.ConfigMap
		var lines []results.Line
		if src.Location != "" {
			// The earlier run's records in the results store.
			if urls == nil {
				if urls, err = kube.ReadCacheURLs(ctx, c, ev, run); err != nil {
					return nil, fmt.Errorf("reading the cache sources: %w", err)
				}
				if urls == nil {
					// None granted (the controller could not reach them):
					// the models are called instead.
					urls = &cluster.CacheURLs{}
				}
			}
			if lines, err = kube.ReadStoredSource(ctx, storeHTTP, urls, &src, sh.Start, sh.End); err != nil {
				// Only the reuse is lost: those samples are asked again.
				out.unread = append(out.unread, err)
				continue
			}
			cm.Annotations = map[string]string{cluster.AnnotationScorers: src.Scorers}
		} else {
			err := kube.GetConfigMap(ctx, c, ev, src.Name, &cm)
			var fe *cluster.ForeignError
			switch {
			case apierrors.IsNotFound(err), errors.As(err, &fe):
				continue // gone, or not this Evaluation's answers: never reuse them
			case err != nil:
				return nil, fmt.Errorf("reading earlier answers from %s: %w", src.Name, err)
			}
			if lines, err = cluster.ReadRecords(&cm); err != nil {
				return nil, err
			}
		}
		keep := cluster.KeptScorers(&ev.Spec, &cm)
		for _, l := range lines {
			if l.Index < sh.Start || l.Index >= sh.End {
				continue
			}
			var rec results.Record
			if json.Unmarshal(l.Record, &rec) != nil || rec.OutputTruncated {
				continue // not the whole answer: scores of a part would not be the answer's
			}
			if src.Answers && rec.Answered() {
				// The latest record of a sample wins, as at assembly.
				rec.CacheKey = l.Key
				rec.KeepScores(keep)
				out.answers[l.Index] = &rec
			}
			if cacheOn && l.Key != "" && rec.Error == "" {
				out.cache.m[l.Key] = &cache.Entry{
					Response: provider.Response{
						Text: rec.Output, ToolCalls: rec.ToolCalls,
						Usage: provider.Usage{InputTokens: rec.InputTokens, OutputTokens: rec.OutputTokens},
					},
					LatencyMillis: rec.LatencyMillis,
				}
			}
		}
	}
	return out, nil
}

// answeredStore is the shard's store, giving the engine the earlier run's
// answers to score again (runner.Answered). What a re-scored record carries
// of its answer was paid for by that run: the store does not count it again.
type answeredStore struct {
	*kube.Store
	mu      sync.Mutex
	answers map[int]*results.Record
}

func (s *answeredStore) Answered(_, _ string, index int) *results.Record {
	s.mu.Lock()
	rec := s.answers[index]
	delete(s.answers, index)
	s.mu.Unlock()
	if rec == nil {
		return nil
	}
	s.Carry(index, results.Spent(rec))
	return rec
}
