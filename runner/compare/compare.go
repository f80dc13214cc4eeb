// Package compare pairs a run's records with a baseline's, sample by sample,
// and checks a gate: minimum scores, and the largest significant drop from
// the baseline. The local run, the controller and `proctor compare` share it,
// so a comparison reads the same wherever it is made.
package compare

import (
	"fmt"
	"hash/fnv"
	"iter"
	"math"
	"slices"
	"strconv"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/stats"
)

// Tests name the paired tests.
const (
	TestMcNemar   = "mcnemar"
	TestBootstrap = "bootstrap"
)

type pairKey struct{ model, dataset string }

// Baseline holds a baseline's scores, by model, dataset and sample id: one
// float per metric, an errored sample scoring 0 as in its summary.
type Baseline struct {
	// Source says where the baseline came from, for reports.
	Source  string
	metrics []string
	scores  map[pairKey]map[string][]float64
}

// NewBaseline starts an empty baseline scored by the named metrics.
func NewBaseline(source string, metrics []string) *Baseline {
	return &Baseline{Source: source, metrics: metrics, scores: map[pairKey]map[string][]float64{}}
}

// Add keeps a baseline record; a later record of the same sample replaces an
// earlier one. Records awaiting their verdicts are not finished: skipped.
func (b *Baseline) Add(r *results.Record) {
	if len(r.JudgePending) > 0 {
		return
	}
	b.AddScores(r.Model, r.Dataset, r.ID, scoresOf(r, b.metrics))
}

// Metrics are the metrics the baseline keeps, in the order AddScores takes.
func (b *Baseline) Metrics() []string { return b.metrics }

// AddScores keeps a baseline sample's scores, one per metric in Metrics'
// order (NaN for a metric it lacks; an errored sample's missing metrics
// score 0, as Add does), as Add does a record's.
func (b *Baseline) AddScores(model, dataset, id string, scores []float64) {
	k := pairKey{model, dataset}
	m := b.scores[k]
	if m == nil {
		m = map[string][]float64{}
		b.scores[k] = m
	}
	m[id] = scores
}

// Models returns the baseline's models, sorted.
func (b *Baseline) Models() []string {
	var out []string
	for k := range b.scores {
		if !slices.Contains(out, k.model) {
			out = append(out, k.model)
		}
	}
	slices.Sort(out)
	return out
}

// scoresOf is a record's score on each metric, NaN for a metric it lacks.
func scoresOf(r *results.Record, metrics []string) []float64 {
	out := make([]float64, len(metrics))
	for i, m := range metrics {
		v, ok := r.Scores[m]
		switch {
		case ok:
			out[i] = v // a failed scorer's 0, or what the others scored
		case r.Error != "":
			out[i] = 0
		default:
			out[i] = math.NaN()
		}
	}
	return out
}

// Report is a comparison with a baseline, as status and summary.json show it.
type Report struct {
	Baseline string   `json:"baseline"`
	Results  []Result `json:"results"`
}

// Result compares one model on one dataset with the baseline.
type Result struct {
	Model             string   `json:"model"`
	BaselineModel     string   `json:"baselineModel"`
	Dataset           string   `json:"dataset"`
	Paired            int64    `json:"paired"`
	Unmatched         int64    `json:"unmatched"`
	BaselineUnmatched int64    `json:"baselineUnmatched"`
	Metrics           []Metric `json:"metrics"`
	// ByPosition says both sides' ids are the samples' positions (1..n), as
	// records without ids had before ids were hashes of their content: a line
	// added or removed pairs one question with another.
	ByPosition bool `json:"byPosition,omitempty"`
}

// Notes says what a reader of the result must know to trust it: nothing
// paired, few paired, or pairing by position.
func (r *Result) Notes() []string {
	where := fmt.Sprintf("model %s on dataset %s", r.Model, r.Dataset)
	if r.BaselineModel != r.Model {
		where = fmt.Sprintf("model %s (against the baseline's %s) on dataset %s", r.Model, r.BaselineModel, r.Dataset)
	}
	var notes []string
	here, there := r.Paired+r.Unmatched, r.Paired+r.BaselineUnmatched
	switch {
	case r.Paired == 0:
		notes = append(notes, fmt.Sprintf("%s: no sample pairs with the baseline (%d here, %d there): their ids differ", where, here, there))
	case 2*r.Paired < max(here, there):
		notes = append(notes, fmt.Sprintf("%s: only %d of %d samples pair with the baseline (%d here, %d there): their ids differ", where, r.Paired, max(here, there), here, there))
	}
	if r.ByPosition {
		notes = append(notes, fmt.Sprintf("%s: paired by position: both sides' ids are the samples' line numbers, so a line added or removed "+
			"pairs one question with another (records without ids are now identified by their content: run the baseline again to pair by it)", where))
	}
	return notes
}

