package controllers

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// TestSharedKeyMetrics: an endpoint's limits, use and callers from its
// status, its shares by Evaluation from its budget, and its quota's.
func TestSharedKeyMetrics(t *testing.T) {
	ep := &v1alpha1.ModelEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "evals", Name: "team"}}
	ep.Spec.QuotaRef = &v1alpha1.QuotaReference{Name: "org"}
	ep.Status = v1alpha1.ModelEndpointStatus{Evaluations: 2, Shards: 3,
		Limits: &v1alpha1.EndpointLimits{RequestsPerMinute: 600, MaxInFlight: 8},
		Usage:  &v1alpha1.EndpointUsage{RequestsPerMinute: 540, InputTokensPerMinute: 9000, ThrottledPerMinute: 2}}
	budget := cluster.NewEndpointBudgetConfigMap(ep)
	grant := func(rpm int64) cluster.Grant {
		return cluster.Grant{Share: ratelimit.Limits{RequestsPerMinute: rpm, MaxInFlight: 2}}
	}
	if err := cluster.SetBudget(budget.Annotations, &cluster.Budget{Version: 4, Models: map[string]*cluster.ModelBudget{"team": {
		Limits: ratelimit.Limits{RequestsPerMinute: 600, MaxInFlight: 8},
		Grants: map[string]cluster.Grant{"nightly/r1/gpt/0/gpt": grant(200), "nightly/r1/gpt/1/gpt": grant(200), "adhoc/r9/gpt/0/gpt": grant(200)},
	}}}); err != nil {
		t.Fatal(err)
	}
	other := budget.DeepCopy() // another endpoint's budget in the namespace: not this one's
	other.Name, other.Labels[cluster.LabelEndpoint] = cluster.EndpointBudgetName("solo"), "solo"
	quota := &v1alpha1.ModelQuota{ObjectMeta: metav1.ObjectMeta{Name: "org"}}
	quota.Spec.Limits = v1alpha1.EndpointLimits{RequestsPerMinute: 1000}
	quota.Status.Usage = &v1alpha1.EndpointUsage{RequestsPerMinute: 700, OutputTokensPerMinute: 50}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(ep, budget, other, quota).
		WithStatusSubresource(&v1alpha1.ModelEndpoint{}, &v1alpha1.ModelQuota{}).Build()
	// The fake client keeps status only through its subresource.
	ctx := t.Context()
	for _, o := range []client.Object{ep, quota} {
		want := o.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		switch w := want.(type) {
		case *v1alpha1.ModelEndpoint:
			o.(*v1alpha1.ModelEndpoint).Status = w.Status
		case *v1alpha1.ModelQuota:
			o.(*v1alpha1.ModelQuota).Status = w.Status
		}
		if err := c.Status().Update(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	m := &endpointMetrics{}
	var r client.Reader = c
	m.reader.Store(&r)
	want := `
# HELP proctor_endpoint_callers The Evaluations and the runner pods (kind) calling through a ModelEndpoint now.
# TYPE proctor_endpoint_callers gauge
proctor_endpoint_callers{endpoint="team",kind="evaluations",namespace="evals"} 2
proctor_endpoint_callers{endpoint="team",kind="shards",namespace="evals"} 3
# HELP proctor_endpoint_limit A ModelEndpoint's limit in force (its own, or its part of its ModelQuota), by dimension (requests_per_minute, input_tokens_per_minute, output_tokens_per_minute, max_in_flight).
# TYPE proctor_endpoint_limit gauge
proctor_endpoint_limit{dimension="max_in_flight",endpoint="team",namespace="evals",quota="org"} 8
proctor_endpoint_limit{dimension="requests_per_minute",endpoint="team",namespace="evals",quota="org"} 600
# HELP proctor_endpoint_share What an Evaluation's runner pods hold of a ModelEndpoint's limits, by dimension.
# TYPE proctor_endpoint_share gauge
proctor_endpoint_share{dimension="max_in_flight",endpoint="team",evaluation="adhoc",namespace="evals"} 2
proctor_endpoint_share{dimension="max_in_flight",endpoint="team",evaluation="nightly",namespace="evals"} 4
proctor_endpoint_share{dimension="requests_per_minute",endpoint="team",evaluation="adhoc",namespace="evals"} 200
proctor_endpoint_share{dimension="requests_per_minute",endpoint="team",evaluation="nightly",namespace="evals"} 400
# HELP proctor_endpoint_usage_per_minute What went through a ModelEndpoint over the last minute, as its runner pods counted it, by dimension (requests, input_tokens, output_tokens, throttled: 429 answers).
# TYPE proctor_endpoint_usage_per_minute gauge
proctor_endpoint_usage_per_minute{dimension="input_tokens",endpoint="team",namespace="evals",quota="org"} 9000
proctor_endpoint_usage_per_minute{dimension="output_tokens",endpoint="team",namespace="evals",quota="org"} 0
proctor_endpoint_usage_per_minute{dimension="requests",endpoint="team",namespace="evals",quota="org"} 540
proctor_endpoint_usage_per_minute{dimension="throttled",endpoint="team",namespace="evals",quota="org"} 2
# HELP proctor_quota_limit A ModelQuota's limit (spec.limits), by dimension.
# TYPE proctor_quota_limit gauge
proctor_quota_limit{dimension="requests_per_minute",quota="org"} 1000
# HELP proctor_quota_usage_per_minute What went through a ModelQuota's endpoints over the last minute, by dimension (requests, input_tokens, output_tokens, throttled).
# TYPE proctor_quota_usage_per_minute gauge
proctor_quota_usage_per_minute{dimension="input_tokens",quota="org"} 0
proctor_quota_usage_per_minute{dimension="output_tokens",quota="org"} 50
proctor_quota_usage_per_minute{dimension="requests",quota="org"} 700
proctor_quota_usage_per_minute{dimension="throttled",quota="org"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
