package cluster

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// endpointRunner is a shard calling through an endpoint: the budget (and its
// ConfigMap's UID) it last read, if any. A runner that finds the budget gone
// stops at once (read = nil).
type endpointRunner struct {
	read *Budget
	uid  string
}

// using is what the runner may use in dimension d.
func (r *endpointRunner) using(endpoint, key string, d int) int64 {
	if r.read == nil || r.read.Version == 0 {
		return 0 // gone, or not divided yet
	}
	share, limited, paused := r.read.Lookup(endpoint, key)
	if !limited || paused {
		return 0
	}
	return dims(share)[d]
}

// TestDivideEndpointNeverOverCommits walks Evaluations joining and leaving an
// endpoint with their weights and caps, their shards starting, finishing and
// restarting, runners reading late and in any order, the limit and weights
// edited, the controller restarting (it keeps nothing but the document) and
// the endpoint deleted and made again: what runners use never sums above the
// limit, and once everyone has caught up each model has its weighted share.
func TestDivideEndpointNeverOverCommits(t *testing.T) {
	// Requests per minute, and calls in flight (small numbers, fewer than
	// the shards at times).
	for _, d := range []int{0, 3} {
		t.Run(fmt.Sprintf("dimension %d", d), func(t *testing.T) { divideEndpointNeverOverCommits(t, d) })
	}
}

func divideEndpointNeverOverCommits(t *testing.T, d int) {
	const ep = "team-key"
	// newLimit is a limit in dimension d; scale of its caps.
	newLimit := func(rng *rand.Rand) int64 { return 50 + rng.Int64N(2000) }
	scale := int64(500)
	if d == 3 {
		newLimit = func(rng *rand.Rand) int64 { return 1 + rng.Int64N(12) }
		scale = 6
	}
	limitOf := func(v int64) ratelimit.Limits {
		var x dimVec
		x[d] = v
		return undims(x)
	}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 23))
		lim := limitOf(newLimit(rng))
		budget, uid, gen := &Budget{}, "uid-0", 0
		type group struct {
			weight, cap int64
			shards      map[string]*endpointRunner
		}
		groups := map[string]*group{}
		acks := map[string]EndpointAck{}
		nextEval, nextShard := 0, 0
		groupsOf := func() []Group {
			var out []Group
			for name, g := range groups {
				var keys []string
				for k := range g.shards {
					keys = append(keys, k)
				}
				out = append(out, Group{Name: name, Weight: g.weight, Cap: limitOf(g.cap), Keys: keys})
			}
			return out
		}
		for step := range 400 {
			switch rng.IntN(9) {
			case 0: // an Evaluation's model joins, with a weight and maybe a cap
				name := fmt.Sprintf("ev%d/m", nextEval)
				nextEval++
				g := &group{weight: 1 + rng.Int64N(4), shards: map[string]*endpointRunner{}}
				if rng.IntN(3) == 0 {
					g.cap = 1 + rng.Int64N(scale)
				}
				groups[name] = g
			case 1: // an Evaluation finishes: its shards stop
				for name, g := range groups {
					for k := range g.shards {
						delete(acks, k)
					}
					delete(groups, name)
					break
				}
			case 2: // a shard starts, or restarts under the same key (a new pod)
				for name, g := range groups {
					k := fmt.Sprintf("%s/%d", name, nextShard%3)
					nextShard++
					if _, ok := g.shards[k]; !ok {
						g.shards[k] = &endpointRunner{}
					}
					break
				}
			case 3: // a shard finishes
				for _, g := range groups {
					for k := range g.shards {
						delete(g.shards, k)
						delete(acks, k)
						break
					}
					break
				}
			case 4: // the user edits the limit or a weight
				if rng.IntN(2) == 0 {
					lim = limitOf(newLimit(rng))
				} else {
					for _, g := range groups {
						g.weight = 1 + rng.Int64N(4)
						break
					}
				}
			case 5: // the endpoint is deleted and made again: a new, empty budget
				if rng.IntN(4) == 0 {
					gen++
					budget, uid = &Budget{}, fmt.Sprintf("uid-%d", gen)
					for _, g := range groups {
						for _, r := range g.shards {
							if rng.IntN(2) == 0 {
								r.read, r.uid = nil, "" // it saw the budget gone
							}
						}
					}
				}
			default: // some runners read the newest budget
				for _, g := range groups {
					for _, r := range g.shards {
						if rng.IntN(2) == 0 {
							r.read, r.uid = budget, uid
						}
					}
				}
			}
			for _, g := range groups {
				for k, r := range g.shards {
					if r.read != nil {
						acks[k] = EndpointAck{UID: r.uid, Version: r.read.Version}
					}
				}
			}
			budget, _ = DivideEndpoint(budget, uid, ep, lim, groupsOf(), acks)

			// Runners still on a deleted endpoint's budget use at most what it
			// granted them; while any is, the new budget grants nothing.
			var sum, onOld int64
			old := false
			for _, g := range groups {
				for k, r := range g.shards {
					if r.read != nil && r.uid != uid {
						old = true
						onOld += r.using(ep, k, d)
						continue
					}
					sum += r.using(ep, k, d)
				}
			}
			if old && sum > 0 {
				t.Fatalf("seed %d step %d: the new budget grants %d rpm while shards may still spend the old one's", seed, step, sum)
			}
			if sum > dims(lim)[d] && !recentlyLowered(budget, ep) {
				t.Fatalf("seed %d step %d: runners use %d, over the limit %d", seed, step, sum, dims(lim)[d])
			}
			if sum > highestLimit(budget, ep, lim, d) {
				t.Fatalf("seed %d step %d: runners use %d rpm, over any limit in force", seed, step, sum)
			}
		}
		// Everyone catches up: each group's part is WaterFill's by weight within caps.
		for range 5 {
			for _, g := range groups {
				for k, r := range g.shards {
					r.read, r.uid = budget, uid
					acks[k] = EndpointAck{UID: uid, Version: budget.Version}
				}
			}
			budget, _ = DivideEndpoint(budget, uid, ep, lim, groupsOf(), acks)
		}
		var names []string
		var weights, caps []int64
		for _, name := range slices.Sorted(maps.Keys(groups)) {
			if g := groups[name]; len(g.shards) > 0 {
				names = append(names, name)
				weights, caps = append(weights, g.weight), append(caps, g.cap)
			}
		}
		want := ratelimit.WaterFill(dims(lim)[d], weights, caps)
		for i, name := range names {
			var got int64
			for k := range groups[name].shards {
				share, _, _ := budget.Lookup(ep, k)
				got += dims(share)[d]
			}
			if got != want[i] {
				for k, g := range budget.Models[ep].Grants {
					t.Logf("%s %+v", k, g)
				}
				t.Logf("lim %v weights %v caps %v want %v names %v", lim, weights, caps, want, names)
				t.Fatalf("seed %d: after catching up %s has %d rpm, want %d", seed, name, got, want[i])
			}
		}
	}
}

