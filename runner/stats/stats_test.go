package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The reference values were computed independently with statsmodels 0.13.5
// and SciPy 1.10.1 (Debian's python3-statsmodels and python3-scipy):
// proportion_confint(k, n, method="wilson"), scipy.stats.t.interval with
// scipy.stats.sem, and statsmodels' mcnemar(table, exact=True). The Wilson
// intervals of 81/263, 15/148, 0/20 and 1/29 are also those of Newcombe's
// published table (Statistics in Medicine 17, 1998, Table I, to 4 places).
const tolerance = 1e-6

func near(a, b float64) bool { return math.Abs(a-b) <= tolerance }

func TestWilson(t *testing.T) {
	tests := []struct {
		k, n   int64
		lo, hi float64
	}{
		{81, 263, 0.255288520, 0.366209577},
		{15, 148, 0.062386400, 0.160487242},
		{0, 20, 0, 0.161125158},
		{1, 29, 0.006113214, 0.171755219},
		{29, 29, 0.883030202, 1},
		{50, 100, 0.403831530, 0.596168470},
	}
	for _, tc := range tests {
		got := Wilson(tc.k, tc.n, 0.95)
		if !near(got.Lo, tc.lo) || !near(got.Hi, tc.hi) {
			t.Errorf("Wilson(%d, %d) = [%.9f, %.9f], want [%.9f, %.9f]", tc.k, tc.n, got.Lo, got.Hi, tc.lo, tc.hi)
		}
	}
	if got := Wilson(0, 0, 0.95); got != (Interval{0, 1}) {
		t.Errorf("Wilson of no trials = %v, want [0, 1]", got)
	}
}

func TestMeanInterval(t *testing.T) {
	tests := []struct {
		xs             []float64
		conf           float64
		mean, variance float64
		lo, hi         float64
	}{
		{[]float64{0.2, 0.5, 0.9, 0.4, 0.7}, 0.95, 0.54, 0.073, 0.204520862, 0.875479138},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.95, 5.5, 9.166666667, 3.334149410, 7.665850590},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.90, 5.5, 9.166666667, 3.744927987, 7.255072013},
		{[]float64{0.93, 0.91, 0.95, 0.97, 0.90, 0.92, 0.94, 0.96}, 0.95, 0.935, 0.0006, 0.914521753, 0.955478247},
	}
	for _, tc := range tests {
		var m Moments
		for _, x := range tc.xs {
			m.Add(x)
		}
		got := m.MeanInterval(tc.conf)
		if !near(m.Mean, tc.mean) || !near(m.Variance(), tc.variance) || !near(got.Lo, tc.lo) || !near(got.Hi, tc.hi) {
			t.Errorf("%v at %v: mean %.9f variance %.9f interval [%.9f, %.9f]; want %.9f, %.9f, [%.9f, %.9f]",
				tc.xs, tc.conf, m.Mean, m.Variance(), got.Lo, got.Hi, tc.mean, tc.variance, tc.lo, tc.hi)
		}
	}
	var one Moments
	one.Add(0.7)
	if got := one.MeanInterval(0.95); got != (Interval{0.7, 0.7}) {
		t.Errorf("one observation: %v", got)
	}
}

func TestMcNemar(t *testing.T) {
	tests := []struct {
		b, c int64
		p    float64
	}{
		{10, 3, 0.092285156250},
		{3, 10, 0.092285156250},
		{25, 25, 1},
		{0, 7, 0.015625},
		{1, 0, 1},
		{40, 20, 0.013489293731},
		{59, 6, 0.000000000005},
		{0, 0, 1},
	}
	for _, tc := range tests {
		if got := McNemar(tc.b, tc.c); math.Abs(got-tc.p) > 1e-9 {
			t.Errorf("McNemar(%d, %d) = %.12f, want %.12f", tc.b, tc.c, got, tc.p)
		}
	}
}

// TestIntervalsCover: simulated, the 95% intervals cover the true value
// 94–96% of the time: Wilson's for binary scores (several rates and sizes,
// as its coverage oscillates with them), Student's t for normal scores.
func TestIntervalsCover(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const runs = 20000
	cases := []struct {
		p float64
		n int64
	}{{0.5, 100}, {0.3, 200}, {0.8, 500}, {0.9, 1000}}
	for _, tc := range cases {
		covered := 0
		for range runs {
			var k int64
			for range tc.n {
				if rng.Float64() < tc.p {
					k++
				}
			}
			if iv := Wilson(k, tc.n, 0.95); iv.Lo <= tc.p && tc.p <= iv.Hi {
				covered++
			}
		}
		if c := float64(covered) / runs; c < 0.94 || c > 0.96 {
			t.Errorf("Wilson, p=%v n=%d: covered %.4f of the time", tc.p, tc.n, c)
		}
	}
	for _, n := range []int{10, 50} {
		covered := 0
		for range runs {
			var m Moments
			for range n {
				m.Add(0.6 + 0.1*rng.NormFloat64())
			}
			if iv := m.MeanInterval(0.95); iv.Lo <= 0.6 && 0.6 <= iv.Hi {
				covered++
			}
		}
		if c := float64(covered) / runs; c < 0.94 || c > 0.96 {
			t.Errorf("t, n=%d: covered %.4f of the time", n, c)
		}
	}
}

