package cluster

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// runnerSim is a runner: the budget it last read, if any.
type runnerSim struct {
	read *Budget
}

// using is the share the runner applies: that of the newest budget it read.
func (r *runnerSim) using(model, key string) dimVec {
	if r.read == nil {
		return dimVec{}
	}
	share, limited, paused := r.read.Lookup(model, key)
	if !limited || paused {
		return dimVec{}
	}
	return dims(share)
}

func TestDivideNeverOverCommits(t *testing.T) {
	// A randomized walk of shards starting and finishing, runners reading the
	// budget late and in any order, the controller re-dividing, and the user
	// editing the limit: what runners actually use never sums above the limit,
	// and once everyone has caught up, shares are fair and use the whole limit.
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		const model = "m"
		lim := ratelimit.Limits{RequestsPerMinute: 100 + rng.Int64N(1000), InputTokensPerMinute: rng.Int64N(2) * 50000}
		budget := &Budget{}
		// highWater is the highest limit in force since the system last had no
		// lowered grant awaiting acknowledgement.
		highWater := dims(lim)
		runners := map[string]*runnerSim{}
		acked := map[string]int64{}
		next := 0
		for step := range 300 {
			switch rng.IntN(6) {
			case 0: // a shard starts
				k := fmt.Sprintf("%s/%d", model, next)
				next++
				runners[k] = &runnerSim{}
			case 1: // a shard finishes (it stops sending)
				for k := range runners {
					delete(runners, k)
					delete(acked, k)
					break
				}
			case 2: // the user edits the limit
				if rng.IntN(4) == 0 {
					lim.RequestsPerMinute = 1 + rng.Int64N(1000)
				}
			default: // some runners read the newest budget
				for _, r := range runners {
					if rng.IntN(2) == 0 {
						r.read = budget
					}
				}
			}
			for k, r := range runners {
				if r.read != nil {
					acked[k] = r.read.Version
				}
			}
			var users []string
			for k := range runners {
				users = append(users, k)
			}
			budget, _ = Divide(budget, map[string]ratelimit.Limits{model: lim}, map[string][]string{model: users}, acked)

			var sum dimVec
			for k, r := range runners {
				u := r.using(model, k)
				for d := range sum {
					sum[d] += u[d]
				}
			}
			// The document's own account of use is what the controller counted.
			if mb := budget.Models[model]; mb != nil && !docAwaitingAck(mb) {
				var docUse dimVec
				for _, g := range mb.Grants {
					u := dims(g.Use())
					for d := range docUse {
						docUse[d] += u[d]
					}
				}
				for d, v := range docUse {
					if l := dims(mb.Limits)[d]; l > 0 && v > l {
						t.Fatalf("seed %d step %d: the budget document accounts %v, over its limit %v", seed, step, docUse, mb.Limits)
					}
				}
			}
			// After a user lowers the limit, runners still on the old one may be over
			// the new limit until they read: they must still be within the highest
			// limit in force recently, and never above what the controller counted.
			counted := dimVec{}
			for k := range runners {
				if mb := budget.Models[model]; mb != nil {
					e := effectiveOf(mb.Grants[k], acked[k])
					for d := range counted {
						counted[d] += e[d]
					}
				}
			}
			for d, v := range sum {
				if v > counted[d] {
					t.Fatalf("seed %d step %d: runners use %v in dimension %d, more than the controller counts (%v)", seed, step, sum, d, counted)
				}
			}
			cur := dims(lim)
			catching := awaitingAck(budget, model, acked)
			for d := range highWater {
				if catching {
					highWater[d] = max(highWater[d], cur[d])
				} else {
					highWater[d] = cur[d]
				}
				if cur[d] > 0 && counted[d] > highWater[d] {
					t.Fatalf("seed %d step %d: counted use %v over the limit in force %v (now %v)", seed, step, counted, highWater, cur)
				}
			}
		}
	}
}

