package ratelimit

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWaterFill(t *testing.T) {
	cases := []struct {
		name    string
		limit   int64
		weights []int64
		caps    []int64
		want    []int64
	}{
		{"equal", 10, []int64{0, 0, 0}, []int64{0, 0, 0}, []int64{4, 3, 3}},
		{"weights 2:1:1", 600, []int64{2, 1, 1}, []int64{0, 0, 0}, []int64{300, 150, 150}},
		{"a cap leaves its unused part to the others", 600, []int64{1, 1, 1}, []int64{100, 0, 0}, []int64{100, 250, 250}},
		{"caps in turn", 600, []int64{1, 1, 1}, []int64{100, 220, 0}, []int64{100, 220, 280}},
		{"a cap above the fair part binds nothing", 600, []int64{1, 1}, []int64{400, 0}, []int64{300, 300}},
		{"caps below the limit in sum", 600, []int64{1, 1}, []int64{100, 200}, []int64{100, 200}},
		{"weighted remainders", 7, []int64{3, 1}, []int64{0, 0}, []int64{5, 2}},
		{"a small limit reaches the first users", 2, []int64{1, 1, 1, 1}, []int64{0, 0, 0, 0}, []int64{1, 1, 0, 0}},
		{"no limit", 0, []int64{1, 1}, []int64{0, 0}, []int64{0, 0}},
		{"no users", 5, nil, nil, []int64{}},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, WaterFill(tc.limit, tc.weights, tc.caps)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	// Randomized: shares sum to the limit (or to the caps), respect caps, and an
	// uncapped user never gets less, per unit of weight, than any other user.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := 1 + rng.IntN(6)
		limit := rng.Int64N(5000)
		weights, caps := make([]int64, n), make([]int64, n)
		var capSum int64
		uncapped := false
		for i := range n {
			weights[i] = rng.Int64N(5)
			if rng.IntN(2) == 0 {
				caps[i] = 1 + rng.Int64N(2000)
				capSum += caps[i]
			} else {
				uncapped = true
			}
		}
		got := WaterFill(limit, weights, caps)
		var sum int64
		for i, g := range got {
			sum += g
			if caps[i] > 0 && g > caps[i] {
				t.Fatalf("WaterFill(%d, %v, %v) = %v: over a cap", limit, weights, caps, got)
			}
		}
		want := limit
		if !uncapped {
			want = min(limit, capSum)
		}
		if sum != want {
			t.Fatalf("WaterFill(%d, %v, %v) = %v: sums to %d, want %d", limit, weights, caps, got, sum, want)
		}
		for i := range n {
			for j := range n {
				wi, wj := max(1, weights[i]), max(1, weights[j])
				// i uncapped (or below its cap) trails j, per unit of weight, by no more
				// than rounding: a unit each (got/w may be off by 1/w either way).
				if (caps[i] == 0 || got[i] < caps[i]) && got[j]*wi-got[i]*wj > wi+wj {
					t.Fatalf("WaterFill(%d, %v, %v) = %v: user %d gets less than its part beside user %d", limit, weights, caps, got, i, j)
				}
			}
		}
	}
}

func TestDivide(t *testing.T) {
	lim := Limits{RequestsPerMinute: 300, MaxInFlight: 3}
	got := Divide(lim, []int64{2, 1}, []Limits{{}, {RequestsPerMinute: 50}})
	want := []Limits{{RequestsPerMinute: 250, MaxInFlight: 2}, {RequestsPerMinute: 50, MaxInFlight: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Divide (-want +got):\n%s", diff)
	}
}
