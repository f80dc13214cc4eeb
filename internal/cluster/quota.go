package cluster

import (
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// A ModelQuota's limits are divided among the ModelEndpoints (of any allowed
// namespace) that name it, one level above an endpoint's own division and with
// the same protocol: the quota controller writes the division into the
// ModelQuota's annotation AnnotationBudget (a Budget with one entry, the
// quota's name, whose grants are keyed by QuotaUserKey), and each endpoint's
// controller divides its part among its shards (DivideEndpointInQuota),
// recording which version of the quota's division it applied (Budget.Quota).
// An endpoint acknowledges that version only once its own budget accounts no
// more use than that part (Fits: every lowered grant of its shards
// acknowledged), so a part taken from one endpoint is given to another only
// when the first one's runner pods have slowed down.

// QuotaUserKey names an endpoint in its quota's division.
func QuotaUserKey(namespace, endpoint string) string { return namespace + "/" + endpoint }

// QuotaUser is an endpoint naming a quota.
type QuotaUser struct {
	// Key is QuotaUserKey: its namespace, a slash, its name.
	Key string
	// Weight is its namespace's weight in the quota, which its namespace's
	// endpoints share: making more endpoints never buys a namespace more.
	Weight int64
	// Cap is the endpoint's own limits (0: none).
	Cap ratelimit.Limits
	// Active: runner pods call through it now. An endpoint that is not active
	// gets no part, but stays in the division while its budget shows use or
	// the division Keeps it.
	Active bool
}

// DivideQuota computes the next division of quota (limits lim) among users:
// active users get max-min fair parts by weight within their caps, the others
// nothing; acked maps keys to the version each endpoint acknowledged.
func DivideQuota(prev *Budget, quota string, lim ratelimit.Limits, users []QuotaUser, acked map[string]int64) (*Budget, bool) {
	if prev == nil {
		prev = &Budget{}
	}
	users = slices.Clone(users)
	slices.SortFunc(users, func(a, b QuotaUser) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	users = slices.CompactFunc(users, func(a, b QuotaUser) bool { return a.Key == b.Key })
	var active []QuotaUser
	keys := make([]string, len(users))
	for i, u := range users {
		keys[i] = u.Key
		if u.Active {
			active = append(active, u)
		}
	}
	// Parts by namespace first (its weight, within what its endpoints' caps
	// allow together), then equally among the namespace's endpoints (each
	// within its cap): the weight is the namespace's, however many endpoints
	// it made.
	var namespaces []string
	members := map[string][]QuotaUser{}
	for _, u := range active {
		ns := quotaNamespace(u.Key)
		if members[ns] == nil {
			namespaces = append(namespaces, ns)
		}
		members[ns] = append(members[ns], u)
	}
	fair := map[string]dimVec{}
	limit := dims(lim)
	weights := make([]int64, len(namespaces))
	for i, ns := range namespaces {
		for _, u := range members[ns] {
			weights[i] = max(weights[i], u.Weight)
		}
	}
	for d := range limit {
		caps := make([]int64, len(namespaces))
		for i, ns := range namespaces {
			for _, u := range members[ns] {
				c := dims(u.Cap)[d]
				if c <= 0 {
					caps[i] = 0 // one endpoint without a cap: none for the namespace
					break
				}
				caps[i] += c
			}
		}
		for i, part := range ratelimit.WaterFill(limit[d], weights, caps) {
			ms := members[namespaces[i]]
			mcaps := make([]int64, len(ms))
			for j, u := range ms {
				mcaps[j] = dims(u.Cap)[d]
			}
			for j, share := range ratelimit.WaterFill(part, make([]int64, len(ms)), mcaps) {
				f := fair[ms[j].Key]
				f[d] = share
				fair[ms[j].Key] = f
			}
		}
	}
	next := &Budget{Version: prev.Version + 1, Models: map[string]*ModelBudget{}}
	old := prev.Models[quota]
	if old == nil {
		old = &ModelBudget{}
	}
	mb, changed := divideFair(old, lim, keys, fair, acked, next.Version, nil)
	next.Models[quota] = mb
	if !changed && prev.Version != 0 {
		return prev, false
	}
	return next, true
}

// quotaNamespace is the namespace of a QuotaUserKey.
func quotaNamespace(key string) string {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return key
	}
	return ns
}

// QuotaLimits is an endpoint's limits in force from its part of a quota
// (Lookup's share of a budget whose limits are quota) and its own limits
// (own; 0: none): the lesser in each dimension. held: the quota limits a
// dimension in which the endpoint has nothing yet.
func QuotaLimits(quota, part, own ratelimit.Limits) (lim ratelimit.Limits, held bool) {
	q, p, o := dims(quota), dims(part), dims(own)
	var out dimVec
	for d := range out {
		switch {
		case q[d] > 0 && p[d] <= 0:
			return ratelimit.Limits{}, true
		case q[d] > 0 && o[d] > 0:
			out[d] = min(p[d], o[d])
		case q[d] > 0:
			out[d] = p[d]
		default:
			out[d] = o[d]
		}
	}
	return undims(out), false
}

// Fits reports whether an endpoint's budget accounts no more use than its
// limits in every limited dimension (nothing at all while held): the grants
// it lowered have all been acknowledged.
func (b *Budget) Fits(endpoint string) bool {
	mb := b.Models[endpoint]
	if mb == nil {
		return true
	}
	var use dimVec
	for _, g := range mb.Grants {
		u := dims(g.Use())
		for d := range use {
			use[d] += u[d]
		}
	}
	lim := dims(mb.Limits)
	for d := range use {
		if b.Held && use[d] > 0 {
			return false
		}
		if lim[d] > 0 && use[d] > lim[d] {
			return false
		}
	}
	return true
}

// Keeps reports whether a quota's division must keep key (an endpoint with no
// runner pods now, whose budget accounts no use) as a user: until the endpoint
// has acknowledged (acked) a part of nothing, its controller may still grant
// its shards the part it had, which the quota must go on counting.
func (b *Budget) Keeps(quota, key string, acked int64) bool {
	mb := b.Models[quota]
	if mb == nil {
		return false
	}
	g, ok := mb.Grants[key]
	return ok && (!g.Share.IsZero() || acked < g.Since)
}

// InUse reports whether an endpoint's budget accounts any use.
func (b *Budget) InUse(endpoint string) bool {
	mb := b.Models[endpoint]
	if mb == nil {
		return false
	}
	for _, g := range mb.Grants {
		if !g.Use().IsZero() {
			return true
		}
	}
	return false
}