// docAwaitingAck reports whether, by the budget's own record, a lowered grant
// awaits acknowledgement.
func docAwaitingAck(mb *ModelBudget) bool {
	for _, g := range mb.Grants {
		if g.Acked < g.Since && g.Previous != g.Share {
			return true
		}
	}
	return false
}

// awaitingAck reports whether some grant was lowered and its shard has not yet
// acknowledged it: until then its old share may still be in use.
func awaitingAck(b *Budget, model string, acked map[string]int64) bool {
	for k, g := range b.Models[model].Grants {
		if acked[k] < g.Since && g.Previous != g.Share {
			return true
		}
	}
	return false
}

func TestDivideConvergesToFairShares(t *testing.T) {
	lim := ratelimit.Limits{RequestsPerMinute: 1000}
	limits := map[string]ratelimit.Limits{"m": lim}
	acked := map[string]int64{}
	users := map[string][]string{"m": {"m/0"}}

	// A lone shard gets everything at once.
	b, changed := Divide(nil, limits, users, acked)
	if !changed {
		t.Fatal("first division changed nothing")
	}
	if got, _, paused := b.Lookup("m", "m/0"); paused || got.RequestsPerMinute != 1000 {
		t.Fatalf("lone shard: %+v paused=%v, want all 1000", got, paused)
	}
	acked["m/0"] = b.Version

	// A second shard: the first is lowered, the second waits for the ack.
	users["m"] = []string{"m/0", "m/1"}
	b, _ = Divide(b, limits, users, acked)
	if got, _, _ := b.Lookup("m", "m/0"); got.RequestsPerMinute != 500 {
		t.Errorf("first shard after the second arrived: %d, want 500", got.RequestsPerMinute)
	}
	if _, _, paused := b.Lookup("m", "m/1"); !paused {
		t.Errorf("second shard granted before the first acknowledged its lower share")
	}
	// Re-dividing without acks changes nothing.
	if _, changed := Divide(b, limits, users, acked); changed {
		t.Error("a division without new acks changed the budget")
	}
	acked["m/0"] = b.Version
	b, _ = Divide(b, limits, users, acked)
	if got, _, paused := b.Lookup("m", "m/1"); paused || got.RequestsPerMinute != 500 {
		t.Errorf("second shard after the ack: %+v paused=%v, want 500", got, paused)
	}

	// The first finishes: the second gets everything.
	acked["m/1"] = b.Version
	users["m"] = []string{"m/1"}
	b, _ = Divide(b, limits, users, acked)
	if got, _, _ := b.Lookup("m", "m/1"); got.RequestsPerMinute != 1000 {
		t.Errorf("lone last shard: %d, want 1000", got.RequestsPerMinute)
	}
	if _, ok := b.Models["m"].Grants["m/0"]; ok {
		t.Error("the finished shard kept its grant")
	}
}

func TestDivideRemainderAndSmallLimits(t *testing.T) {
	users := map[string][]string{"m": {"m/0", "m/1", "m/2"}}
	b, _ := Divide(nil, map[string]ratelimit.Limits{"m": {RequestsPerMinute: 10}}, users, nil)
	var got []int64
	for _, k := range users["m"] {
		s, _, _ := b.Lookup("m", k)
		got = append(got, s.RequestsPerMinute)
	}
	if diff := cmp.Diff([]int64{4, 3, 3}, got); diff != "" {
		t.Errorf("shares of 10 among 3 (-want +got):\n%s", diff)
	}
	b, _ = Divide(nil, map[string]ratelimit.Limits{"m": {RequestsPerMinute: 2}}, users, nil)
	_, _, paused := b.Lookup("m", "m/2")
	if !paused {
		t.Error("with 2 rpm among 3 shards, the third should wait")
	}
}

func TestLookupUnlimitedModel(t *testing.T) {
	b := &Budget{Models: map[string]*ModelBudget{}}
	if _, limited, paused := b.Lookup("free", "free/0"); limited || paused {
		t.Errorf("unlimited model: limited=%v paused=%v", limited, paused)
	}
}

