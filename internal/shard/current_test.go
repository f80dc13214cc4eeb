package shard

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr/testr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// TestCurrentEvaluation: a runner reads the API server's cached copy of its
// Evaluation first, and etcd only when that copy is not its run's (it may be
// behind) or when asked for a fresh read; only etcd's copy says a run is
// obsolete.
func TestCurrentEvaluation(t *testing.T) {
	mk := func(samples int) *v1alpha1.Evaluation {
		ev := testutil.MakeEvaluation("arith", "ns").InlineDataset("d", samples).OpenAIModel("m", "http://llm/v1").
			Scorer(v1alpha1.ScorerExactMatch).Obj()
		ev.UID = "uid-1"
		return ev
	}
	run := func(ev *v1alpha1.Evaluation) string {
		ev = ev.DeepCopy()
		v1alpha1.SetDefaults(&ev.Spec)
		return cluster.RunID(ev)
	}
	older, current := mk(3), mk(4)
	for _, tc := range []struct {
		name         string
		cached, etcd *v1alpha1.Evaluation
		fresh        bool
		wantCached   int
		wantEtcd     int
		wantObsolete bool
	}{
		{name: "the cached copy is the run's", cached: current, etcd: current, wantCached: 1},
		{name: "the cached copy is behind", cached: older, etcd: current, wantCached: 1, wantEtcd: 1},
		{name: "the cache does not have it yet", etcd: current, wantCached: 1, wantEtcd: 1},
		{name: "a fresh read", cached: current, etcd: current, fresh: true, wantEtcd: 1},
		// Changed or deleted since the cached copy, which is still the
		// run's: a pod starting now may begin (as one that read just before
		// the change would), and learns the run is obsolete when its shard's
		// head goes, from a fresh read.
		{name: "the Evaluation changed since the cached copy", cached: current, etcd: older, wantCached: 1},
		{name: "the Evaluation changed since, a fresh read", cached: current, etcd: older, fresh: true, wantEtcd: 1, wantObsolete: true},
		{name: "the Evaluation was deleted since, a fresh read", cached: current, fresh: true, wantEtcd: 1, wantObsolete: true},
		{name: "the cached copy is behind and the Evaluation changed", cached: older, etcd: mk(5), wantCached: 1, wantEtcd: 1, wantObsolete: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(testScheme(t))
			if tc.etcd != nil {
				b = b.WithObjects(tc.etcd.DeepCopy())
			}
			var cachedReads, etcdReads int
			c := b.WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					o := &client.GetOptions{}
					o.ApplyOptions(opts)
					if o.Raw == nil || o.Raw.ResourceVersion != "0" {
						etcdReads++
						return c.Get(ctx, key, obj, opts...)
					}
					cachedReads++
					if tc.cached == nil {
						return apierrors.NewNotFound(schema.GroupResource{Group: "proctor.dev", Resource: "evaluations"}, key.Name)
					}
					tc.cached.DeepCopyInto(obj.(*v1alpha1.Evaluation))
					return nil
				},
			}).Build()
			o := Options{Namespace: "ns", Evaluation: "arith", Run: run(current), Log: testr.New(t)}
			o.defaults()
			ev, _, err := currentEvaluation(context.Background(), c, o, tc.fresh)
			switch {
			case tc.wantObsolete && !errors.Is(err, kube.ErrObsolete):
				t.Errorf("err %v, want the run obsolete", err)
			case !tc.wantObsolete && err != nil:
				t.Errorf("err %v", err)
			case !tc.wantObsolete && len(ev.Spec.Datasets[0].Source.Inline) != 4:
				t.Errorf("read a spec of %d samples, want the run's, 4", len(ev.Spec.Datasets[0].Source.Inline))
			}
			if cachedReads != tc.wantCached || etcdReads != tc.wantEtcd {
				t.Errorf("%d cached and %d etcd reads, want %d and %d", cachedReads, etcdReads, tc.wantCached, tc.wantEtcd)
			}
		})
	}
}
