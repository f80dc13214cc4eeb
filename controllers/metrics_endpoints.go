package controllers

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// The shared keys' metrics are read at scrape time from what the manager
// holds (its cache of ModelEndpoints, ModelQuotas and the endpoints' budget
// ConfigMaps): their status and budgets are the truth, so no series goes
// stale when an object goes. Labels are the objects' names, bounded by the
// objects that exist: an endpoint's namespace and name, a quota's name, an
// Evaluation holding a share.
var (
	endpointLimitDesc = prometheus.NewDesc("proctor_endpoint_limit",
		"A ModelEndpoint's limit in force (its own, or its part of its ModelQuota), by dimension (requests_per_minute, input_tokens_per_minute, output_tokens_per_minute, max_in_flight).",
		[]string{"namespace", "endpoint", "quota", "dimension"}, nil)
	endpointUsageDesc = prometheus.NewDesc("proctor_endpoint_usage_per_minute",
		"What went through a ModelEndpoint over the last minute, as its runner pods counted it, by dimension (requests, input_tokens, output_tokens, throttled: 429 answers).",
		[]string{"namespace", "endpoint", "quota", "dimension"}, nil)
	endpointShareDesc = prometheus.NewDesc("proctor_endpoint_share",
		"What an Evaluation's runner pods hold of a ModelEndpoint's limits, by dimension.",
		[]string{"namespace", "endpoint", "evaluation", "dimension"}, nil)
	endpointCallersDesc = prometheus.NewDesc("proctor_endpoint_callers",
		"The Evaluations and the runner pods (kind) calling through a ModelEndpoint now.",
		[]string{"namespace", "endpoint", "kind"}, nil)
	quotaLimitDesc = prometheus.NewDesc("proctor_quota_limit",
		"A ModelQuota's limit (spec.limits), by dimension.",
		[]string{"quota", "dimension"}, nil)
	quotaUsageDesc = prometheus.NewDesc("proctor_quota_usage_per_minute",
		"What went through a ModelQuota's endpoints over the last minute, by dimension (requests, input_tokens, output_tokens, throttled).",
		[]string{"quota", "dimension"}, nil)
)

// endpointMetrics reads them through the manager's client, once the
// manager has set it (SetupWithManager of ModelEndpoint's reconciler).
type endpointMetrics struct {
	reader atomic.Pointer[client.Reader]
}

var sharedKeyMetrics = &endpointMetrics{}

func init() {
	metrics.Registry.MustRegister(sharedKeyMetrics)
}

func (m *endpointMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{endpointLimitDesc, endpointUsageDesc, endpointShareDesc, endpointCallersDesc, quotaLimitDesc, quotaUsageDesc} {
		ch <- d
	}
}

func (m *endpointMetrics) Collect(ch chan<- prometheus.Metric) {
	r := m.reader.Load()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var eps v1alpha1.ModelEndpointList
	if err := (*r).List(ctx, &eps); err == nil {
		for i := range eps.Items {
			collectEndpoint(ctx, *r, &eps.Items[i], ch)
		}
	}
	var qs v1alpha1.ModelQuotaList
	if err := (*r).List(ctx, &qs); err == nil {
		for i := range qs.Items {
			q := &qs.Items[i]
			limits(ch, quotaLimitDesc, limitsOf(q.Spec.Limits), q.Name)
			usage(ch, quotaUsageDesc, q.Status.Usage, q.Name)
		}
	}
}

func collectEndpoint(ctx context.Context, r client.Reader, ep *v1alpha1.ModelEndpoint, ch chan<- prometheus.Metric) {
	quota := ""
	if ep.Spec.QuotaRef != nil {
		quota = ep.Spec.QuotaRef.Name
	}
	if l := ep.Status.Limits; l != nil {
		limits(ch, endpointLimitDesc, limitsOf(*l), ep.Namespace, ep.Name, quota)
	}
	usage(ch, endpointUsageDesc, ep.Status.Usage, ep.Namespace, ep.Name, quota)
	ch <- prometheus.MustNewConstMetric(endpointCallersDesc, prometheus.GaugeValue, float64(ep.Status.Evaluations), ep.Namespace, ep.Name, "evaluations")
	ch <- prometheus.MustNewConstMetric(endpointCallersDesc, prometheus.GaugeValue, float64(ep.Status.Shards), ep.Namespace, ep.Name, "shards")
	// The shares, by Evaluation: grants are by shard (EndpointUserKey:
	// EVALUATION/RUN/MODEL/INDEX/CALLER).
	cms, err := listConfigMaps(ctx, r, client.InNamespace(ep.Namespace), client.MatchingLabels{
		cluster.LabelComponent: cluster.ComponentBudget, cluster.LabelEndpoint: cluster.LabelValue(ep.Name)})
	if err != nil {
		return
	}
	shares := map[string]ratelimit.Limits{}
	for i := range cms {
		if cms[i].Name != cluster.EndpointBudgetName(ep.Name) {
			continue
		}
		b, err := cluster.ParseBudget(cms[i].Annotations)
		if err != nil || b == nil {
			continue
		}
		for _, mb := range b.Models {
			for key, g := range mb.Grants {
				eval, _, _ := strings.Cut(key, "/")
				s := shares[eval]
				s.RequestsPerMinute += g.Share.RequestsPerMinute
				s.InputTokensPerMinute += g.Share.InputTokensPerMinute
				s.OutputTokensPerMinute += g.Share.OutputTokensPerMinute
				s.MaxInFlight += g.Share.MaxInFlight
				shares[eval] = s
			}
		}
	}
	for eval, s := range shares {
		limits(ch, endpointShareDesc, s, ep.Namespace, ep.Name, eval)
	}
}

func limitsOf(l v1alpha1.EndpointLimits) ratelimit.Limits {
	return ratelimit.Limits{RequestsPerMinute: l.RequestsPerMinute, InputTokensPerMinute: l.InputTokensPerMinute,
		OutputTokensPerMinute: l.OutputTokensPerMinute, MaxInFlight: l.MaxInFlight}
}

// limits sends l's dimensions that are limited (not 0), labelled labels
// then the dimension.
func limits(ch chan<- prometheus.Metric, d *prometheus.Desc, l ratelimit.Limits, labels ...string) {
	for _, dim := range []struct {
		name string
		v    int64
	}{{"requests_per_minute", l.RequestsPerMinute}, {"input_tokens_per_minute", l.InputTokensPerMinute},
		{"output_tokens_per_minute", l.OutputTokensPerMinute}, {"max_in_flight", l.MaxInFlight}} {
		if dim.v > 0 {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(dim.v), append(labels, dim.name)...)
		}
	}
}

// usage sends u's dimensions (all, 0 included: nothing went through).
func usage(ch chan<- prometheus.Metric, d *prometheus.Desc, u *v1alpha1.EndpointUsage, labels ...string) {
	if u == nil {
		u = &v1alpha1.EndpointUsage{}
	}
	for _, dim := range []struct {
		name string
		v    int64
	}{{"requests", u.RequestsPerMinute}, {"input_tokens", u.InputTokensPerMinute}, {"output_tokens", u.OutputTokensPerMinute},
		{"throttled", u.ThrottledPerMinute}} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(dim.v), append(labels, dim.name)...)
	}
}
