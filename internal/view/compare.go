package view

import (
	"bytes"
	"fmt"
	"hash/maphash"
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
	// Base and Cand are the runs compared: the baseline's and the
	// candidate's ids.
	Base      string         `json:"base"`
	Cand      string         `json:"cand"`
	Metric    string         `json:"metric"`
	Report    compare.Report `json:"report"`
	Regressed int            `json:"regressed"`
	Improved  int            `json:"improved"`
	Same      int            `json:"same"`
	// pairs are the pairs, compact (the page's Pair is made for those it
	// shows), in order.
	pairs      []pairRow
	base, cand *Run
	bm, cm     int // the metric's index in each run; -1 for none
	against    string
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
	out := &Comparison{Base: base.ID, Cand: cand.ID, Metric: metric, Report: compare.Report{Baseline: base.Source}}

	// The baseline's rows of each model and dataset by id.
	type pk struct{ model, dataset string }
	index := map[pk]*idIndex{}
	for i := range base.rows {
		w := &base.rows[i]
		if w.pending {
			continue // not finished: as proctor compare, not counted
		}
		k := pk{base.Models[w.model], base.Datasets[w.dataset]}
		m := index[k]
		if m == nil {
			m = newIDIndex(base, len(base.rows)/max(1, len(base.Models)*len(base.Datasets)))
			index[k] = m
		}
		m.add(int32(i))
	}
	// The candidate's rows by model and dataset, in order.
	rowsOf := map[pk][]int32{}
	for i := range cand.rows {
		if w := &cand.rows[i]; !w.pending {
			k := pk{cand.Models[w.model], cand.Datasets[w.dataset]}
			rowsOf[k] = append(rowsOf[k], int32(i))
		}
	}
	out.pairs = make([]pairRow, 0, len(cand.rows))
	out.base, out.cand, out.bm, out.cm, out.against = base, cand, bm, cm, baselineModel
	for _, pr := range pairs {
		against := pr.Model
		if baselineModel != "" {
			against = baselineModel
		}
		baseRows := index[pk{against, pr.Dataset}]
		if baseRows == nil {
			baseRows = newIDIndex(base, 0)
		}
		// The statistics, as proctor compare computes them (runner/compare),
		// on the pairs made here.
		curs, bases := make([][]float64, len(names)), make([][]float64, len(names))
		baseCols := make([]int, len(names)) // names are the candidate's metrics, in its order
		for k, name := range names {
			baseCols[k] = slices.Index(base.Metrics, name)
		}
		var unmatched int64
		matched := 0
		candRows := rowsOf[pk{pr.Model, pr.Dataset}]
		for _, i := range candRows {
			j, ok := baseRows.get(cand.id(int(i)))
			if !ok {
				unmatched++
				continue
			}
			matched++
			for k := range names {
				curs[k] = append(curs[k], cand.compared(int(i), k))
				bases[k] = append(bases[k], base.compared(int(j), baseCols[k]))
			}
			pr := pairRow{base: j, cand: i, delta: float32(math.NaN())}
			if metric != "" {
				if d := cand.compared(int(i), cm) - base.compared(int(j), bm); !math.IsNaN(d) {
					pr.delta = float32(d)
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
			out.pairs = append(out.pairs, pr)
		}
		positional := compare.PositionalIDs(len(candRows), func(yield func([]byte) bool) {
			for _, i := range candRows {
				if !yield(cand.id(int(i))) {
					return
				}
			}
		}) && compare.PositionalIDs(baseRows.len(), baseRows.ids)
		out.Report.Results = append(out.Report.Results, compare.PairedResult(pr.Model, against, pr.Dataset, names, curs, bases,
			int64(len(candRows)), unmatched, int64(baseRows.len()-matched), positional))
	}
	slices.SortStableFunc(out.pairs, func(x, y pairRow) int { return cmpDelta(x.delta, y.delta) })
	return out, nil
}

// pairRow is a pair: the rows of both runs, and the candidate's score
// minus the baseline's on the metric (NaN when either lacks it).
type pairRow struct {
	base, cand int32
	delta      float32
}

// cmpDelta orders regressions first (the largest drop first), then
// improvements (the largest rise first), then no change, then pairs
// without a delta.
func cmpDelta(x, y float32) int {
	rank := func(d float32) (int, float64) {
		switch {
		case d != d: // NaN
			return 3, 0
		case d < 0:
			return 0, float64(d)
		case d > 0:
			return 1, -float64(d)
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

// pair is pr as the page shows it.
func (c *Comparison) pair(pr pairRow) Pair {
	w := &c.cand.rows[pr.cand]
	p := Pair{Model: c.cand.Models[w.model], BaselineModel: c.cand.Models[w.model], Dataset: c.cand.Datasets[w.dataset], ID: string(c.cand.id(int(pr.cand))),
		BaseRow: pr.base, CandRow: pr.cand, BaseError: c.base.kinds[c.base.rows[pr.base].kind], CandError: c.cand.kinds[w.kind]}
	if c.against != "" {
		p.BaselineModel = c.against
	}
	if c.bm >= 0 && c.cm >= 0 {
		p.Base, p.Cand = scoreOrZero(c.base, int(pr.base), c.bm), scoreOrZero(c.cand, int(pr.cand), c.cm)
		if p.Base != nil && p.Cand != nil {
			d := *p.Cand - *p.Base
			p.Delta = &d
		}
	}
	return p
}

// compared is row i's score of metric m as a comparison counts it (as
// runner/compare does): 0 for an errored sample without it, NaN for one
// that has none (or for m -1, a metric the run lacks).
func (r *Run) compared(i, m int) float64 {
	v := math.NaN()
	if m >= 0 {
		v = r.score(i, m)
	}
	if math.IsNaN(v) && r.rows[i].kind != 0 {
		v = 0
	}
	return v
}

// scoreOrZero is compared, as the page shows it; nil for none.
func scoreOrZero(r *Run, i, m int) *float64 {
	if v := r.compared(i, m); !math.IsNaN(v) {
		v = shortest(v)
		return &v
	}
	return nil
}

// comparedPairs is the comparison a compare view's request asks for, and
// its pairs that the view's filters keep, in order.
func (s *Server) comparedPairs(r *http.Request) (*Comparison, []pairRow, error) {
	base, err := s.run(r, "base")
	if err != nil {
		return nil, nil, err
	}
	cand, err := s.run(r, "cand")
	if err != nil {
		return nil, nil, err
	}
	v := r.URL.Query()
	change := v.Get("change")
	if change != "" && change != "regressed" && change != "improved" && change != "same" {
		return nil, nil, &badRequest{fmt.Errorf("change: %q is not regressed, improved or same", change)}
	}
	c, err := s.comparison(base, cand, v.Get("metric"), v.Get("baselineModel"))
	if err != nil {
		return nil, nil, err
	}
	pairs := c.pairs
	if change != "" || v.Get("model") != "" || v.Get("dataset") != "" {
		model, dataset := v.Get("model"), v.Get("dataset")
		pairs = slices.DeleteFunc(slices.Clone(pairs), func(p pairRow) bool {
			w := &c.cand.rows[p.cand]
			return !changed(p.delta, change) || (model != "" && c.cand.Models[w.model] != model) || (dataset != "" && c.cand.Datasets[w.dataset] != dataset)
		})
	}
	return c, pairs, nil
}

func (s *Server) compare(w http.ResponseWriter, r *http.Request) {
	offset, limit, err := page(r.URL.Query())
	if err != nil {
		s.fail(w, err)
		return
	}
	c, pairs, err := s.comparedPairs(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	out := struct {
		*Comparison
		Total  int    `json:"total"`
		Offset int    `json:"offset"`
		Pairs  []Pair `json:"pairs"`
	}{Comparison: c, Total: len(pairs), Offset: offset, Pairs: []Pair{}}
	for _, pr := range pairs[min(offset, len(pairs)):min(offset+limit, len(pairs))] {
		out.Pairs = append(out.Pairs, c.pair(pr))
	}
	writeJSON(w, http.StatusOK, out)
}

// compareExport writes the pairs a compare view shows, in its order, as
// CSV or JSONL (a Pair a line).
func (s *Server) compareExport(w http.ResponseWriter, r *http.Request) {
	format, err := exportFormat(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	c, pairs, err := s.comparedPairs(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	ew := newExport(w, format, fmt.Sprintf("run-%s-vs-run-%s.%s", c.Cand, c.Base, format),
		"model", "baselineModel", "dataset", "id", "change", "base", "cand", "delta", "baseError", "candError")
	for _, pr := range pairs {
		p := c.pair(pr)
		if err := ew.write(p, p.Model, p.BaselineModel, p.Dataset, p.ID, changeOf(p.Delta), optional(p.Base), optional(p.Cand),
			optional(p.Delta), p.BaseError, p.CandError); err != nil {
			return
		}
	}
	ew.flush()
}

// changeOf names a pair's change, as the page says it.
func changeOf(d *float64) string {
	switch {
	case d == nil:
		return ""
	case *d < 0:
		return "regressed"
	case *d > 0:
		return "improved"
	}
	return "same"
}

func changed(d float32, change string) bool {
	switch change {
	case "regressed":
		return d < 0
	case "improved":
		return d > 0
	case "same":
		return d == 0
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

// idIndex finds a run's rows by id. Its map is keyed by the ids' hashes
// rather than the ids (a third of a string map's time on a million, and
// no string per row); ids whose hash an earlier id has go to more.
type idIndex struct {
	r     *Run
	hash  func([]byte) uint64
	first map[uint64]int32
	more  map[string]int32
}

func newIDIndex(r *Run, size int) *idIndex {
	seed := maphash.MakeSeed()
	return &idIndex{r: r, hash: func(b []byte) uint64 { return maphash.Bytes(seed, b) }, first: make(map[uint64]int32, size), more: map[string]int32{}}
}

// add indexes row i; of rows with the same id, the last is found.
func (x *idIndex) add(i int32) {
	id := x.r.id(int(i))
	h := x.hash(id)
	if j, ok := x.first[h]; ok && !bytes.Equal(x.r.id(int(j)), id) {
		x.more[string(id)] = i
		return
	}
	x.first[h] = i
}

// get is the row of id.
func (x *idIndex) get(id []byte) (int32, bool) {
	if j, ok := x.first[x.hash(id)]; ok && bytes.Equal(x.r.id(int(j)), id) {
		return j, true
	}
	j, ok := x.more[string(id)]
	return j, ok
}

// len is how many distinct ids it has.
func (x *idIndex) len() int { return len(x.first) + len(x.more) }

// ids yields its distinct ids.
func (x *idIndex) ids(yield func([]byte) bool) {
	for _, j := range x.first {
		if !yield(x.r.id(int(j))) {
			return
		}
	}
	for id := range x.more {
		if !yield([]byte(id)) {
			return
		}
	}
}
