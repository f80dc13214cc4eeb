package shard

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// watchBudgets sends on nudge (without blocking: one pending nudge is enough)
// whenever one of the named ConfigMaps of namespace changes, until ctx ends.
//
// The budgets are still read on a timer; a watch makes a change reach the
// runner within the API server's latency instead of at the next read. It
// matters where shares move: a shard that joins is granted its share only once
// the shards already running have acknowledged their lowered ones (so no
// grant is counted twice), and a ModelQuota's division passes through two
// such steps (the quota's among endpoints, then each endpoint's among
// shards). Read every 2 s, each acknowledgement took up to 2 s: a new
// namespace's first call came 4.7 s after its runner pod started, on the
// local cluster. The runner's Role allows watching these ConfigMaps by name
// only.
func watchBudgets(ctx context.Context, c client.WithWatch, clk clock.Clock, namespace string, names []string, nudge chan<- struct{}, onError func(name string, err error)) {
	for _, name := range names {
		go watchConfigMap(ctx, c, clk, namespace, name, nudge, onError)
	}
}

// watchConfigMap is watchBudgets for one ConfigMap. A watch the server ends
// (it times them out after minutes) is made again at once; one that cannot be
// made, ends on an error or ends at once is tried again after a pause that
// grows, the timer's reads going on meanwhile.
func watchConfigMap(ctx context.Context, c client.WithWatch, clk clock.Clock, namespace, name string, nudge chan<- struct{}, onError func(name string, err error)) {
	const first, most = time.Second, time.Minute
	pause := first
	for ctx.Err() == nil {
		start := clk.Now()
		w, err := c.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(namespace), client.MatchingFields{"metadata.name": name})
		if err == nil {
			err = passOn(ctx, w, nudge)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && clk.Since(start) >= first:
			pause = first // it served a while
			continue
		case err != nil:
			onError(name, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(pause):
		}
		pause = min(2*pause, most)
	}
}

// passOn passes w's events on as nudges until it ends, or ctx does; the
// error is an error event's.
func passOn(ctx context.Context, w watch.Interface, nudge chan<- struct{}) error {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			if ev.Type == watch.Error {
				return apierrors.FromObject(ev.Object)
			}
			select {
			case nudge <- struct{}{}:
			default:
			}
		}
	}
}
