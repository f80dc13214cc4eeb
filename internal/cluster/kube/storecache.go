package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/parquetpart"
)

// ReadCacheURLs reads a run's cache URLs Secret; nil if there is none (or
// the runner may not read it yet). One the Evaluation does not control is
// refused.
func ReadCacheURLs(ctx context.Context, c client.Reader, ev *v1alpha1.Evaluation, run string) (*cluster.CacheURLs, error) {
	var sec corev1.Secret
	name := cluster.CacheURLsName(ev.Name, run)
	err := c.Get(ctx, client.ObjectKey{Namespace: ev.Namespace, Name: name}, &sec)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	if err := cluster.Owned("Secret", &sec, ev); err != nil {
		return nil, err
	}
	var u cluster.CacheURLs
	if err := json.Unmarshal(sec.Data[cluster.KeyCacheURLs], &u); err != nil {
		return nil, fmt.Errorf("cache URLs Secret %s: %w", name, err)
	}
	return &u, nil
}

// ReadStoredSource reads the records of a cache source in the results
// store (cluster.CacheSource.Location) that may be of the samples of
// shards (of the source's dataset), through urls, in the order its objects
// are listed; those urls has no URL for are skipped. Each object is read
// once, whichever of the shards it covers.
func ReadStoredSource(ctx context.Context, hc *http.Client, urls *cluster.CacheURLs, src *cluster.CacheSource, shards []cluster.Shard) ([]results.Line, error) {
	var out []results.Line
	for _, o := range src.Objects {
		if !slices.ContainsFunc(shards, func(s cluster.Shard) bool { return o.Covers(s.Start, s.End) }) {
			continue
		}
		u, ok := urls.URLs[src.Location+"/"+o.Key]
		if !ok {
			continue // not granted: those samples are asked again
		}
		b, err := objstore.GetURL(ctx, hc, u)
		if err != nil {
			return nil, fmt.Errorf("reading %s/%s: %w", src.Location, o.Key, err)
		}
		if !o.IsPart() {
			lines, err := cluster.ParseChunk(b)
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", src.Location, o.Key, err)
			}
			out = append(out, lines...)
			continue
		}
		err = parquetpart.Read(bytes.NewReader(b), int64(len(b)), func(l results.Line) error {
			if cluster.ShardOf(shards, l.Index) >= 0 {
				out = append(out, l)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", src.Location, o.Key, err)
		}
	}
	return out, nil
}
