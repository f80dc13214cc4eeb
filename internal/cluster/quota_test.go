package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// TestQuotaNeverOverCommits walks three endpoints (of three namespaces)
// sharing one quota: shards start and finish, runners read their endpoint's
// budget late, each endpoint's controller reads the quota's division late and
// the quota's controller reads the endpoints' budgets late (caches lag, never
// go back). What all runners use never sums above the quota, and once everyone
// has caught up, each endpoint has its weighted part within its own cap.
func TestQuotaNeverOverCommits(t *testing.T) {
	const quota = "account"
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 31))
		lim := ratelimit.Limits{RequestsPerMinute: 50 + rng.Int64N(2000)}
		type endpoint struct {
			name      string
			weight    int64
			cap       ratelimit.Limits
			doc       *Budget // its budget, as written
			quotaSeen *Budget // the quota's division, as its controller's cache holds it
			docSeen   *Budget // its budget, as the quota controller's cache holds it
			shards    map[string]*endpointRunner
			acks      map[string]EndpointAck
			nextShard int
		}
		var eps []*endpoint
		for i := range 3 {
			e := &endpoint{name: fmt.Sprintf("ns%d/key", i), weight: 1 + rng.Int64N(3), doc: &Budget{}, quotaSeen: &Budget{}, docSeen: &Budget{},
				shards: map[string]*endpointRunner{}, acks: map[string]EndpointAck{}}
			if rng.IntN(3) == 0 {
				e.cap.RequestsPerMinute = 1 + rng.Int64N(600)
			}
			eps = append(eps, e)
		}
		division := &Budget{}
		reconcileEndpoint := func(e *endpoint) {
			if rng.IntN(2) == 0 {
				e.quotaSeen = division
			}
			part, _, paused := e.quotaSeen.Lookup(quota, e.name)
			in, held := QuotaLimits(lim, part, e.cap)
			if paused {
				in, held = lim, true
			}
			var keys []string
			for k := range e.shards {
				keys = append(keys, k)
			}
			e.doc, _ = DivideEndpointInQuota(e.doc, "uid", e.name, in, []Group{{Name: "m", Keys: keys}}, e.acks, held,
				&QuotaApplied{UID: "q", Version: e.quotaSeen.Version})
		}
		reconcileQuota := func() {
			var users []QuotaUser
			acked := map[string]int64{}
			for _, e := range eps {
				if rng.IntN(2) == 0 {
					e.docSeen = e.doc
				}
				if q := e.docSeen.Quota; q != nil && e.docSeen.Fits(e.name) {
					acked[e.name] = q.Version
				}
				if len(e.shards) == 0 && !e.docSeen.InUse(e.name) && !division.Keeps(quota, e.name, acked[e.name]) {
					continue
				}
				users = append(users, QuotaUser{Key: e.name, Weight: e.weight, Cap: e.cap, Active: len(e.shards) > 0})
			}
			division, _ = DivideQuota(division, quota, lim, users, acked)
		}
		for step := range 500 {
			e := eps[rng.IntN(len(eps))]
			switch rng.IntN(8) {
			case 0: // a shard starts
				e.shards[fmt.Sprintf("%s/%d", e.name, e.nextShard)] = &endpointRunner{}
				e.nextShard++
			case 1: // a shard finishes
				for k := range e.shards {
					delete(e.shards, k)
					delete(e.acks, k)
					break
				}
			case 2, 3:
				reconcileEndpoint(e)
			case 4:
				reconcileQuota()
			default: // runners read their endpoint's budget
				for _, r := range e.shards {
					if rng.IntN(2) == 0 {
						r.read, r.uid = e.doc, "uid"
					}
				}
			}
			for _, e := range eps {
				for k, r := range e.shards {
					if r.read != nil {
						e.acks[k] = EndpointAck{UID: "uid", Version: r.read.Version}
					}
				}
			}
			var sum int64
			for _, e := range eps {
				for k, r := range e.shards {
					sum += r.using(e.name, k, 0)
				}
			}
			if sum > lim.RequestsPerMinute {
				t.Fatalf("seed %d step %d: runners use %d rpm, over the quota %d", seed, step, sum, lim.RequestsPerMinute)
			}
		}
		// Everyone catches up.
		for range 8 {
			for _, e := range eps {
				e.quotaSeen, e.docSeen = division, e.doc
				reconcileEndpoint(e)
				for k, r := range e.shards {
					r.read, r.uid = e.doc, "uid"
					e.acks[k] = EndpointAck{UID: "uid", Version: e.doc.Version}
				}
				reconcileEndpoint(e)
				e.docSeen = e.doc
			}
			reconcileQuota()
		}
		var weights, caps []int64
		var active []*endpoint
		for _, e := range eps {
			if len(e.shards) > 0 {
				active = append(active, e)
				weights, caps = append(weights, e.weight), append(caps, e.cap.RequestsPerMinute)
			}
		}
		want := ratelimit.WaterFill(lim.RequestsPerMinute, weights, caps)
		for i, e := range active {
			var got int64
			for k := range e.shards {
				share, _, _ := e.doc.Lookup(e.name, k)
				got += share.RequestsPerMinute
			}
			if got != want[i] {
				t.Fatalf("seed %d: after catching up %s's shards have %d rpm, want %d (%v)", seed, e.name, got, want[i], want)
			}
		}
	}
}

