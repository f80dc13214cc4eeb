package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/internal/objstore"
)

// Keys of a spec.resultsStore.credentialsSecret.
const (
	storeKeyID     = "AWS_ACCESS_KEY_ID"
	storeKeySecret = "AWS_SECRET_ACCESS_KEY"
)

// openStore resolves, once a pass, the results store the pass's
// Evaluation writes to: its own (spec.resultsStore), else the cluster's
// (Options.ResultsStore), else none (records in ConfigMaps). Its own,
// when its Secret cannot be used, is none, and p.storeMissing says why:
// the references check holds a run back for it, and a run past that check
// waits (ResultsStoreUnavailable) rather than write elsewhere.
func (r *EvaluationReconciler) openStore(ctx context.Context, p *pass) error {
	if p.storeOpened {
		return nil
	}
	spec := p.ev.Spec.ResultsStore
	if spec == nil {
		p.store, p.storeOpened = r.Options.ResultsStore, true
		return nil
	}
	var sec corev1.Secret
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.ev.Namespace, Name: spec.CredentialsSecret}, &sec)
	switch {
	case apierrors.IsNotFound(err):
		p.storeMissing = fmt.Sprintf("Secret %s (spec.resultsStore.credentialsSecret) not found", spec.CredentialsSecret)
	case err != nil:
		return fmt.Errorf("reading Secret %s (spec.resultsStore.credentialsSecret): %w", spec.CredentialsSecret, err)
	case len(sec.Data[storeKeyID]) == 0 || len(sec.Data[storeKeySecret]) == 0:
		p.storeMissing = fmt.Sprintf("Secret %s (spec.resultsStore.credentialsSecret) needs the keys %s and %s", spec.CredentialsSecret, storeKeyID, storeKeySecret)
	default:
		key := storeKey{ns: p.ev.Namespace, secret: sec.Name, version: sec.ResourceVersion, url: spec.URL, endpoint: spec.Endpoint, region: spec.Region}
		if p.store = r.stores.get(key); p.store == nil {
			loc, err := objstore.ParseURL(spec.URL)
			if err != nil {
				p.storeMissing = fmt.Sprintf("spec.resultsStore.url: %v", err)
				break
			}
			p.store, err = objstore.Open(ctx, loc, objstore.Options{Endpoint: spec.Endpoint, Region: spec.Region, PathStyle: spec.Endpoint != "",
				AccessKeyID: string(sec.Data[storeKeyID]), SecretAccessKey: string(sec.Data[storeKeySecret])})
			if err != nil {
				p.storeMissing = fmt.Sprintf("spec.resultsStore: %v", err)
				break
			}
			r.stores.put(key, p.store)
		}
	}
	p.storeOpened = true
	return nil
}

// runStore is the pass's results store (openStore): nil for none, and a
// *storeError for an Evaluation's own that cannot be used.
func (r *EvaluationReconciler) runStore(ctx context.Context, p *pass) (*objstore.Store, error) {
	if err := r.openStore(ctx, p); err != nil {
		return nil, err
	}
	if p.storeMissing != "" {
		return nil, &storeError{errors.New(p.storeMissing)}
	}
	return p.store, nil
}

// storeKey is what an Evaluation's own store is opened from: a new
// resourceVersion of its Secret (rotated keys) opens it again.
type storeKey struct{ ns, secret, version, url, endpoint, region string }

// storeCache keeps the stores Evaluations name, opened once. It is bounded:
// when full, it starts again (opening a store makes no request).
type storeCache struct {
	mu sync.Mutex
	m  map[storeKey]*objstore.Store
}

const maxCachedStores = 256

func (c *storeCache) get(k storeKey) *objstore.Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *storeCache) put(k storeKey, s *objstore.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedStores {
		c.m = map[storeKey]*objstore.Store{}
	}
	c.m[k] = s
}
