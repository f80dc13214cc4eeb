package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// A ModelEndpoint's limits are divided among every runner pod, of every
// Evaluation of its namespace, that calls a model through it. The endpoint
// controller writes the division into the endpoint's budget ConfigMap
// (EndpointBudgetName), a Budget with one entry (the endpoint's name) whose
// grants are keyed by EndpointUserKey; runner pods read it as they read their
// Evaluation's budget, and acknowledge what they applied in their head
// (ShardProgress.Endpoints). The protocol is Budget's, with two additions:
//
//   - Shares are weighed twice (DivideGroups): first among the models calling
//     through the endpoint (a Group each: an Evaluation's model, weighed by its
//     endpointRef.weight and capped by its own rateLimit), then equally among
//     the shards calling that model.
//   - An acknowledgement names the budget ConfigMap's UID. A ModelEndpoint that
//     is deleted takes its budget with it (owner reference), and runner pods
//     stop calling its models as soon as they find it gone; when the endpoint
//     is back, its new budget grants nothing until every shard calling through
//     it has acknowledged that budget, so no shard still spending an old grant
//     is left out of the count.

// EndpointBudgetName is a ModelEndpoint's budget ConfigMap.
func EndpointBudgetName(endpoint string) string {
	return ChildName(MaxName, "proctor-endpoint", endpoint, "budget")
}

// EndpointUserKey names, in an endpoint's budget, the share of one shard (of
// Evaluation eval's run) for calls to model, which the shard may call as its
// own model or as a judge.
func EndpointUserKey(eval, run string, s Shard, model string) string {
	return strings.Join([]string{eval, run, s.Key(), model}, "/")
}

// EndpointAck is what a shard acknowledged of an endpoint's budget.
type EndpointAck struct {
	// UID is the budget ConfigMap's.
	UID string `json:"uid"`
	// Version is the newest version the shard applied.
	Version int64 `json:"version"`
}

// Usage is what a shard sent through an endpoint over the last minute.
type Usage struct {
	Requests     int64 `json:"requests,omitempty"`
	InputTokens  int64 `json:"inputTokens,omitempty"`
	OutputTokens int64 `json:"outputTokens,omitempty"`
	// Throttled counts the 429 answers.
	Throttled int64 `json:"throttled,omitempty"`
}

// Add adds u's counts to t.
func (t *Usage) Add(u Usage) {
	t.Requests += u.Requests
	t.InputTokens += u.InputTokens
	t.OutputTokens += u.OutputTokens
	t.Throttled += u.Throttled
}

// Group is one model calling through an endpoint: the shards that call it share
// the group's part of the endpoint's limits equally. Its part is weighed
// against the other groups' by Weight (0 counts as 1) and bounded by Cap (0 in
// a dimension: no bound).
type Group struct {
	// Name orders the groups, so that the units a division leaves over go to
	// the same ones every time.
	Name   string
	Weight int64
	Cap    ratelimit.Limits
	Keys   []string
}

// DivideGroups computes the next budget of endpoint (limits lim) from the
// previous one: each group's part is its max-min fair share by weight within
// its cap (WaterFill), divided equally among its keys, granted with Budget's
// protocol (lowered at once, raised from what is left). acked maps keys to the
// version each last acknowledged of this budget.
func DivideGroups(prev *Budget, endpoint string, lim ratelimit.Limits, groups []Group, acked map[string]int64) (*Budget, bool) {
	return divideGroups(prev, endpoint, lim, groups, acked, false, nil)
}

// divideGroups is DivideGroups; held gives every key a share of nothing and
// holds every call, and quota records which division of a ModelQuota lim
// came from.
func divideGroups(prev *Budget, endpoint string, lim ratelimit.Limits, groups []Group, acked map[string]int64, held bool, quota *QuotaApplied) (*Budget, bool) {
	if prev == nil {
		prev = &Budget{}
	}
	next := &Budget{Version: prev.Version + 1, Models: map[string]*ModelBudget{}, Held: held, Quota: quota}
	// Version 0 is a budget not divided yet, which runners wait for; the first
	// division is written even when there is nothing to divide (no limits).
	changed := prev.Version == 0 || prev.Held != held || !ptrEqual(prev.Quota, quota)
	if !lim.IsZero() {
		old := prev.Models[endpoint]
		if old == nil {
			old = &ModelBudget{}
		}
		keys, fair := groupShares(lim, groups)
		if held {
			fair = map[string]dimVec{}
		}
		mb, c := divideFair(old, lim, keys, fair, acked, next.Version, nil)
		next.Models[endpoint] = mb
		changed = changed || c
	}
	for name := range prev.Models {
		if _, ok := next.Models[name]; !ok {
			changed = true // the limits were removed
		}
	}
	if !changed {
		return prev, false
	}
	return next, true
}