func TestQuotaLimits(t *testing.T) {
	l := func(r, in, out int64) ratelimit.Limits {
		return ratelimit.Limits{RequestsPerMinute: r, InputTokensPerMinute: in, OutputTokensPerMinute: out}
	}
	for _, tc := range []struct {
		name             string
		quota, part, own ratelimit.Limits
		want             ratelimit.Limits
		held             bool
	}{
		{"its part", l(600, 0, 0), l(200, 0, 0), l(0, 0, 0), l(200, 0, 0), false},
		{"its own limit is less", l(600, 0, 0), l(200, 0, 0), l(100, 0, 0), l(100, 0, 0), false},
		{"its own limit where the quota has none", l(600, 0, 0), l(200, 0, 0), l(0, 5000, 0), l(200, 5000, 0), false},
		{"nothing yet in a dimension the quota limits", l(600, 9000, 0), l(200, 0, 0), l(0, 0, 0), l(0, 0, 0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, held := QuotaLimits(tc.quota, tc.part, tc.own)
			if diff := cmp.Diff(tc.want, got); diff != "" || held != tc.held {
				t.Errorf("QuotaLimits = %+v held %v, want %+v held %v", got, held, tc.want, tc.held)
			}
		})
	}
}

func TestDivideQuotaKeepsIdleEndpointsUntilTheyStop(t *testing.T) {
	lim := ratelimit.Limits{RequestsPerMinute: 600}
	users := []QuotaUser{{Key: "a/k", Active: true}, {Key: "b/k", Active: true}}
	div, _ := DivideQuota(nil, "q", lim, users, nil)
	acked := map[string]int64{"a/k": div.Version, "b/k": div.Version}
	// b's shards finish, but its budget still accounts use: b keeps its grant,
	// lowered to nothing, counted until b acknowledges; a gets nothing more yet.
	users[1].Active = false
	div, _ = DivideQuota(div, "q", lim, users, acked)
	if a, _, _ := div.Lookup("q", "a/k"); a.RequestsPerMinute != 300 {
		t.Errorf("a has %d rpm before b acknowledged; want its old 300", a.RequestsPerMinute)
	}
	acked["b/k"] = div.Version
	div, _ = DivideQuota(div, "q", lim, users, acked)
	if a, _, _ := div.Lookup("q", "a/k"); a.RequestsPerMinute != 600 {
		t.Errorf("a has %d rpm once b acknowledged; want 600", a.RequestsPerMinute)
	}
	if keys := slices.Sorted(func(yield func(string) bool) {
		for k := range div.Models["q"].Grants {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(keys, []string{"a/k", "b/k"}) {
		t.Errorf("keys %v", keys)
	}
}

// TestDivideQuotaWeighsNamespaces: a quota's weights are per namespace, so a
// namespace that makes more endpoints gets no more of the quota; its part is
// shared by its endpoints, within their caps, what a cap leaves going to its
// other endpoints and then to the other namespaces.
func TestDivideQuotaWeighsNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		users []QuotaUser
		want  map[string]int64
	}{{
		name:  "three endpoints buy nothing",
		users: []QuotaUser{{Key: "a/x", Weight: 1}, {Key: "a/y", Weight: 1}, {Key: "a/z", Weight: 1}, {Key: "b/x", Weight: 1}},
		want:  map[string]int64{"a/x": 20, "a/y": 20, "a/z": 20, "b/x": 60},
	}, {
		name:  "weights 2:1, two endpoints each",
		users: []QuotaUser{{Key: "a/x", Weight: 2}, {Key: "a/y", Weight: 2}, {Key: "b/x", Weight: 1}, {Key: "b/y", Weight: 1}},
		want:  map[string]int64{"a/x": 40, "a/y": 40, "b/x": 20, "b/y": 20},
	}, {
		name:  "a capped endpoint leaves the rest to its namespace",
		users: []QuotaUser{{Key: "a/x", Weight: 1, Cap: rpm(10)}, {Key: "a/y", Weight: 1}, {Key: "b/x", Weight: 1}},
		want:  map[string]int64{"a/x": 10, "a/y": 50, "b/x": 60},
	}, {
		name:  "a namespace capped in all leaves the rest to the others",
		users: []QuotaUser{{Key: "a/x", Weight: 1, Cap: rpm(10)}, {Key: "a/y", Weight: 1, Cap: rpm(5)}, {Key: "b/x", Weight: 1}},
		want:  map[string]int64{"a/x": 10, "a/y": 5, "b/x": 105},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.users {
				tc.users[i].Active = true
			}
			div, _ := DivideQuota(nil, "q", rpm(120), tc.users, nil)
			got := map[string]int64{}
			for k, g := range div.Models["q"].Grants {
				got[k] = g.Share.RequestsPerMinute
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
		})
	}
}