// TestDivideWeightedNeverOverCommits is TestDivideNeverOverCommits with weights
// and caps changing under the shards: what runners use never sums above the
// limit, and once all have read the newest budget the shares are WaterFill's.
func TestDivideWeightedNeverOverCommits(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 11))
		const model = "m"
		lim := ratelimit.Limits{RequestsPerMinute: 100 + rng.Int64N(1000)}
		budget := &Budget{}
		runners := map[string]*runnerSim{}
		users := map[string]User{}
		acked := map[string]int64{}
		next := 0
		for step := range 300 {
			switch rng.IntN(6) {
			case 0: // a shard starts, with a weight and maybe a cap
				k := fmt.Sprintf("%s/%d", model, next)
				next++
				runners[k] = &runnerSim{}
				u := User{Key: k, Weight: rng.Int64N(4)}
				if rng.IntN(3) == 0 {
					u.Cap.RequestsPerMinute = 1 + rng.Int64N(300)
				}
				users[k] = u
			case 1: // a shard finishes
				for k := range runners {
					delete(runners, k)
					delete(users, k)
					delete(acked, k)
					break
				}
			case 2: // weights or caps change (an Evaluation joins or leaves an endpoint)
				for k, u := range users {
					u.Weight = rng.Int64N(4)
					users[k] = u
					break
				}
			default:
				for _, r := range runners {
					if rng.IntN(2) == 0 {
						r.read = budget
					}
				}
			}
			for k, r := range runners {
				if r.read != nil {
					acked[k] = r.read.Version
				}
			}
			var us []User
			for _, u := range users {
				us = append(us, u)
			}
			budget, _ = DivideWeighted(budget, map[string]ratelimit.Limits{model: lim}, map[string][]User{model: us}, acked)
			var sum int64
			for k, r := range runners {
				sum += r.using(model, k)[0]
			}
			if sum > lim.RequestsPerMinute {
				t.Fatalf("seed %d step %d: runners use %d rpm, over the limit %d", seed, step, sum, lim.RequestsPerMinute)
			}
		}
		// Everyone catches up: the shares converge to WaterFill's.
		for range 4 {
			for k, r := range runners {
				r.read = budget
				acked[k] = budget.Version
			}
			var us []User
			for _, u := range users {
				us = append(us, u)
			}
			budget, _ = DivideWeighted(budget, map[string]ratelimit.Limits{model: lim}, map[string][]User{model: us}, acked)
		}
		keys := slices.Sorted(maps.Keys(users))
		weights, caps := make([]int64, len(keys)), make([]int64, len(keys))
		for i, k := range keys {
			weights[i], caps[i] = users[k].Weight, users[k].Cap.RequestsPerMinute
		}
		want := ratelimit.WaterFill(lim.RequestsPerMinute, weights, caps)
		for i, k := range keys {
			share, _, _ := budget.Lookup(model, k)
			if share.RequestsPerMinute != want[i] {
				t.Fatalf("seed %d: after catching up %s has %d rpm, want %d (%v)", seed, k, share.RequestsPerMinute, want[i], want)
			}
		}
	}
}

// rpm is a limit of n requests a minute.
func rpm(n int64) ratelimit.Limits { return ratelimit.Limits{RequestsPerMinute: n} }