// recentlyLowered reports whether the limit in the document was lowered and
// some runner may not have applied it yet: a runner still on the old, higher
// limit may then be above the new one (never above the old: highestLimit).
func recentlyLowered(b *Budget, ep string) bool {
	mb := b.Models[ep]
	return mb != nil && docAwaitingAck(mb)
}

// highestLimit bounds what runners may use: the limit now, or, while lowered
// grants await acknowledgement, what the document still counts for them.
func highestLimit(b *Budget, ep string, lim ratelimit.Limits, d int) int64 {
	mb := b.Models[ep]
	if mb == nil {
		return dims(lim)[d]
	}
	var counted int64
	for _, g := range mb.Grants {
		counted += dims(g.Use())[d]
	}
	return max(dims(lim)[d], counted)
}

func TestGroupShares(t *testing.T) {
	lim := ratelimit.Limits{RequestsPerMinute: 600, OutputTokensPerMinute: 90}
	keys, fair := groupShares(lim, []Group{
		{Weight: 2, Keys: []string{"a/0", "a/1"}},
		{Weight: 1, Keys: []string{"b/0", "b/1", "b/2", "b/3"}},
		{Weight: 1, Cap: ratelimit.Limits{RequestsPerMinute: 50}, Keys: []string{"c/0"}},
		{Weight: 5}, // no shard running: no part
	})
	want := map[string]dimVec{
		// 600 rpm: c is capped at 50; a gets 2/3 of 550 (367, the remainder's unit), b 183.
		"a/0": {0 + 184, 0, 23}, "a/1": {0 + 183, 0, 22},
		"b/0": {46, 0, 6}, "b/1": {46, 0, 6}, "b/2": {46, 0, 6}, "b/3": {45, 0, 5},
		"c/0": {50, 0, 22},
	}
	if diff := cmp.Diff(want, fair); diff != "" {
		t.Errorf("shares (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a/0", "a/1", "b/0", "b/1", "b/2", "b/3", "c/0"}, keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

func TestDivideEndpointWaitsForOldBudgetsReaders(t *testing.T) {
	lim := ratelimit.Limits{RequestsPerMinute: 100}
	groups := []Group{{Keys: []string{"a"}}, {Keys: []string{"b"}}}
	// "a" acknowledged the budget of an endpoint since deleted and made again.
	acks := map[string]EndpointAck{"a": {UID: "old", Version: 40}}
	b, changed := DivideEndpoint(&Budget{}, "new", "e", lim, groups, acks)
	if changed || len(b.Models) != 0 {
		t.Fatalf("granted %v while a shard may still spend the old budget's grant", b.Models)
	}
	acks["a"] = EndpointAck{UID: "new", Version: 0}
	b, changed = DivideEndpoint(b, "new", "e", lim, groups, acks)
	if !changed {
		t.Fatal("nothing granted once every shard has read the new budget")
	}
	for _, k := range []string{"a", "b"} {
		if share, _, paused := b.Lookup("e", k); paused || share.RequestsPerMinute != 50 {
			t.Errorf("%s: share %v paused %v, want 50 rpm", k, share, paused)
		}
	}
}