// positional reports whether ids are exactly 1..len(ids), more than one.
func positional[V any](ids map[string]V) bool {
	if len(ids) < 2 {
		return false
	}
	for id := range ids {
		n, err := strconv.Atoi(id)
		if err != nil || n < 1 || n > len(ids) || strconv.Itoa(n) != id {
			return false
		}
	}
	return true
}

// Metric is a metric's paired difference from the baseline.
type Metric struct {
	Metric   string  `json:"metric"`
	Baseline float64 `json:"baseline"`
	Current  float64 `json:"current"`
	// Diff is Current minus Baseline, over the samples both have.
	Diff     float64        `json:"diff"`
	Interval stats.Interval `json:"interval"`
	PValue   float64        `json:"pValue"`
	Test     string         `json:"test"`
	// Improved and Regressed count the pairs whose score rose and fell.
	Improved  int64 `json:"improved"`
	Regressed int64 `json:"regressed"`
}

// Comparer pairs a run's records with a baseline as they stream by.
type Comparer struct {
	base          *Baseline
	baselineModel string
	metrics       []string
	// baseIndex is each metric's place among the baseline's (-1: it has none).
	baseIndex []int
	order     []pairKey
	pairs     map[pairKey]*pairing
}

type pairing struct {
	seen      map[string]bool
	unmatched int64
	// cur and base hold each metric's paired scores (NaN pairs dropped at the end).
	cur, base [][]float64
}

// New compares the (model, dataset) pairs of pairs, in that order, on the
// named metrics, with base. baselineModel, when set, is the baseline's model
// every model is compared with; else each model is compared with the
// baseline's model of its own name.
func New(base *Baseline, baselineModel string, metrics []string, pairs []results.Pair) *Comparer {
	c := &Comparer{base: base, baselineModel: baselineModel, metrics: metrics, pairs: map[pairKey]*pairing{}}
	for _, m := range metrics {
		c.baseIndex = append(c.baseIndex, slices.Index(base.metrics, m))
	}
	for _, p := range pairs {
		k := pairKey{p.Model, p.Dataset}
		if _, dup := c.pairs[k]; dup {
			continue
		}
		c.order = append(c.order, k)
		c.pairs[k] = &pairing{seen: map[string]bool{}, cur: make([][]float64, len(metrics)), base: make([][]float64, len(metrics))}
	}
	return c
}

func (c *Comparer) baseKey(k pairKey) pairKey {
	if c.baselineModel != "" {
		return pairKey{c.baselineModel, k.dataset}
	}
	return k
}

// Add pairs one of the run's records with the baseline's record of the same
// sample. A sample recorded twice counts once (the first time).
func (c *Comparer) Add(r *results.Record) {
	if len(r.JudgePending) > 0 {
		return
	}
	k := pairKey{r.Model, r.Dataset}
	if p := c.pairs[k]; p == nil || p.seen[r.ID] {
		return
	}
	c.AddScores(r.Model, r.Dataset, r.ID, scoresOf(r, c.base.metrics))
}

// AddScores pairs a sample of the run, given its scores in the order of
// the baseline's Metrics (as Baseline.AddScores takes them), as Add does a
// record.
func (c *Comparer) AddScores(model, dataset, id string, cur []float64) {
	k := pairKey{model, dataset}
	p := c.pairs[k]
	if p == nil || p.seen[id] {
		return
	}
	p.seen[id] = true
	b, ok := c.base.scores[c.baseKey(k)][id]
	if !ok {
		p.unmatched++
		return
	}
	for i, bi := range c.baseIndex {
		if bi < 0 {
			continue
		}
		p.cur[i] = append(p.cur[i], cur[bi])
		p.base[i] = append(p.base[i], b[bi])
	}
}

// Report compares each pair: means on the paired samples, the difference's
// 95% interval, and the paired test's p-value (McNemar's exact test when
// every paired score is 0 or 1, else a paired bootstrap, whose interval is
// used for binary scores too).
func (c *Comparer) Report() Report {
	rep := Report{Baseline: c.base.Source}
	for _, k := range c.order {
		p := c.pairs[k]
		bk := c.baseKey(k)
		var baselineUnmatched int64
		for id := range c.base.scores[bk] {
			if !p.seen[id] {
				baselineUnmatched++
			}
		}
		rep.Results = append(rep.Results, PairedResult(k.model, bk.model, k.dataset, c.metrics, p.cur, p.base,
			int64(len(p.seen)), p.unmatched, baselineUnmatched, positional(p.seen) && positional(c.base.scores[bk])))
	}
	return rep
}

