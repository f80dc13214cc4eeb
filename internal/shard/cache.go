package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
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

// loadRecordCache reads, from the sources the controller listed for this run,
// the answers for the shard's own samples.
func loadRecordCache(ctx context.Context, c client.Client, ev *v1alpha1.Evaluation, run string, sh cluster.Shard) (*recordCache, error) {
	rc := &recordCache{m: map[string]*cache.Entry{}}
	var list corev1.ConfigMap
	err := cluster.GetConfigMap(ctx, c, ev, cluster.CacheSourcesName(ev.Name, run), &list)
	if apierrors.IsNotFound(err) {
		return rc, nil // the first run: nothing to reuse
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cache sources: %w", err)
	}
	var sources []cluster.CacheSource
	if err := json.Unmarshal([]byte(list.Data[cluster.KeySources]), &sources); err != nil {
		return nil, fmt.Errorf("reading the cache sources: %w", err)
	}
	for _, src := range sources {
		if src.Model != sh.Model || src.Dataset != sh.Dataset {
			continue
		}
		var cm corev1.ConfigMap
		err := cluster.GetConfigMap(ctx, c, ev, src.Name, &cm)
		var fe *cluster.ForeignError
		switch {
		case apierrors.IsNotFound(err), errors.As(err, &fe):
			continue // gone, or not this Evaluation's answers: never reuse them
		case err != nil:
			return nil, fmt.Errorf("reading cached answers from %s: %w", src.Name, err)
		}
		lines, err := cluster.ReadRecords(&cm)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			if l.Key == "" || l.Index < sh.Start || l.Index >= sh.End {
				continue
			}
			var rec results.Record
			if json.Unmarshal(l.Record, &rec) != nil || rec.Error != "" || rec.OutputTruncated {
				continue // no answer, or not the whole of it
			}
			rc.m[l.Key] = &cache.Entry{
				Response: provider.Response{
					Text: rec.Output, ToolCalls: rec.ToolCalls,
					Usage: provider.Usage{InputTokens: rec.InputTokens, OutputTokens: rec.OutputTokens},
				},
				LatencyMillis: rec.LatencyMillis,
			}
		}
	}
	return rc, nil
}
