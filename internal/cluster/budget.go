package cluster

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// Budget is the content of an Evaluation's budget ConfigMap: for each model with a
// rate limit, the share of it each running shard may use. A model's limits are the
// limits of the whole Evaluation, so the controller divides them among the shards
// that call the model, and re-divides as shards start and finish.
//
// The protocol keeps the sum of what shards actually use within the limit at every
// moment, although runners read the budget only every few seconds:
//   - runners apply the grant of the newest version they read and acknowledge that
//     version (in their head ConfigMap); a runner that has no grant, or has not
//     read the budget for FenceAfter, sends nothing;
//   - the controller lowers grants at once, but counts a lowered grant at its old
//     value until the shard acknowledges the version that lowered it, and raises
//     or creates grants only from what is left.
//
// A new shard therefore waits a few seconds for its grant while the others slow
// down, and a lone last shard ends up with the whole limit.
type Budget struct {
	Version int64                   `json:"version"`
	Models  map[string]*ModelBudget `json:"models,omitempty"`
	// Held holds every call (Lookup says paused): an endpoint that has no part
	// of its ModelQuota (yet).
	Held bool `json:"held,omitempty"`
	// Quota, in an endpoint's budget, is the version of its ModelQuota's
	// division that its limits came from.
	Quota *QuotaApplied `json:"quota,omitempty"`
	// Spend, in an Evaluation's budget with spec.budget, is the shards'
	// allowances of it.
	Spend *SpendBudget `json:"spend,omitempty"`
}

// QuotaApplied names the division of a ModelQuota an endpoint's budget applies.
type QuotaApplied struct {
	UID     string `json:"uid"`
	Version int64  `json:"version"`
}

// ModelBudget is one model's limits and grants, by shard key (Shard.Key).
type ModelBudget struct {
	Limits ratelimit.Limits `json:"limits"`
	Grants map[string]Grant `json:"grants,omitempty"`
}

// Grant is one shard's share.
type Grant struct {
	Share ratelimit.Limits `json:"share"`
	// Since is the version that set Share.
	Since int64 `json:"since"`
	// Previous bounds what the shard may still use until it acknowledges Since.
	Previous ratelimit.Limits `json:"previous"`
	// Acked is the version the shard had acknowledged when this budget was
	// written, so the document alone says what each shard may be using (Use).
	Acked int64 `json:"acked"`
}

// RateWindow is the window a server counts a rate limit over, as the runners'
// limiters count it (a minute and their slack): a shard that stopped keeps its
// share for this long after it was last seen running.
const RateWindow = ratelimit.Period + ratelimit.DefaultSlack

// Use bounds what the shard holding g may be using, as the controller counted it
// when it wrote the budget. The grants of a budget never use more than its limits.
func (g Grant) Use() ratelimit.Limits { return undims(effectiveOf(g, g.Acked)) }

// Lookup is what a runner learns from a budget for one model: whether the model is
// limited, and if so the shard's share, or paused when it has none yet.
func (b *Budget) Lookup(model, key string) (share ratelimit.Limits, limited, paused bool) {
	if b.Held {
		return ratelimit.Limits{}, true, true
	}
	mb := b.Models[model]
	if mb == nil || mb.Limits.IsZero() {
		return ratelimit.Limits{}, false, false
	}
	g, ok := mb.Grants[key]
	if !ok {
		return ratelimit.Limits{}, true, true
	}
	lim, sh := dims(mb.Limits), dims(g.Share)
	for d := range lim {
		if lim[d] > 0 && sh[d] <= 0 {
			return g.Share, true, true
		}
	}
	return g.Share, true, false
}

// Using is what the shard key may be using of model's limits under b (its
// share, or its previous one until it acknowledged the change); zero when it
// holds no share.
func (b *Budget) Using(model, key string) ratelimit.Limits {
	if b == nil || b.Models[model] == nil {
		return ratelimit.Limits{}
	}
	g, ok := b.Models[model].Grants[key]
	if !ok {
		return ratelimit.Limits{}
	}
	return g.Use()
}

