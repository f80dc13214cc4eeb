package view

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/results"
)

// A comparison pairs the candidate's samples with the baseline's by model
// (or the baseline model given), dataset and id, as proctor compare does,
// and computes the same statistics with runner/compare: per metric, the
// paired difference's 95% interval and p-value. Its rows are the pairs,
// regressions first (the largest drop first), then improvements, then
// pairs that did not change.

// Pair is one sample of both runs.
type Pair struct {
	Model         string   `json:"model"`
	BaselineModel string   `json:"baselineModel"`
	Dataset       string   `json:"dataset"`
	ID            string   `json:"id"`
	BaseRow       int32    `json:"baseRow"`
	CandRow       int32    `json:"candRow"`
	Base          *float64 `json:"base"`
	Cand          *float64 `json:"cand"`
	BaseError     string   `json:"baseError,omitempty"`
	CandError     string   `json:"candError,omitempty"`
	// Delta is Cand - Base on the metric (errored samples scoring 0);
	// nil when either lacks it.
	Delta *float64 `json:"delta"`
}

// Comparison is what the compare page shows.
type Comparison struct {
	Base, Cand string
	Metric     string         `json:"metric"`
	Report     compare.Report `json:"report"`
	Regressed  int            `json:"regressed"`
	Improved   int            `json:"improved"`
	Same       int            `json:"same"`
	pairs      []Pair
}

// Compare pairs cand's samples with base's and compares them on metric
// (default the first metric both have); baselineModel, if set, is the
// baseline's model every candidate model is compared with.
func Compare(base, cand *Run, metric, baselineModel string) (*Comparison, error) {
	if baselineModel != "" && !slices.Contains(base.Models, baselineModel) {
		return nil, fmt.Errorf("baselineModel: run %s has no model %q (its models: %s)", base.ID, baselineModel, strings.Join(base.Models, ", "))
	}
	names := slices.Clone(cand.Metrics)
	if metric == "" {
		for _, m := range names {
			if slices.Contains(base.Metrics, m) {
				metric = m
				break
			}
		}
	}
	bm, cm := slices.Index(base.Metrics, metric), slices.Index(cand.Metrics, metric)
	if metric != "" && (bm < 0 || cm < 0) {
		return nil, fmt.Errorf("metric: %q is not a metric of both runs", metric)
	}
	// The statistics, as proctor compare computes them, from the index.
	b := compare.NewBaseline(base.Source, names)
	for i := range base.rows {
		if !base.rows[i].pending {
			b.AddScores(base.Models[base.rows[i].model], base.Datasets[base.rows[i].dataset], base.rows[i].id, base.scoresIn(i, names))
		}
	}
	var pairs []results.Pair
	for _, s := range cand.Summary.Results {
		pairs = append(pairs, results.Pair{Model: s.Model, Dataset: s.Dataset})
	}
	if len(pairs) == 0 {
		for _, m := range cand.Models {
			for _, d := range cand.Datasets {
				pairs = append(pairs, results.Pair{Model: m, Dataset: d})
			}
		}
	}
	c := compare.New(b, baselineModel, names, pairs)
	for i := range cand.rows {
		if !cand.rows[i].pending {
			c.AddScores(cand.Models[cand.rows[i].model], cand.Datasets[cand.rows[i].dataset], cand.rows[i].id, cand.scoresIn(i, names))
		}
	}
	out := &Comparison{Base: base.ID, Cand: cand.ID, Metric: metric, Report: c.Report()}

	// The pairs, sample by sample: the baseline's rows of each model and
	// dataset by id (the ids are the rows' own strings, not copies).
	type pk struct{ model, dataset string }
	index := map[pk]map[string]int32{}
	for i := range base.rows {
		w := &base.rows[i]
		k := pk{base.Models[w.model], base.Datasets[w.dataset]}
		m := index[k]
		if m == nil {
			m = make(map[string]int32, len(base.rows)/max(1, len(base.Models)*len(base.Datasets)))
			index[k] = m
		}
		m[w.id] = int32(i)
	}
	out.pairs = make([]Pair, 0, len(cand.rows))
	for i := range cand.rows {
		w := &cand.rows[i]
		model, dataset := cand.Models[w.model], cand.Datasets[w.dataset]
		against := model
		if baselineModel != "" {
			against = baselineModel
		}
		j, ok := index[pk{against, dataset}][w.id]
		if !ok {
			continue
		}
		p := Pair{Model: model, BaselineModel: against, Dataset: dataset, ID: w.id, BaseRow: j, CandRow: int32(i),
			BaseError: base.kinds[base.rows[j].kind], CandError: cand.kinds[w.kind]}
		if metric != "" {
			p.Base, p.Cand = scoreOrZero(base, int(j), bm), scoreOrZero(cand, i, cm)
			if p.Base != nil && p.Cand != nil {
				d := *p.Cand - *p.Base
				p.Delta = &d
				switch {
				case d < 0:
					out.Regressed++
				case d > 0:
					out.Improved++
				default:
					out.Same++
				}
			}
		}
		out.pairs = append(out.pairs, p)
	}
	slices.SortStableFunc(out.pairs, func(x, y Pair) int { return cmpDelta(x.Delta, y.Delta) })
	return out, nil
}

