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
// it was reuses its answer. A shard answers from its own samples' earlier
// records only (as when a pod ran one shard: which samples hit does not depend
// on which shards share a worker), and answers made now are cached for the rest
// of the shard. The pod's shards run one after another: use says whose turn it is.
type recordCache struct {
	mu     sync.Mutex
	shards map[int]map[string]*cache.Entry // by shard index
	m      map[string]*cache.Entry         // the current shard's
}

func newRecordCache() *recordCache {
	return &recordCache{shards: map[int]map[string]*cache.Entry{}, m: map[string]*cache.Entry{}}
}

// use makes shard index's entries the ones answered from, and forgets the
// shard before (it is finished).
func (c *recordCache) use(index int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = c.shards[index]
	delete(c.shards, index)
	if c.m == nil {
		c.m = map[string]*cache.Entry{}
	}
}

// put adds an earlier answer of shard index.
func (c *recordCache) put(index int, key string, e *cache.Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shards[index] == nil {
		c.shards[index] = map[string]*cache.Entry{}
	}
	c.shards[index][key] = e
}

// len counts the earlier answers of every shard not yet used.
func (c *recordCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.shards {
		n += len(m)
	}
	return n
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
	cache *recordCache
	// answers are by shard index, then sample position.
	answers map[int]answers
	// unread are the earlier records in the results store that could not
	// be read (the store down): their samples are asked again.
	unread []error
}

// answers are earlier answers to score again, by sample position.
type answers map[int]*results.Record

// loadEarlier reads, from the sources the controller listed for this run,
// what it reuses for the samples of the pod's shards: each source once, for
// every shard of the pod.
func loadEarlier(ctx context.Context, c client.Client, ev *v1alpha1.Evaluation, run string, shards []cluster.Shard) (*earlier, error) {
	out := &earlier{cache: newRecordCache(), answers: map[int]answers{}}
	if len(shards) == 0 {
		return out, nil
	}
	model := shards[0].Model
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
	scorers := cluster.ScorerHashes(&ev.Spec) // the spec's, once for every source
	for _, src := range sources {
		// The pod's shards of the source's dataset, and the samples they span.
		var mine []cluster.Shard
		for _, sh := range shards {
			if sh.Dataset == src.Dataset {
				mine = append(mine, sh)
			}
		}
		if src.Model != model || len(mine) == 0 || (!cacheOn && !src.Answers) {
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
			if lines, err = kube.ReadStoredSource(ctx, storeHTTP, urls, &src, mine); err != nil {
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
		keep := cluster.KeptScorers(scorers, &cm)
		for _, l := range lines {
			sh := cluster.ShardOf(mine, l.Index)
			if sh < 0 {
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
				if out.answers[sh] == nil {
					out.answers[sh] = answers{}
				}
				out.answers[sh][l.Index] = &rec
			}
			if cacheOn && l.Key != "" && rec.Error == "" {
				out.cache.put(sh, l.Key, &cache.Entry{
					Response: provider.Response{
						Text: rec.Output, ToolCalls: rec.ToolCalls,
						Usage: provider.Usage{InputTokens: rec.InputTokens, OutputTokens: rec.OutputTokens},
					},
					LatencyMillis: rec.LatencyMillis,
				})
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
	answers answers
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