// Lingering is the cap of a shard that stopped: used, what it may have been
// using when it last ran (Using), times left, the part of the window its calls
// still count in, rounded up. It shrinks from what the shard ran with, never
// from an earlier lingering cap, which would compound the shrinking.
func Lingering(used ratelimit.Limits, left float64) ratelimit.Limits {
	var capped dimVec
	for d, v := range dims(used) {
		if v > 0 {
			capped[d] = int64(math.Ceil(float64(v) * left))
		}
	}
	return undims(capped)
}

// LingeringBehind is Lingering for a shard that stopped and whose worker has
// begun its next shard, which may use next (its Using, or what it used when
// it last ran if it stopped too). The two never send at once (a worker runs
// its shards in turn), so in any window the next shard's calls come after the
// stopped one's: together at most next's share over the window, plus what the
// stopped shard used beyond it over the part of the window its calls still
// count in. Only that excess lingers: nothing when the next shard runs at the
// same share, which is a worker's usual case.
func LingeringBehind(used, next ratelimit.Limits, left float64) ratelimit.Limits {
	u, n := dims(used), dims(next)
	var beyond dimVec
	for d := range u {
		beyond[d] = max(0, u[d]-n[d])
	}
	return Lingering(undims(beyond), left)
}

// TakeOver is the share the next shard of a worker starts from, taken from
// the grant (share) of the shard it ran before, which stopped (used: what
// that shard may have used when it last ran; left, as for Lingering): the
// most of share whose LingeringBehind leaves the two within share, so the
// budget's account does not grow. A shard that stopped since the last
// division still holds what it ran with, and hands all of it over.
func TakeOver(used, share ratelimit.Limits, left float64) ratelimit.Limits {
	u, g := dims(used), dims(share)
	var start dimVec
	for d := range g {
		if u[d] <= g[d] {
			start[d] = g[d]
			continue
		}
		// s + ceil((u-s)·left) grows with s; the largest s within g.
		fits := func(s int64) bool { return s+int64(math.Ceil(float64(u[d]-s)*left)) <= g[d] }
		s := int64(0)
		if left < 1 {
			s = min(g[d], max(0, int64((float64(g[d])-float64(u[d])*left)/(1-left))))
		}
		for s > 0 && !fits(s) {
			s--
		}
		for s < g[d] && fits(s+1) {
			s++
		}
		if fits(s) {
			start[d] = s
		}
	}
	return undims(start)
}

// Divide computes the next budget from the previous one. limits are the models'
// current limits (unlimited models omitted); users maps each limited model to the
// keys of the running shards that call it, which share its limit equally; acked
// maps shard keys to the budget version each last acknowledged. It reports
// whether anything changed (then the version is incremented).
func Divide(prev *Budget, limits map[string]ratelimit.Limits, users map[string][]string, acked map[string]int64) (*Budget, bool) {
	weighted := make(map[string][]User, len(users))
	for model, keys := range users {
		for _, k := range keys {
			weighted[model] = append(weighted[model], User{Key: k})
		}
	}
	return DivideWeighted(prev, limits, weighted, acked)
}

// User is a shard that calls a limited model, and what its share of the limit
// is weighed by.
type User struct {
	Key string
	// Weight weighs the user's share against the others'; 0 counts as 1.
	Weight int64
	// Cap bounds the user's share in each dimension (0: no bound), such as an
	// Evaluation's own rate limit inside a limit it shares with others. What a
	// cap leaves unused is divided among the others.
	Cap ratelimit.Limits
	// Start is the share it starts from when it has no grant yet: what it
	// takes over from the shard its worker ran before it, which stopped
	// (TakeOver). It goes on at that pace at once, instead of waiting for
	// what the others leave while the shard before it lingers.
	Start ratelimit.Limits
	// Stopped: the shard sends nothing more, and Cap is what its calls may
	// still count in the server's window (Lingering). That is set aside
	// before the others divide the rest: no division takes back calls
	// already sent.
	Stopped bool
}

