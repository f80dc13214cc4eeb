package pacer

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// CacheResolver resolves buckets from the manager's cache: the Evaluation's
// model, its ModelEndpoint and that endpoint's ModelQuota, as they are now (so
// that an edit of a limit applies to the next call).
type CacheResolver struct {
	Reader client.Reader
}

// Resolve finds the bucket caller's calls go through: the ModelQuota its
// endpoint names (one account's limits), else the endpoint's own, else the
// model's rateLimit (the whole Evaluation's); a bucket with no limits when
// none limits it.
func (c CacheResolver) Resolve(ctx context.Context, namespace, evaluation, caller string) (Bucket, string, error) {
	var ev v1alpha1.Evaluation
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: evaluation}, &ev); err != nil {
		if apierrors.IsNotFound(err) {
			return Bucket{}, "", fmt.Errorf("evaluation %s/%s: %w", namespace, evaluation, ErrUnknown)
		}
		return Bucket{}, "", err
	}
	sa := cluster.RunnerServiceAccount(&ev)
	for _, ec := range apiconv.EndpointCallers(&ev.Spec) {
		if ec.Name != caller {
			continue
		}
		b, err := c.endpointBucket(ctx, namespace, ec.Ref.Name)
		b.Limits.MaxInFlight = 0 // places in flight are the budgets' to divide
		return b, sa, err
	}
	for i := range ev.Spec.Models {
		m := &ev.Spec.Models[i]
		if m.Name != caller {
			continue
		}
		if m.RateLimit == nil {
			return Bucket{}, sa, nil
		}
		return Bucket{Key: fmt.Sprintf("evaluation/%s/%s/%s", namespace, evaluation, m.Name),
			Limits: apiconv.LimitsOf(m.RateLimit), Burst: v1alpha1.BurstOf(m.RateLimit.Burst)}, sa, nil
	}
	return Bucket{}, "", fmt.Errorf("evaluation %s/%s has no model %q: %w", namespace, evaluation, caller, ErrUnknown)
}

// endpointBucket is the bucket of the calls through a ModelEndpoint: its
// quota's when it names one that lists its namespace (runner pods hold their
// calls otherwise), else its own limits'.
func (c CacheResolver) endpointBucket(ctx context.Context, namespace, name string) (Bucket, error) {
	var ep v1alpha1.ModelEndpoint
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &ep); err != nil {
		if apierrors.IsNotFound(err) {
			return Bucket{}, fmt.Errorf("ModelEndpoint %s/%s: %w", namespace, name, ErrUnknown)
		}
		return Bucket{}, err
	}
	if ref := ep.Spec.QuotaRef; ref != nil {
		var q v1alpha1.ModelQuota
		err := c.Reader.Get(ctx, client.ObjectKey{Name: ref.Name}, &q)
		switch {
		case err == nil:
			if _, ok := q.Spec.Admits(namespace); ok {
				return Bucket{Key: "quota/" + q.Name, Limits: apiconv.QuotaLimitsOf(&q), Burst: v1alpha1.BurstOf(q.Spec.Limits.Burst)}, nil
			}
		case !apierrors.IsNotFound(err):
			return Bucket{}, err
		}
	}
	var own v1alpha1.EndpointLimits
	if ep.Spec.Limits != nil {
		own = *ep.Spec.Limits
	}
	return Bucket{Key: fmt.Sprintf("endpoint/%s/%s", namespace, name), Limits: apiconv.EndpointLimitsOf(own), Burst: v1alpha1.BurstOf(own.Burst)}, nil
}