// DivideEndpoint is DivideGroups for the budget whose ConfigMap has UID uid,
// given what each shard acknowledged (acks by key). While some shard calling
// through the endpoint last acknowledged another budget (the endpoint was
// deleted and made again), it may still be spending that budget's grant, which
// this one cannot count: nothing changes until it has read this one.
func DivideEndpoint(prev *Budget, uid, endpoint string, lim ratelimit.Limits, groups []Group, acks map[string]EndpointAck) (*Budget, bool) {
	return DivideEndpointInQuota(prev, uid, endpoint, lim, groups, acks, false, nil)
}

// DivideEndpointInQuota is DivideEndpoint for an endpoint whose limits lim
// are its part of a ModelQuota's division quota; held when it has no part
// (yet), which holds every call.
func DivideEndpointInQuota(prev *Budget, uid, endpoint string, lim ratelimit.Limits, groups []Group, acks map[string]EndpointAck, held bool, quota *QuotaApplied) (*Budget, bool) {
	acked := map[string]int64{}
	for _, g := range groups {
		for _, k := range g.Keys {
			a, ok := acks[k]
			if !ok {
				continue
			}
			if a.UID != uid {
				return prev, false
			}
			acked[k] = a.Version
		}
	}
	return divideGroups(prev, endpoint, lim, groups, acked, held, quota)
}

func ptrEqual[T comparable](a, b *T) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// groupShares is each key's fair share in each dimension: the groups' parts by
// weight within caps, each divided equally among the group's keys. Keys are
// returned sorted; a key in two groups counts once, in the first.
func groupShares(lim ratelimit.Limits, groups []Group) ([]string, map[string]dimVec) {
	groups = slices.Clone(groups)
	slices.SortStableFunc(groups, func(a, b Group) int { return strings.Compare(a.Name, b.Name) })
	seen := map[string]bool{}
	var live []Group
	for _, g := range groups {
		var keys []string
		for _, k := range g.Keys {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			slices.Sort(keys)
			live = append(live, Group{Name: g.Name, Weight: g.Weight, Cap: g.Cap, Keys: keys})
		}
	}
	weights := make([]int64, len(live))
	for i, g := range live {
		weights[i] = g.Weight
	}
	fair := map[string]dimVec{}
	limit := dims(lim)
	for d := range limit {
		caps := make([]int64, len(live))
		for i, g := range live {
			caps[i] = dims(g.Cap)[d]
		}
		parts := ratelimit.WaterFill(limit[d], weights, caps)
		for i, g := range live {
			each := ratelimit.WaterFill(parts[i], make([]int64, len(g.Keys)), make([]int64, len(g.Keys)))
			for j, k := range g.Keys {
				f := fair[k]
				f[d] = each[j]
				fair[k] = f
			}
		}
	}
	keys := make([]string, 0, len(fair))
	for k := range fair {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, fair
}

// NewEndpointBudgetConfigMap is an endpoint's budget ConfigMap, holding an empty
// budget, controlled by the endpoint.
func NewEndpointBudgetConfigMap(ep *v1alpha1.ModelEndpoint) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = ep.Namespace, EndpointBudgetName(ep.Name)
	cm.Labels = map[string]string{LabelManagedBy: ManagedBy, LabelComponent: ComponentBudget, LabelEndpoint: LabelValue(ep.Name)}
	b, _ := json.Marshal(&Budget{})
	cm.Annotations = map[string]string{AnnotationBudget: string(b)}
	cm.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ep, v1alpha1.GroupVersion.WithKind("ModelEndpoint"))}
	return cm
}

// ErrEndpointGone is returned by kube.ReadEndpointBudget when the endpoint, or its
// budget, is not there: its models must not be called.
var ErrEndpointGone = fmt.Errorf("the ModelEndpoint's budget is gone")