// DivideWeighted is Divide with each user's share in proportion to its weight,
// within its cap (max-min fair: WaterFill).
func DivideWeighted(prev *Budget, limits map[string]ratelimit.Limits, users map[string][]User, acked map[string]int64) (*Budget, bool) {
	if prev == nil {
		prev = &Budget{}
	}
	next := &Budget{Version: prev.Version + 1, Models: map[string]*ModelBudget{}}
	// Version 0 is a budget not divided yet, which runners wait for; the first
	// division is written even when no model has a limit (any more).
	changed := prev.Version == 0
	for model, lim := range limits {
		if lim.IsZero() {
			continue
		}
		old := prev.Models[model]
		if old == nil {
			old = &ModelBudget{}
		}
		mb, c := divideModel(old, lim, users[model], acked, next.Version)
		next.Models[model] = mb
		changed = changed || c
	}
	for model := range prev.Models {
		if _, ok := next.Models[model]; !ok {
			changed = true // a model's limit was removed
		}
	}
	if !changed {
		return prev, false
	}
	return next, true
}

func divideModel(old *ModelBudget, lim ratelimit.Limits, users []User, acked map[string]int64, version int64) (*ModelBudget, bool) {
	byKey := map[string]User{}
	var keys []string
	var starts map[string]ratelimit.Limits
	for _, u := range users {
		if _, dup := byKey[u.Key]; !dup {
			byKey[u.Key] = u
			keys = append(keys, u.Key)
			if !u.Start.IsZero() {
				if starts == nil {
					starts = map[string]ratelimit.Limits{}
				}
				starts[u.Key] = u.Start
			}
		}
	}
	slices.Sort(keys)
	limit := dims(lim)
	weights := make([]int64, len(keys))
	for i, k := range keys {
		weights[i] = byKey[k].Weight
	}
	fair := make(map[string]dimVec, len(keys))
	for d := range limit {
		// The stopped shards' calls first, then the running ones' shares of
		// what is left.
		left := limit[d]
		var running []int
		var caps []int64
		for i, k := range keys {
			u, f := byKey[k], fair[k]
			if !u.Stopped {
				running = append(running, i)
				caps = append(caps, dims(u.Cap)[d])
				continue
			}
			f[d] = min(dims(u.Cap)[d], left)
			left -= f[d]
			fair[k] = f
		}
		ws := make([]int64, len(running))
		for j, i := range running {
			ws[j] = weights[i]
		}
		for j, share := range ratelimit.WaterFill(left, ws, caps) {
			k := keys[running[j]]
			f := fair[k]
			f[d] = share
			fair[k] = f
		}
	}
	return divideFair(old, lim, keys, fair, acked, version, starts)
}