func TestLingeringBehind(t *testing.T) {
	cases := []struct {
		name       string
		used, next ratelimit.Limits
		left       float64
		want       ratelimit.Limits
	}{
		{"the next shard runs at the same share: nothing lingers", rpm(30), rpm(30), 0.9, ratelimit.Limits{}},
		{"or at more", rpm(30), rpm(45), 0.9, ratelimit.Limits{}},
		{"at less: the excess lingers, shrinking", rpm(30), rpm(10), 0.5, rpm(10)},
		{"rounded up", rpm(30), rpm(10), 0.51, rpm(11)},
		{"no share yet: all of it, as Lingering", rpm(30), ratelimit.Limits{}, 0.5, rpm(15)},
		{"each dimension on its own",
			ratelimit.Limits{RequestsPerMinute: 30, InputTokensPerMinute: 1000}, ratelimit.Limits{RequestsPerMinute: 40, InputTokensPerMinute: 400},
			0.5, ratelimit.Limits{InputTokensPerMinute: 300}},
	}
	for _, tc := range cases {
		if got := LingeringBehind(tc.used, tc.next, tc.left); got != tc.want {
			t.Errorf("%s: LingeringBehind(%+v, %+v, %v) = %+v, want %+v", tc.name, tc.used, tc.next, tc.left, got, tc.want)
		}
	}
}

func TestTakeOver(t *testing.T) {
	cases := []struct {
		name        string
		used, share ratelimit.Limits
		left        float64
		want        ratelimit.Limits
	}{
		{"stopped since the last division: all of it", rpm(30), rpm(30), 0.99, rpm(30)},
		{"a share raised since it was noted: all of it", rpm(30), rpm(40), 0.5, rpm(40)},
		// s + ceil((30-s)·0.67) <= 21: s = 2 (2 + 19), not 3 (3 + 19).
		{"its share shrank while lingering: the part that frees enough", rpm(30), rpm(21), 0.67, rpm(2)},
		{"nothing to take over without growing the account", rpm(30), rpm(20), 0.67, ratelimit.Limits{}},
		{"each dimension on its own",
			ratelimit.Limits{RequestsPerMinute: 30, InputTokensPerMinute: 1000}, ratelimit.Limits{RequestsPerMinute: 30, InputTokensPerMinute: 600},
			0.5, ratelimit.Limits{RequestsPerMinute: 30, InputTokensPerMinute: 200}},
	}
	for _, tc := range cases {
		if got := TakeOver(tc.used, tc.share, tc.left); got != tc.want {
			t.Errorf("%s: TakeOver(%+v, %+v, %v) = %+v, want %+v", tc.name, tc.used, tc.share, tc.left, got, tc.want)
		}
	}
	// Whatever the numbers: what the next shard takes and what the stopped
	// one still lingers with fit in the share it held, and taking one more
	// would not.
	rng := rand.New(rand.NewPCG(3, 5))
	for range 20000 {
		used, share := rng.Int64N(2000), rng.Int64N(2000)
		left := rng.Float64()
		got := TakeOver(rpm(used), rpm(share), left).RequestsPerMinute
		rest := LingeringBehind(rpm(used), rpm(got), left).RequestsPerMinute
		if got < 0 || got > max(share, 0) || got+rest > share && got > 0 {
			t.Fatalf("TakeOver(%d, %d, %v) = %d, lingering %d: over the share", used, share, left, got, rest)
		}
		if more := got + 1; got < share && more+LingeringBehind(rpm(used), rpm(more), left).RequestsPerMinute <= share {
			t.Fatalf("TakeOver(%d, %d, %v) = %d, but %d fits too", used, share, left, got, more)
		}
	}
}