// PairedResult is Report's comparison of one model on one dataset with the
// baseline, from the samples a caller paired itself: cur[i] and base[i]
// hold each pair's scores of metrics[i] (NaN where a side lacks it); seen
// counts the run's samples, unmatched those without a baseline sample, and
// baselineUnmatched the baseline's without one of the run's.
func PairedResult(model, baselineModel, dataset string, metrics []string, cur, base [][]float64, seen, unmatched, baselineUnmatched int64, byPosition bool) Result {
	res := Result{Model: model, BaselineModel: baselineModel, Dataset: dataset, Unmatched: unmatched,
		BaselineUnmatched: baselineUnmatched, ByPosition: byPosition}
	for i, m := range metrics {
		if i >= len(cur) || i >= len(base) {
			continue
		}
		c, b := dropNaN(cur[i], base[i])
		res.Paired = max(res.Paired, int64(len(c)))
		if len(c) == 0 {
			continue
		}
		res.Metrics = append(res.Metrics, compareMetric(m, c, b, seed(model, dataset, m)))
	}
	if len(res.Metrics) == 0 {
		res.Paired = seen - unmatched
	}
	return res
}

// Positional reports whether ids (distinct) are exactly 1..len(ids), more
// than one: the samples' positions, as ids were before they were hashes of
// the samples' content.
func Positional(ids []string) bool {
	return PositionalIDs(len(ids), func(yield func([]byte) bool) {
		for _, id := range ids {
			if !yield([]byte(id)) {
				return
			}
		}
	})
}

// PositionalIDs is Positional of the n distinct ids that ids yields.
func PositionalIDs(n int, ids iter.Seq[[]byte]) bool {
	if n < 2 {
		return false
	}
	at := make([]bool, n+1)
	for id := range ids {
		v, ok := position(id)
		if !ok || v > n || at[v] {
			return false
		}
		at[v] = true
	}
	return true
}

// position is id as a number from 1, written as strconv.Itoa writes it.
func position(id []byte) (int, bool) {
	if len(id) == 0 || len(id) > 18 || id[0] == '0' {
		return 0, false
	}
	v := 0
	for _, c := range id {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// dropNaN drops the pairs in which either side lacks the metric.
func dropNaN(cur, base []float64) ([]float64, []float64) {
	var c, b []float64
	for i := range cur {
		if !math.IsNaN(cur[i]) && !math.IsNaN(base[i]) {
			c, b = append(c, cur[i]), append(b, base[i])
		}
	}
	return c, b
}

func compareMetric(name string, cur, base []float64, seed uint64) Metric {
	m := Metric{Metric: name}
	d := make([]float64, len(cur))
	binary := true
	for i := range cur {
		d[i] = cur[i] - base[i]
		m.Current += cur[i]
		m.Baseline += base[i]
		binary = binary && (cur[i] == 0 || cur[i] == 1) && (base[i] == 0 || base[i] == 1)
		switch {
		case d[i] > 0:
			m.Improved++
		case d[i] < 0:
			m.Regressed++
		}
	}
	n := float64(len(cur))
	m.Current /= n
	m.Baseline /= n
	m.Diff = m.Current - m.Baseline
	var p float64
	m.Interval, p = stats.PairedBootstrap(d, stats.Resamples, stats.Confidence, seed)
	m.PValue, m.Test = p, TestBootstrap
	if binary {
		// Discordant pairs: the baseline's passes the run failed (Regressed), and
		// the other way round.
		m.PValue, m.Test = stats.McNemar(m.Regressed, m.Improved), TestMcNemar
	}
	return m
}

// seed makes each comparison's resampling reproducible, and different per
// model, dataset and metric.
func seed(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// Find returns the result of a model on a dataset, or nil.
func (r *Report) Find(model, dataset string) *Result {
	for i := range r.Results {
		if r.Results[i].Model == model && r.Results[i].Dataset == dataset {
			return &r.Results[i]
		}
	}
	return nil
}

// Find returns a metric's comparison, or nil.
func (r *Result) Find(metric string) *Metric {
	for i := range r.Metrics {
		if r.Metrics[i].Metric == metric {
			return &r.Metrics[i]
		}
	}
	return nil
}

// Describe says what a metric comparison found, for messages and tables.
func (m *Metric) Describe() string {
	return fmt.Sprintf("%.4f → %.4f (%+.4f, 95%% CI [%+.4f, %+.4f], %s p=%.4g)",
		m.Baseline, m.Current, m.Diff, m.Interval.Lo, m.Interval.Hi, m.Test, m.PValue)
}
