package shard

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/internal/cluster"
)

// prefetched is a pod's client that reads, as the pod starts, the
// ConfigMaps its start reads (the plan, the cache sources, its first
// shard's head) at the same time as the Evaluation: one after another they
// were four round trips to an API server busy with the run's starting
// pods, 0.4-0.75 s from a runner's start to its first call. Their names are
// known from the flags alone. A ConfigMap read ahead serves the first Get of
// it, which checks it as it checks what it reads (the owner, the content);
// any later Get reads the API server.
type prefetched struct {
	client.WithWatch
	mu    sync.Mutex
	ahead map[client.ObjectKey]*readAhead
}

type readAhead struct {
	done chan struct{}
	cm   corev1.ConfigMap
	err  error
}

// prefetch starts reading what a worker's start reads (startWorker).
func prefetch(ctx context.Context, c client.WithWatch, o Options) *prefetched {
	return readAheadOf(ctx, c, o.Namespace,
		cluster.PlanName(o.Evaluation, o.Run),
		cluster.CacheSourcesName(o.Evaluation, o.Run),
		// The worker's first shard is the one of its index (cluster.WorkerShards).
		cluster.HeadName(o.Evaluation, o.Run, o.Model, o.Index))
}

// readAheadOf starts reading the ConfigMaps names of namespace.
func readAheadOf(ctx context.Context, c client.WithWatch, namespace string, names ...string) *prefetched {
	p := &prefetched{WithWatch: c, ahead: make(map[client.ObjectKey]*readAhead, len(names))}
	for _, name := range names {
		key := client.ObjectKey{Namespace: namespace, Name: name}
		r := &readAhead{done: make(chan struct{})}
		p.ahead[key] = r
		go func() {
			defer close(r.done)
			r.err = c.Get(ctx, key, &r.cm)
		}()
	}
	return p
}

// Get serves a ConfigMap read ahead (once), else reads.
func (p *prefetched) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if cm, ok := obj.(*corev1.ConfigMap); ok && len(opts) == 0 {
		p.mu.Lock()
		r := p.ahead[key]
		delete(p.ahead, key)
		p.mu.Unlock()
		if r != nil {
			select {
			case <-r.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			if r.err != nil {
				return r.err
			}
			r.cm.DeepCopyInto(cm)
			return nil
		}
	}
	return p.WithWatch.Get(ctx, key, obj, opts...)
}