// divideFair moves the grants of old towards the fair shares of keys (sorted,
// unique): it lowers at once what is above, and raises the rest from what is
// left, counting lowered grants at their old value until acknowledged. A key
// with no grant in old starts from its share in starts (User.Start), which
// the shard it takes over from gave up.
func divideFair(old *ModelBudget, lim ratelimit.Limits, keys []string, fair map[string]dimVec, acked map[string]int64, version int64, starts map[string]ratelimit.Limits) (*ModelBudget, bool) {
	changed := old.Limits != lim || len(old.Grants) != len(keys)

	// What each running shard may be using now; shards no longer running use nothing.
	grants := map[string]Grant{}
	effective := map[string]dimVec{}
	for _, k := range keys {
		g, ok := old.Grants[k]
		if !ok {
			changed = true
			if start, ok := starts[k]; ok {
				g = Grant{Share: start, Since: version, Previous: start}
			}
		}
		if g.Acked < g.Since && acked[k] >= g.Since {
			// A lowered share took effect: rewrite, so the document's own account
			// of use (Grant.Use) drops too.
			changed = true
		}
		grants[k] = g
		effective[k] = effectiveOf(g, acked[k])
	}

	limit := dims(lim)
	desired := func(i int, d int) int64 { return fair[keys[i]][d] }

	// Lower what is above its fair share, at once.
	for i, k := range keys {
		g := grants[k]
		share := dims(g.Share)
		lowered := false
		for d := range share {
			if want := desired(i, d); share[d] > want {
				share[d] = want
				lowered = true
			}
		}
		if lowered {
			grants[k] = Grant{Share: undims(share), Since: version, Previous: undims(effective[k])}
			changed = true
		}
	}

	// Raise the rest from what is left, counting lowered grants at their old value
	// until acknowledged.
	var used dimVec
	for _, k := range keys {
		e := effectiveOf(grants[k], acked[k])
		for d := range used {
			used[d] += e[d]
		}
	}
	for i, k := range keys {
		g := grants[k]
		share := dims(g.Share)
		before := effectiveOf(g, acked[k])
		raised := false
		for d := range share {
			want := desired(i, d)
			if share[d] >= want || limit[d] == 0 {
				continue
			}
			avail := limit[d] - used[d]
			inc := min(want-share[d], avail)
			if inc <= 0 {
				continue
			}
			share[d] += inc
			// The shard's use may grow from before[d] to share[d].
			used[d] += max(0, share[d]-before[d])
			raised = true
		}
		if raised {
			prevUse := before
			if g.Since == version {
				// Lowered in another budget just now: keep what it may still use.
				prevUse = dims(g.Previous)
			}
			grants[k] = Grant{Share: undims(share), Since: version, Previous: undims(prevUse)}
			changed = true
		}
	}
	if changed {
		for _, k := range keys {
			g := grants[k]
			g.Acked = acked[k]
			grants[k] = g
		}
	}
	return &ModelBudget{Limits: lim, Grants: grants}, changed
}

// effectiveOf bounds what a shard holding g may be using, given the newest budget
// version it acknowledged.
func effectiveOf(g Grant, acked int64) dimVec {
	share := dims(g.Share)
	if acked >= g.Since {
		return share
	}
	prev := dims(g.Previous)
	for d := range share {
		share[d] = max(share[d], prev[d])
	}
	return share
}

// dimVec is a budget's dimensions, each divided on its own: requests, input
// and output tokens per minute, and calls in flight.
type dimVec = [4]int64

func dims(l ratelimit.Limits) dimVec {
	return dimVec{l.RequestsPerMinute, l.InputTokensPerMinute, l.OutputTokensPerMinute, l.MaxInFlight}
}

func undims(v dimVec) ratelimit.Limits {
	return ratelimit.Limits{RequestsPerMinute: v[0], InputTokensPerMinute: v[1], OutputTokensPerMinute: v[2], MaxInFlight: v[3]}
}

// NewBudgetConfigMap is an Evaluation's budget ConfigMap as the controller makes
// it, holding an empty budget; the caller sets its owner.
func NewBudgetConfigMap(ev *v1alpha1.Evaluation) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = ev.Namespace, BudgetName(ev.Name)
	cm.Labels = Labels(ev.Name, "", ComponentBudget)
	b, _ := json.Marshal(&Budget{})
	cm.Annotations = map[string]string{AnnotationBudget: string(b)}
	return cm
}

// ParseBudget reads a budget from the budget ConfigMap's annotations; an empty
// budget if it has none yet.
func ParseBudget(annotations map[string]string) (*Budget, error) {
	b := &Budget{}
	v, ok := annotations[AnnotationBudget]
	if !ok {
		return b, nil
	}
	if err := json.Unmarshal([]byte(v), b); err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	return b, nil
}

// SetBudget writes b into the budget ConfigMap's annotations.
func SetBudget(annotations map[string]string, b *Budget) error {
	v, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	annotations[AnnotationBudget] = string(v)
	return nil
}
