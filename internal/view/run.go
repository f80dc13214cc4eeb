// Package view serves proctor view: a local web page of runs, their samples
// and comparisons. A run's records are read once into a compact index (a
// row of numbers per sample, for filters and sorting) and a spill file of
// their JSON (for details, text search and export), so that a run of a
// million records fits in memory and its first page comes at once.
package view

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"

	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/results"
)

// Run is one run's results, as the page shows them.
type Run struct {
	// ID names the run in URLs: its position among the sources, from 1.
	ID string `json:"id"`
	// Source is where it was read: a directory, evaluation/NAME, s3://...
	Source string `json:"source"`
	// Phase and Reason are the Evaluation's, for a run read from one.
	Phase  string `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Summary is its summary.json: each model on each dataset, the
	// comparison with its baseline and the gate's verdict.
	Summary  compare.Summary `json:"summary"`
	Metrics  []string        `json:"metrics"`
	Models   []string        `json:"models"`
	Datasets []string        `json:"datasets"`
	// Errors counts the errored samples by kind.
	Errors map[string]int64 `json:"errors"`
	// Samples is how many records it has.
	Samples int `json:"samples"`

	selectCache

	rows   []row
	scores []float32 // len(Metrics) per row; NaN: no score
	kinds  []string  // error kinds; 0 is none
	spill  *spill
}

// row is a record's numbers; its JSON is in the spill file.
type row struct {
	id             string
	model, dataset uint16
	kind           uint8
	attempts       uint8
	rescored       bool
	pending        bool // awaiting a judge's verdicts
	latency        int32
	inTok, outTok  int32
	cost           float32 // NaN: unknown
	off            int64
	n              int32
}

// Limits of the index's compact fields.
const (
	maxModels   = math.MaxUint16
	maxDatasets = math.MaxUint16
	maxKinds    = math.MaxUint8
)

// Load reads a run's records (records calls fn with each, once) into its
// index, spilling their JSON into a file of dir. summary may be nil.
func Load(id, source, dir string, summary *compare.Summary, records func(fn func(*results.Record)) error) (*Run, error) {
	sp, err := newSpill(dir)
	if err != nil {
		return nil, err
	}
	r := &Run{ID: id, Source: source, Errors: map[string]int64{}, kinds: []string{""}, spill: sp}
	if summary != nil {
		r.Summary = *summary
	}
	metric := map[string]int{}
	model, dataset, kind := map[string]int{}, map[string]int{}, map[string]int{"": 0}
	for _, s := range r.Summary.Results {
		for m := range s.Metrics {
			if _, ok := metric[m]; !ok {
				metric[m] = len(r.Metrics)
				r.Metrics = append(r.Metrics, m)
			}
		}
	}
	// Metrics first seen in a record after others were indexed widen every row.
	widen := func(m string) {
		metric[m] = len(r.Metrics)
		r.Metrics = append(r.Metrics, m)
		k := len(r.Metrics)
		wide := make([]float32, 0, len(r.rows)*k)
		for i := range r.rows {
			wide = append(wide, r.scores[i*(k-1):(i+1)*(k-1)]...)
			wide = append(wide, float32(math.NaN()))
		}
		r.scores = wide
	}
	intern := func(m map[string]int, list *[]string, v string, limit int) (int, error) {
		i, ok := m[v]
		if !ok {
			if len(*list) >= limit {
				return 0, fmt.Errorf("more than %d distinct values of %q's kind", limit, v)
			}
			i = len(*list)
			m[v] = i
			*list = append(*list, v)
		}
		return i, nil
	}
	var loadErr error
	err = records(func(rec *results.Record) {
		if loadErr != nil {
			return
		}
		for m := range rec.Scores {
			if _, ok := metric[m]; !ok {
				widen(m)
			}
		}
		mi, err := intern(model, &r.Models, rec.Model, maxModels)
		if err != nil {
			loadErr = err
			return
		}
		di, err := intern(dataset, &r.Datasets, rec.Dataset, maxDatasets)
		if err != nil {
			loadErr = err
			return
		}
		var ki int
		if rec.Error != "" {
			if ki, err = intern(kind, &r.kinds, errorKind(rec), maxKinds); err != nil {
				loadErr = err
				return
			}
			r.Errors[r.kinds[ki]]++
		}
		off, n, err := sp.write(rec)
		if err != nil {
			loadErr = err
			return
		}
		cost := float32(math.NaN())
		if rec.Cost != nil {
			cost = float32(*rec.Cost)
			if rec.JudgeCost != nil {
				cost += float32(*rec.JudgeCost)
			}
		}
		r.rows = append(r.rows, row{
			id: rec.ID, model: uint16(mi), dataset: uint16(di), kind: uint8(ki),
			attempts: uint8(min(rec.Attempts, math.MaxUint8)), rescored: rec.Rescored, pending: len(rec.JudgePending) > 0,
			latency: int32(min(rec.LatencyMillis, math.MaxInt32)),
			inTok:   int32(min(rec.InputTokens, math.MaxInt32)), outTok: int32(min(rec.OutputTokens, math.MaxInt32)),
			cost: cost, off: off, n: n,
		})
		for _, m := range r.Metrics {
			v, ok := rec.Scores[m]
			if !ok {
				v = math.NaN()
			}
			r.scores = append(r.scores, float32(v))
		}
	})
	if err == nil {
		err = loadErr
	}
	if err == nil {
		err = sp.done()
	}
	if err != nil {
		sp.close()
		return nil, fmt.Errorf("reading the records of %s: %w", source, err)
	}
	r.Samples = len(r.rows)
	// Sample order within each model and dataset, as results.jsonl has it.
	order := make([]int, len(r.rows))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := &r.rows[order[a]], &r.rows[order[b]]
		if x.model != y.model {
			return r.Models[x.model] < r.Models[y.model]
		}
		if x.dataset != y.dataset {
			return r.Datasets[x.dataset] < r.Datasets[y.dataset]
		}
		return false
	})
	r.permute(order)
	r.sortMetrics()
	if len(r.Summary.Results) == 0 && len(r.rows) > 0 {
		// A results.jsonl alone: summarized as proctor run would, over the
		// samples it has.
		if err := r.summarize(); err != nil {
			r.Close()
			return nil, fmt.Errorf("summarizing %s: %w", source, err)
		}
	}
	return r, nil
}

// summarize makes the run's summaries from its records.
func (r *Run) summarize() error {
	aggs := map[[2]uint16]*results.Aggregate{}
	var order [][2]uint16
	for i := range r.rows {
		w := &r.rows[i]
		k := [2]uint16{w.model, w.dataset}
		if aggs[k] == nil {
			aggs[k] = results.NewAggregate(r.Models[w.model], r.Datasets[w.dataset], 0, r.Metrics)
			order = append(order, k)
		}
	}
	counts := map[[2]uint16]int64{}
	for i := range r.rows {
		w := &r.rows[i]
		k := [2]uint16{w.model, w.dataset}
		counts[k]++
		rec, err := r.Record(i)
		if err != nil {
			return err
		}
		aggs[k].Add(rec)
	}
	for _, k := range order {
		s := aggs[k].Summary()
		s.Total = counts[k]
		r.Summary.Results = append(r.Summary.Results, s)
	}
	return nil
}

// sortMetrics puts Metrics, and each row's scores, in name order.
func (r *Run) sortMetrics() {
	k := len(r.Metrics)
	cols := make([]int, k)
	for i := range cols {
		cols[i] = i
	}
	sort.Slice(cols, func(a, b int) bool { return r.Metrics[cols[a]] < r.Metrics[cols[b]] })
	names := make([]string, k)
	for i, c := range cols {
		names[i] = r.Metrics[c]
	}
	row := make([]float32, k)
	for i := range r.rows {
		s := r.scores[i*k : (i+1)*k]
		for j, c := range cols {
			row[j] = s[c]
		}
		copy(s, row)
	}
	r.Metrics = names
}

// permute puts the rows (and their scores) in order.
func (r *Run) permute(order []int) {
	k := len(r.Metrics)
	rows := make([]row, len(r.rows))
	scores := make([]float32, len(r.scores))
	for i, j := range order {
		rows[i] = r.rows[j]
		copy(scores[i*k:(i+1)*k], r.scores[j*k:(j+1)*k])
	}
	r.rows, r.scores = rows, scores
}

// errorKind is the kind a failed record shows: its errorKind, else "error".
func errorKind(rec *results.Record) string {
	if rec.ErrorKind != "" {
		return rec.ErrorKind
	}
	return "error"
}

// Close removes the run's spill file.
func (r *Run) Close() { r.spill.close() }

// score is row i's score of metric m (an index of Metrics).
func (r *Run) score(i, m int) float64 { return float64(r.scores[i*len(r.Metrics)+m]) }

// Record reads row i's whole record.
func (r *Run) Record(i int) (*results.Record, error) {
	b, err := r.spill.read(r.rows[i].off, r.rows[i].n)
	if err != nil {
		return nil, err
	}
	var rec results.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("sample %s: %w", r.rows[i].id, err)
	}
	return &rec, nil
}

// raw reads row i's record as JSON.
func (r *Run) raw(i int) ([]byte, error) { return r.spill.read(r.rows[i].off, r.rows[i].n) }

// spill is a file of records' JSON, written once, then read at offsets.
type spill struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	off int64
}

func newSpill(dir string) (*spill, error) {
	f, err := os.CreateTemp(dir, "run-*.jsonl")
	if err != nil {
		return nil, err
	}
	return &spill{f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (s *spill) write(rec *results.Record) (int64, int32, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, 0, err
	}
	if len(b) > math.MaxInt32 {
		return 0, 0, fmt.Errorf("sample %s: a record of %d bytes", rec.ID, len(b))
	}
	off := s.off
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		return 0, 0, err
	}
	s.off += int64(len(b)) + 1
	return off, int32(len(b)), nil
}

func (s *spill) done() error { return s.w.Flush() }

func (s *spill) read(off int64, n int32) ([]byte, error) {
	b := make([]byte, n)
	_, err := s.f.ReadAt(b, off)
	return b, err
}

func (s *spill) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		name := s.f.Name()
		s.f.Close()
		os.Remove(name)
		s.f = nil
	}
}