// TestPairedBootstrap: reproducible for a seed; no difference gives the
// interval [0, 0] and p 1; on many normal differences the interval is close to
// Student's t interval, and a clear difference has a small p-value.
func TestPairedBootstrap(t *testing.T) {
	d := []float64{0.1, -0.2, 0.3, 0, 0.5, 0.2, -0.1, 0.4}
	iv1, p1 := PairedBootstrap(d, 2000, 0.95, 7)
	iv2, p2 := PairedBootstrap(d, 2000, 0.95, 7)
	if iv1 != iv2 || p1 != p2 {
		t.Errorf("the same seed gave %v %v and %v %v", iv1, p1, iv2, p2)
	}
	if iv, p := PairedBootstrap(make([]float64, 50), 1000, 0.95, 1); iv != (Interval{}) || p != 1 {
		t.Errorf("no difference: %v p=%v, want [0, 0] p=1", iv, p)
	}
	if iv, p := PairedBootstrap(nil, 1000, 0.95, 1); iv != (Interval{}) || p != 1 {
		t.Errorf("no pairs: %v p=%v, want [0, 0] p=1", iv, p)
	}

	rng := rand.New(rand.NewPCG(3, 4))
	big := make([]float64, 3000)
	var m Moments
	for i := range big {
		big[i] = 0.05 + 0.3*rng.NormFloat64()
		m.Add(big[i])
	}
	iv, p := PairedBootstrap(big, Resamples, 0.95, 1)
	tv := m.MeanInterval(0.95)
	half := (tv.Hi - tv.Lo) / 2
	if math.Abs(iv.Lo-tv.Lo) > 0.1*half || math.Abs(iv.Hi-tv.Hi) > 0.1*half {
		t.Errorf("bootstrap interval %v, t interval %v: more than a tenth of a half-width apart", iv, tv)
	}
	if p > 0.001 {
		t.Errorf("a mean difference of 9 standard errors: p=%v, want at most 0.001", p)
	}
}

// TestMultinomialResampling: resampling few distinct differences as a
// multinomial draw gives the interval and p-value drawing each sample gives,
// within the resampling's own noise.
func TestMultinomialResampling(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	d := make([]float64, 500)
	for i := range d {
		d[i] = float64(rng.IntN(5)-2) / 2 // -1, -0.5, 0, 0.5, 1
		if i%3 == 0 {
			d[i] = 0.5
		}
	}
	multi, pm := pairedBootstrap(d, Resamples, 0.95, 1, maxDistinct)
	direct, pd := pairedBootstrap(d, Resamples, 0.95, 2, 0)
	if math.Abs(multi.Lo-direct.Lo) > 0.01 || math.Abs(multi.Hi-direct.Hi) > 0.01 || math.Abs(pm-pd) > 0.01 {
		t.Errorf("multinomial %v p=%v, sample by sample %v p=%v", multi, pm, direct, pd)
	}
}

// TestPairedBootstrapCovers: simulated, the bootstrap's 95% interval covers
// the true mean difference 94–96% of the time, for paired binary scores
// (two correlated pass/fail runs) and for skewed continuous ones; and with no
// true difference its p-value is below 0.05 about 5% of the time.
func TestPairedBootstrapCovers(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulation of a few seconds")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const runs, resamples = 3000, 1000
	// Binary: the baseline passes with 0.7; the candidate agrees with it 85%
	// of the time, else flips: its pass rate is 0.7*0.85 + 0.3*0.15 = 0.64.
	binary := func(n int) ([]float64, float64) {
		d := make([]float64, n)
		for i := range d {
			base := b2f(rng.Float64() < 0.7)
			cur := base
			if rng.Float64() >= 0.85 {
				cur = 1 - base
			}
			d[i] = cur - base
		}
		return d, 0.64 - 0.7
	}
	// Continuous, skewed: both scores are Beta-like (squares of uniforms)
	// with a shared part; the candidate's is 0.9 of the baseline's plus noise.
	continuous := func(n int) ([]float64, float64) {
		d := make([]float64, n)
		for i := range d {
			u := rng.Float64()
			base := u * u
			cur := 0.9*base + 0.1*rng.Float64()
			d[i] = cur - base
		}
		// E[0.9u² + 0.1v - u²] = -0.1/3 + 0.05
		return d, -0.1/3 + 0.05
	}
	null := func(n int) ([]float64, float64) {
		d := make([]float64, n)
		for i := range d {
			d[i] = rng.NormFloat64()
		}
		return d, 0
	}
	for _, tc := range []struct {
		name string
		gen  func(int) ([]float64, float64)
		n    int
	}{{"binary", binary, 300}, {"continuous", continuous, 200}, {"no difference", null, 100}} {
		covered, rejected := 0, 0
		for r := range runs {
			d, truth := tc.gen(tc.n)
			iv, p := PairedBootstrap(d, resamples, 0.95, uint64(r))
			if iv.Lo <= truth && truth <= iv.Hi {
				covered++
			}
			if p < 0.05 {
				rejected++
			}
		}
		t.Logf("%s, n=%d: covered %.4f, p < 0.05 in %.4f", tc.name, tc.n, float64(covered)/runs, float64(rejected)/runs)
		if c := float64(covered) / runs; c < 0.94 || c > 0.96 {
			t.Errorf("%s, n=%d: covered %.4f of the time", tc.name, tc.n, c)
		}
		if tc.name == "no difference" {
			if r := float64(rejected) / runs; r < 0.04 || r > 0.06 {
				t.Errorf("no difference: p < 0.05 in %.4f of the runs, want about 0.05", r)
			}
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// BenchmarkPairedBootstrap: one metric's comparison on 10,000 paired samples
// with the resamples a report uses.
func BenchmarkPairedBootstrap(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	d := make([]float64, 10000)
	for i := range d {
		d[i] = float64(rng.IntN(3) - 1)
	}
	for b.Loop() {
		PairedBootstrap(d, Resamples, Confidence, 1)
	}
}
