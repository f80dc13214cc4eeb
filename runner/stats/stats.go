// Package stats holds the statistics of a run's metrics: confidence
// intervals computed in one bounded-memory pass (Wilson's for binary
// scores, Student's t for continuous ones), and the paired comparison of two
// runs: McNemar's exact test for binary scores, a paired bootstrap for the
// rest. Quantiles come from gonum's distributions.
package stats

import (
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Interval is a confidence interval.
type Interval struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// Confidence is the confidence of the intervals Proctor reports.
const Confidence = 0.95

// Wilson is the Wilson score interval of k successes in n trials at
// confidence conf (0.95 for 95%): unlike the normal approximation it stays
// within [0, 1] and is not degenerate at 0 or n successes.
func Wilson(k, n int64, conf float64) Interval {
	if n <= 0 {
		return Interval{0, 1}
	}
	z := distuv.UnitNormal.Quantile(1 - (1-conf)/2)
	nf := float64(n)
	p := float64(k) / nf
	z2 := z * z
	center := (p + z2/(2*nf)) / (1 + z2/nf)
	half := z / (1 + z2/nf) * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	return Interval{Lo: max(0, center-half), Hi: min(1, center+half)}
}

// Moments accumulates a sample's count, mean and sum of squared deviations
// (Welford's method: numerically stable, one pass, constant memory).
type Moments struct {
	N    int64
	Mean float64
	M2   float64
}

// Add adds an observation.
func (m *Moments) Add(x float64) {
	m.N++
	d := x - m.Mean
	m.Mean += d / float64(m.N)
	m.M2 += d * (x - m.Mean)
}

// Variance is the sample variance (n-1 in the denominator); 0 below two
// observations.
func (m *Moments) Variance() float64 {
	if m.N < 2 {
		return 0
	}
	return m.M2 / float64(m.N-1)
}

// MeanInterval is Student's t interval of the mean at confidence conf. With
// fewer than two observations nothing is known of the spread: the interval
// is the mean alone.
func (m *Moments) MeanInterval(conf float64) Interval {
	if m.N < 2 {
		return Interval{m.Mean, m.Mean}
	}
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(m.N - 1)}.Quantile(1 - (1-conf)/2)
	half := t * math.Sqrt(m.Variance()/float64(m.N))
	return Interval{Lo: m.Mean - half, Hi: m.Mean + half}
}

// McNemar is the exact two-sided p-value of McNemar's test on paired binary
// scores: b pairs passed by the first run only, c by the second only. Under
// the null hypothesis (no difference) each discordant pair is either way
// with probability 1/2: the p-value is twice the binomial tail of the rarer
// side, at most 1.
func McNemar(b, c int64) float64 {
	n := b + c
	if n == 0 {
		return 1
	}
	k := float64(min(b, c))
	tail := distuv.Binomial{N: float64(n), P: 0.5}.CDF(k)
	return min(1, 2*tail)
}

// Resamples is how many resamples PairedBootstrap draws for a comparison:
// enough for a p-value to a few thousandths and for stable 2.5% and 97.5%
// percentiles, at n×4000 draws per metric.
const Resamples = 4000

// PairedBootstrap resamples the paired differences d (this run's score minus
// the baseline's, sample by sample) with replacement, resamples times. It
// returns the percentile interval of their mean at confidence conf, and the
// two-sided p-value of no difference: how often a resampled mean, centered on
// the observed one, lies at least as far from it as the observed mean lies
// from 0. The random draws come from seed, so a comparison is reproducible.
func PairedBootstrap(d []float64, resamples int, conf float64, seed uint64) (Interval, float64) {
	return pairedBootstrap(d, resamples, conf, seed, maxDistinct)
}

// pairedBootstrap is PairedBootstrap, resampling as a multinomial when d has
// at most limit distinct values.
func pairedBootstrap(d []float64, resamples int, conf float64, seed uint64, limit int) (Interval, float64) {
	n := len(d)
	if n == 0 || resamples < 1 {
		return Interval{}, 1
	}
	var sum float64
	for _, x := range d {
		sum += x
	}
	mean := sum / float64(n)
	src := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	means := make([]float64, resamples)
	if vals, counts := distinct(d, limit); vals != nil {
		// Few distinct differences (0/1 scores differ by -1, 0 or 1): a
		// resample is how often each is drawn, a multinomial draw made of
		// binomial ones, in time independent of n.
		for b := range means {
			left, rest := float64(n), float64(n)
			var s float64
			for i, v := range vals {
				k := left
				if i < len(vals)-1 {
					k = distuv.Binomial{N: left, P: min(1, counts[i]/rest), Src: src}.Rand()
				}
				s += k * v
				left -= k
				rest -= counts[i]
			}
			means[b] = s / float64(n)
		}
	} else {
		rng := rand.New(src)
		for b := range means {
			var s float64
			for range n {
				s += d[rng.IntN(n)]
			}
			means[b] = s / float64(n)
		}
	}
	// Sums of the same values in another order differ in the last bits: a
	// resample as far as the observed mean must count, not miss by 1e-17.
	far := math.Abs(mean) * (1 - 1e-9)
	extreme := 0
	for _, m := range means {
		if math.Abs(m-mean) >= far {
			extreme++
		}
	}
	slices.Sort(means)
	iv := Interval{
		Lo: stat.Quantile((1-conf)/2, stat.LinInterp, means, nil),
		Hi: stat.Quantile(1-(1-conf)/2, stat.LinInterp, means, nil),
	}
	return iv, min(1, float64(extreme+1)/float64(resamples+1))
}

// maxDistinct is how many distinct differences PairedBootstrap resamples as a
// multinomial; beyond, it draws each sample.
const maxDistinct = 16

// distinct returns the distinct values of d, sorted, with how often each
// occurs; nil if there are more than limit.
func distinct(d []float64, limit int) ([]float64, []float64) {
	count := map[float64]float64{}
	for _, x := range d {
		count[x]++
		if len(count) > limit {
			return nil, nil
		}
	}
	vals := make([]float64, 0, len(count))
	for v := range count {
		vals = append(vals, v)
	}
	slices.Sort(vals)
	counts := make([]float64, len(vals))
	for i, v := range vals {
		counts[i] = count[v]
	}
	return vals, counts
}
