package shard

import (
	"maps"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

func TestShareIn(t *testing.T) {
	rpm := func(n int64) ratelimit.Limits { return ratelimit.Limits{RequestsPerMinute: n} }
	divided := &cluster.Budget{Version: 3, Models: map[string]*cluster.ModelBudget{
		"m": {Limits: rpm(100), Grants: map[string]cluster.Grant{"a": {Share: rpm(60)}, "b": {Share: rpm(0)}}},
	}}
	for _, tc := range []struct {
		name  string
		b     *cluster.Budget
		entry string
		key   string
		want  share
	}{
		{"not divided yet: wait", &cluster.Budget{}, "m", "a", share{paused: true}},
		{"a grant", divided, "m", "a", share{limits: rpm(60)}},
		{"a grant of nothing: wait", divided, "m", "b", share{limits: rpm(0), paused: true}},
		{"no grant yet: wait", divided, "m", "c", share{paused: true}},
		{"no limit (any more)", divided, "other", "a", share{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := shareIn(tc.b, tc.entry, tc.key)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(share{})); diff != "" {
				t.Errorf("shareIn (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCombine(t *testing.T) {
	l := func(r, in, out int64) ratelimit.Limits {
		return ratelimit.Limits{RequestsPerMinute: r, InputTokensPerMinute: in, OutputTokensPerMinute: out}
	}
	for _, tc := range []struct {
		name string
		a, b share
		want share
	}{
		{"the lesser in each dimension, 0 is none", share{limits: l(100, 0, 50)}, share{limits: l(60, 9000, 0)}, share{limits: l(60, 9000, 50)}},
		{"no limit either side", share{}, share{}, share{}},
		{"paused if either is", share{limits: l(100, 0, 0)}, share{paused: true}, share{limits: l(100, 0, 0), paused: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, combine(tc.a, tc.b), cmp.AllowUnexported(share{})); diff != "" {
				t.Errorf("combine (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, combine(tc.b, tc.a), cmp.AllowUnexported(share{})); diff != "" {
				t.Errorf("combine is not symmetric (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInForce(t *testing.T) {
	places := func(n int64) ratelimit.Limits { return ratelimit.Limits{RequestsPerMinute: 60, MaxInFlight: n} }
	pooled := map[string]share{"model": {limits: places(3)}, "judge": {limits: places(3)}, "held": {paused: true}}
	for _, tc := range []struct {
		name    string
		callers []string
		n       int64
		want    bool
	}{
		{"within the pool", []string{"model", "judge"}, 3, true},
		{"over it: not yet", []string{"model", "judge"}, 4, false},
		{"a held caller beside others: the pool", []string{"model", "held"}, 2, true},
		{"all held with calls in flight: not yet", []string{"held"}, 1, false},
		{"all held with none", []string{"held"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := inForce(pooled, tc.callers, tc.n); got != tc.want {
				t.Errorf("inForce(%v, %d) = %v, want %v", tc.callers, tc.n, got, tc.want)
			}
		})
	}
}

// TestPoolPlaces: a pod's callers of one endpoint pool their places in
// flight, so that a model whose grant has none may use its judge's; a caller
// held for another reason (no grant, no requests) stays held.
func TestPoolPlaces(t *testing.T) {
	places := func(rpm, n int64) ratelimit.Limits { return ratelimit.Limits{RequestsPerMinute: rpm, MaxInFlight: n} }
	shares := map[string]share{
		"model":   {limits: places(60, 0), paused: true, placesOnly: true},
		"judge":   {limits: places(30, 1)},
		"new":     {paused: true}, // no grant yet
		"unlimit": {limits: ratelimit.Limits{RequestsPerMinute: 10}},
	}
	got := poolPlaces(shares, []string{"model", "judge", "new"})
	want := map[string]share{
		"model": {limits: places(60, 1)},
		"judge": {limits: places(30, 1)},
		"new":   {paused: true},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(share{})); diff != "" {
		t.Errorf("poolPlaces (-want +got):\n%s", diff)
	}
	// Without places in flight nothing changes.
	if got := poolPlaces(shares, []string{"unlimit"}); got["unlimit"] != shares["unlimit"] {
		t.Errorf("poolPlaces changed a share without places: %+v", got["unlimit"])
	}
}

func TestShareInPlacesOnly(t *testing.T) {
	lim := ratelimit.Limits{RequestsPerMinute: 100, MaxInFlight: 1}
	b := &cluster.Budget{Version: 2, Models: map[string]*cluster.ModelBudget{"ep": {Limits: lim, Grants: map[string]cluster.Grant{
		"a": {Share: ratelimit.Limits{RequestsPerMinute: 50, MaxInFlight: 1}},
		"b": {Share: ratelimit.Limits{RequestsPerMinute: 50}},
		"c": {Share: ratelimit.Limits{}},
	}}}}
	for key, want := range map[string]share{
		"a": {limits: ratelimit.Limits{RequestsPerMinute: 50, MaxInFlight: 1}},
		"b": {limits: ratelimit.Limits{RequestsPerMinute: 50}, paused: true, placesOnly: true},
		"c": {paused: true},
		"d": {paused: true}, // no grant
	} {
		if diff := cmp.Diff(want, shareIn(b, "ep", key), cmp.AllowUnexported(share{})); diff != "" {
			t.Errorf("shareIn(%s) (-want +got):\n%s", key, diff)
		}
	}
}

// TestFollowLimits: the models a shard takes shares for are those the
// divided budget has an entry for, as limits are added or removed mid-run;
// until the first division, those limited at the start wait for it.
func TestFollowLimits(t *testing.T) {
	sh := cluster.Shard{Model: "m", Dataset: "d", Index: 0, Start: 0, End: 5}
	rpm := ratelimit.Limits{RequestsPerMinute: 60}
	budget := func(version int64, models ...string) *cluster.Budget {
		b := &cluster.Budget{Version: version, Models: map[string]*cluster.ModelBudget{}}
		for _, m := range models {
			b.Models[m] = &cluster.ModelBudget{Limits: rpm, Grants: map[string]cluster.Grant{sh.Key(): {Share: rpm}}}
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		limited []string
		b       *cluster.Budget
		want    []string
	}{
		{"not divided yet: those limited at the start wait", []string{"m"}, budget(0), []string{"m"}},
		{"not divided yet, none limited", nil, budget(0), nil},
		{"a limit added to the model", nil, budget(1, "m"), []string{"m"}},
		{"a limit added to the judge", []string{"m"}, budget(4, "m", "judge"), []string{"judge", "m"}},
		{"the model's limit removed", []string{"m"}, budget(5), nil},
		{"the judge's limit removed", []string{"m", "judge"}, budget(5, "m"), []string{"m"}},
		{"another model's limit: not this pod's", nil, budget(2, "other"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &budgetFollower{shard: sh, models: []string{"m", "judge"}, limited: map[string]bool{},
				own: map[string]share{}, granted: map[string]bool{}, log: logr.Discard()}
			for _, m := range tc.limited {
				b.limited[m], b.own[m], b.granted[m] = true, share{limits: rpm}, true
			}
			b.followLimits(tc.b)
			got := slices.Sorted(maps.Keys(b.limited))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("limited (-want +got):\n%s", diff)
			}
			for _, m := range []string{"m", "judge"} {
				if _, owned := b.own[m]; !b.limited[m] && (owned || b.granted[m]) {
					t.Errorf("model %s, not limited, keeps a share (%v) or a grant (%v)", m, owned, b.granted[m])
				}
			}
		})
	}
}

// TestUsageOnceAStream: of a stream's open shards, only the newest (the one
// whose follower applies its shares) reports the engine's usage, which the
// controller sums over running shards: reported by both, it counted twice.
func TestUsageOnceAStream(t *testing.T) {
	eng, err := runner.New(&runner.Plan{Models: []*runner.Model{{Name: "m"}}}, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, newest := range []bool{true, false} {
		b := &budgetFollower{eng: eng, limited: map[string]bool{"m": true}, applies: func() bool { return newest }}
		if _, reported := b.usage()["m"]; reported != newest {
			t.Errorf("newest %v: usage reported %v, want %v", newest, reported, newest)
		}
	}
	b := &budgetFollower{eng: eng, limited: map[string]bool{"m": true}}
	if _, reported := b.usage()["m"]; !reported {
		t.Errorf("a shard of its own engine reported no usage")
	}
}