// cmpDelta orders regressions first (the largest drop first), then
// improvements (the largest rise last... first among them), then no
// change, then pairs without a delta.
func cmpDelta(x, y *float64) int {
	rank := func(d *float64) (int, float64) {
		switch {
		case d == nil:
			return 3, 0
		case *d < 0:
			return 0, *d
		case *d > 0:
			return 1, -*d
		}
		return 2, 0
	}
	rx, vx := rank(x)
	ry, vy := rank(y)
	if rx != ry {
		return rx - ry
	}
	return cmpFloat(vx, vy, false)
}

// scoreOrZero is row i's score of metric m, 0 for an errored sample
// without it (as the summary counts it), nil if it has none.
func scoreOrZero(r *Run, i, m int) *float64 {
	v := r.score(i, m)
	if math.IsNaN(v) {
		if r.rows[i].kind == 0 {
			return nil
		}
		v = 0
	}
	return &v
}

// scoresIn is row i's scores of metrics, as runner/compare takes them:
// NaN for a metric it lacks, 0 if it errored.
func (r *Run) scoresIn(i int, metrics []string) []float64 {
	out := make([]float64, len(metrics))
	for k, name := range metrics {
		out[k] = math.NaN()
		if m := slices.Index(r.Metrics, name); m >= 0 {
			out[k] = r.score(i, m)
		}
		if math.IsNaN(out[k]) && r.rows[i].kind != 0 {
			out[k] = 0
		}
	}
	return out
}

func (s *Server) compare(w http.ResponseWriter, r *http.Request) {
	base, err := s.run(r, "base")
	if err != nil {
		s.fail(w, err)
		return
	}
	cand, err := s.run(r, "cand")
	if err != nil {
		s.fail(w, err)
		return
	}
	v := r.URL.Query()
	offset, limit, err := page(v)
	if err != nil {
		s.fail(w, err)
		return
	}
	change := v.Get("change")
	if change != "" && change != "regressed" && change != "improved" && change != "same" {
		s.fail(w, &badRequest{fmt.Errorf("change: %q is not regressed, improved or same", change)})
		return
	}
	c, err := s.comparison(base, cand, v.Get("metric"), v.Get("baselineModel"))
	if err != nil {
		s.fail(w, err)
		return
	}
	pairs := c.pairs
	if change != "" || v.Get("model") != "" || v.Get("dataset") != "" {
		pairs = slices.DeleteFunc(slices.Clone(pairs), func(p Pair) bool {
			return !changed(p, change) || (v.Get("model") != "" && p.Model != v.Get("model")) || (v.Get("dataset") != "" && p.Dataset != v.Get("dataset"))
		})
	}
	out := struct {
		*Comparison
		Total  int    `json:"total"`
		Offset int    `json:"offset"`
		Pairs  []Pair `json:"pairs"`
	}{Comparison: c, Total: len(pairs), Offset: offset, Pairs: pairs[min(offset, len(pairs)):min(offset+limit, len(pairs))]}
	writeJSON(w, http.StatusOK, out)
}

func changed(p Pair, change string) bool {
	switch change {
	case "regressed":
		return p.Delta != nil && *p.Delta < 0
	case "improved":
		return p.Delta != nil && *p.Delta > 0
	case "same":
		return p.Delta != nil && *p.Delta == 0
	}
	return true
}

// comparison is Compare's, kept for the pages that follow.
func (s *Server) comparison(base, cand *Run, metric, baselineModel string) (*Comparison, error) {
	key := strings.Join([]string{base.ID, cand.ID, metric, baselineModel}, "\x00")
	s.compMu.Lock()
	defer s.compMu.Unlock()
	if s.compKey == key {
		return s.comp, nil
	}
	c, err := Compare(base, cand, metric, baselineModel)
	if err != nil {
		return nil, &badRequest{err}
	}
	s.compKey, s.comp = key, c
	return c, nil
}