// TestDivideStartsFromATakenOverShare: a shard with no grant yet starts from
// the share it took over (User.Start) at once, counted like any grant; one
// that has a grant keeps it.
func TestDivideStartsFromATakenOverShare(t *testing.T) {
	lim := ratelimit.Limits{RequestsPerMinute: 60}
	limits := map[string]ratelimit.Limits{"m": lim}
	b, _ := Divide(nil, limits, map[string][]string{"m": {"m/0", "m/1"}}, nil)
	acked := map[string]int64{"m/0": b.Version, "m/1": b.Version}
	b, _ = Divide(b, limits, map[string][]string{"m": {"m/0", "m/1"}}, acked)

	// m/0 stopped; m/2, after it on its worker, takes over all of its 30.
	b, changed := DivideWeighted(b, limits, map[string][]User{"m": {{Key: "m/1"}, {Key: "m/2", Start: ratelimit.Limits{RequestsPerMinute: 30}}}}, acked)
	if !changed {
		t.Fatal("the division changed nothing")
	}
	for _, k := range []string{"m/1", "m/2"} {
		if share, _, paused := b.Lookup("m", k); paused || share.RequestsPerMinute != 30 {
			t.Errorf("%s: %+v paused=%v, want 30 at once", k, share, paused)
		}
	}
	if _, ok := b.Models["m"].Grants["m/0"]; ok {
		t.Error("the stopped shard kept its grant")
	}

	// m/2 stops too, and m/3 takes over its 30 while m/4 of a third worker
	// starts: m/3's share is lowered to the fair 20 but counted at 30 until
	// acknowledged, so m/4 waits for what is left.
	b2, _ := DivideWeighted(b, limits, map[string][]User{"m": {{Key: "m/1"}, {Key: "m/3", Start: ratelimit.Limits{RequestsPerMinute: 30}}, {Key: "m/4"}}}, acked)
	var use int64
	for _, g := range b2.Models["m"].Grants {
		use += g.Use().RequestsPerMinute
	}
	share3, _, _ := b2.Lookup("m", "m/3")
	if _, _, paused := b2.Lookup("m", "m/4"); use > 60 || share3.RequestsPerMinute != 20 || b2.Models["m"].Grants["m/3"].Use().RequestsPerMinute != 30 || !paused {
		t.Errorf("grants %+v (use %d); want m/3 at 20, counted at 30 until acknowledged, and m/4 waiting", b2.Models["m"].Grants, use)
	}

	// A shard with a grant keeps it: Start is only where it begins.
	b3, _ := DivideWeighted(b, limits, map[string][]User{"m": {{Key: "m/1"}, {Key: "m/2", Start: ratelimit.Limits{RequestsPerMinute: 50}}}}, acked)
	if share, _, _ := b3.Lookup("m", "m/2"); share.RequestsPerMinute != 30 {
		t.Errorf("m/2 with a grant of 30 and a Start of 50: %d rpm, want 30", share.RequestsPerMinute)
	}
}

// TestDivideSetsAsideStoppedShards: a stopped shard's lingering cap is what
// its calls may still count, set aside before the running shards divide the
// rest; water-filled with them, it was lowered to a third of 60 when two
// shards started, and the new ones were granted calls the server still
// counted.
func TestDivideSetsAsideStoppedShards(t *testing.T) {
	limits := map[string]ratelimit.Limits{"m": {RequestsPerMinute: 60}}
	b, _ := Divide(nil, limits, map[string][]string{"m": {"m/0"}}, nil)
	acked := map[string]int64{"m/0": math.MaxInt64}
	b, _ = DivideWeighted(b, limits, map[string][]User{"m": {{Key: "m/0", Cap: rpm(50), Stopped: true}, {Key: "m/1"}, {Key: "m/2"}}}, acked)
	got := map[string]int64{}
	for k, g := range b.Models["m"].Grants {
		got[k] = g.Share.RequestsPerMinute
	}
	if diff := cmp.Diff(map[string]int64{"m/0": 50, "m/1": 5, "m/2": 5}, got); diff != "" {
		t.Errorf("shares (-want +got):\n%s", diff)
	}
	// A cap above the limit (the limit was lowered) sets aside all of it.
	b, _ = DivideWeighted(b, map[string]ratelimit.Limits{"m": {RequestsPerMinute: 40}}, map[string][]User{"m": {{Key: "m/0", Cap: rpm(50), Stopped: true}, {Key: "m/1"}}}, acked)
	if s0, s1 := b.Models["m"].Grants["m/0"].Share.RequestsPerMinute, b.Models["m"].Grants["m/1"].Share.RequestsPerMinute; s0 != 40 || s1 != 0 {
		t.Errorf("under a limit of 40: m/0 %d, m/1 %d; want 40 and 0", s0, s1)
	}
}
