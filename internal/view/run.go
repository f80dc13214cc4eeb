// Package view serves proctor view: a local web page of runs, their samples
// and comparisons. A run's records are read once into a compact index (a
// row of numbers per sample, for filters and sorting) and a spill file of
// their JSON (for details, text search and export), so that a run of a
// million records fits in memory and its first page comes at once.
package view

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/valyala/fastjson"

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
	return LoadLines(id, source, dir, summary, func(fn func([]byte) error) error {
		var err error
		rerr := records(func(rec *results.Record) {
			if err != nil {
				return
			}
			var b []byte
			if b, err = json.Marshal(rec); err == nil {
				err = fn(b)
			}
		})
		if err != nil {
			return err
		}
		return rerr
	})
}

// indexed is what the index keeps of a record, decoded from its JSON.
type indexed struct {
	ID, Model, Dataset string
	// Scores are the record's scores, in its order.
	Scores                                []score
	Errored                               bool
	ErrorKind                             string
	Rescored, Pending                     bool
	Attempts                              int
	LatencyMillis, InputTokens, OutTokens int64
	Cost                                  float64 // NaN: unknown
}

type score struct {
	name  string
	value float64
}

// decoder decodes records' index fields with fastjson (no reflection: a
// fifth of encoding/json's time per record, measured on a million), and
// shares the strings that repeat (model, dataset, error kind, metric).
type decoder struct {
	p    fastjson.Parser
	strs map[string]string
}

// shared is b as a string, the same string for the same bytes.
func (d *decoder) shared(b []byte) string {
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(d.strs) < 4096 {
		d.strs[s] = s
	}
	return s
}

// decode reads a record's index fields in one pass over its keys.
func (d *decoder) decode(line []byte, rec *indexed) error {
	v, err := d.p.ParseBytes(line)
	if err != nil {
		return err
	}
	o, err := v.Object()
	if err != nil {
		return errors.New("not a JSON object")
	}
	*rec = indexed{Cost: math.NaN(), Scores: rec.Scores[:0]}
	judgeCost := 0.0
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) {
		case "id":
			rec.ID = string(v.GetStringBytes())
		case "model":
			rec.Model = d.shared(v.GetStringBytes())
		case "dataset":
			rec.Dataset = d.shared(v.GetStringBytes())
		case "error":
			rec.Errored = len(v.GetStringBytes()) > 0
		case "errorKind":
			rec.ErrorKind = d.shared(v.GetStringBytes())
		case "rescored":
			rec.Rescored = v.GetBool()
		case "judgePending":
			rec.Pending = len(v.GetArray()) > 0
		case "attempts":
			rec.Attempts = v.GetInt()
		case "latencyMillis":
			rec.LatencyMillis = v.GetInt64()
		case "inputTokens":
			rec.InputTokens = v.GetInt64()
		case "outputTokens":
			rec.OutTokens = v.GetInt64()
		case "cost":
			if v.Type() == fastjson.TypeNumber {
				rec.Cost = v.GetFloat64()
			}
		case "judgeCost":
			judgeCost = v.GetFloat64()
		case "scores":
			if so, err := v.Object(); err == nil {
				so.Visit(func(k []byte, sv *fastjson.Value) {
					rec.Scores = append(rec.Scores, score{d.shared(k), sv.GetFloat64()})
				})
			}
		}
	})
	rec.Cost += judgeCost // NaN stays NaN: unknown
	return nil
}

// batch is lines read together, decoded by one worker.
type batch struct {
	// buf holds the lines, each followed by a newline, as the spill file
	// takes them; lines are its slices.
	buf    []byte
	lines  [][]byte
	starts []int
	recs   []indexed
	err    error
	done   chan struct{}
}

// LoadLines reads a run's records as JSON lines (lines calls fn with each,
// once; fn keeps no reference to it) into its index, spilling them into a
// file of dir. The lines are decoded on every core, in batches, and
// indexed in their order.
func LoadLines(id, source, dir string, summary *compare.Summary, lines func(fn func([]byte) error) error) (*Run, error) {
	sp, err := newSpill(dir)
	if err != nil {
		return nil, err
	}
	r := &Run{ID: id, Source: source, Errors: map[string]int64{}, kinds: []string{""}, spill: sp}
	if summary != nil {
		r.Summary = *summary
	}
	ix := newIndexer(r)
	const per = 2048
	work := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	order := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	var workers sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		workers.Add(1)
		go func() {
			defer workers.Done()
			d := &decoder{strs: map[string]string{}}
			for b := range work {
				b.recs = make([]indexed, len(b.lines))
				for i, l := range b.lines {
					if err := d.decode(l, &b.recs[i]); err != nil && b.err == nil {
						b.err = fmt.Errorf("record %s: %w", clip(l), err)
					}
				}
				close(b.done)
			}
		}()
	}
	// The indexer takes the batches in the order they were read.
	indexed := make(chan error, 1)
	go func() {
		var err error
		for b := range order {
			<-b.done
			if err == nil {
				err = b.err
			}
			if err == nil {
				err = ix.add(b)
			}
		}
		indexed <- err
	}()
	newBatch := func() *batch { return &batch{done: make(chan struct{}), buf: make([]byte, 0, 1<<20)} }
	cur := newBatch()
	send := func() {
		order <- cur
		work <- cur
		cur = newBatch()
	}
	err = lines(func(l []byte) error {
		start := len(cur.buf)
		cur.buf = append(append(cur.buf, l...), '\n')
		cur.lines = append(cur.lines, cur.buf[start:start+len(l):start+len(l)])
		cur.starts = append(cur.starts, start)
		if len(cur.lines) == per {
			send()
		}
		return nil
	})
	if len(cur.lines) > 0 {
		send()
	}
	close(work)
	close(order)
	workers.Wait()
	if ierr := <-indexed; err == nil {
		err = ierr
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
	order2 := make([]int, len(r.rows))
	for i := range order2 {
		order2[i] = i
	}
	sort.SliceStable(order2, func(a, b int) bool {
		x, y := &r.rows[order2[a]], &r.rows[order2[b]]
		if x.model != y.model {
			return r.Models[x.model] < r.Models[y.model]
		}
		if x.dataset != y.dataset {
			return r.Datasets[x.dataset] < r.Datasets[y.dataset]
		}
		return false
	})
	if !slices.IsSorted(order2) {
		r.permute(order2)
	}
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

// clip is the start of a line, for an error.
func clip(l []byte) string {
	if len(l) > 80 {
		return string(l[:80]) + "…"
	}
	return string(l)
}

// indexer adds decoded records to a run's index, in order.
type indexer struct {
	r                    *Run
	metric               map[string]int
	model, dataset, kind map[string]int
}

func newIndexer(r *Run) *indexer {
	ix := &indexer{r: r, metric: map[string]int{}, model: map[string]int{}, dataset: map[string]int{}, kind: map[string]int{"": 0}}
	for _, s := range r.Summary.Results {
		for m := range s.Metrics {
			if _, ok := ix.metric[m]; !ok {
				ix.metric[m] = len(r.Metrics)
				r.Metrics = append(r.Metrics, m)
			}
		}
	}
	return ix
}

// widen adds metric m, first seen in a record after others were indexed,
// to every row.
func (ix *indexer) widen(m string) {
	r := ix.r
	ix.metric[m] = len(r.Metrics)
	r.Metrics = append(r.Metrics, m)
	k := len(r.Metrics)
	wide := make([]float32, 0, cap(r.rows)*k)
	for i := range r.rows {
		wide = append(wide, r.scores[i*(k-1):(i+1)*(k-1)]...)
		wide = append(wide, float32(math.NaN()))
	}
	r.scores = wide
}

func intern(m map[string]int, list *[]string, v string, limit int) (int, error) {
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

// add indexes a batch and spills its lines.
func (ix *indexer) add(b *batch) error {
	r := ix.r
	at, err := r.spill.writeAll(b.buf)
	if err != nil {
		return err
	}
	for j := range b.recs {
		rec := &b.recs[j]
		for _, sc := range rec.Scores {
			if _, ok := ix.metric[sc.name]; !ok {
				ix.widen(sc.name)
			}
		}
		mi, err := intern(ix.model, &r.Models, rec.Model, maxModels)
		if err != nil {
			return err
		}
		di, err := intern(ix.dataset, &r.Datasets, rec.Dataset, maxDatasets)
		if err != nil {
			return err
		}
		var ki int
		if rec.Errored {
			kind := rec.ErrorKind
			if kind == "" {
				kind = "error"
			}
			if ki, err = intern(ix.kind, &r.kinds, kind, maxKinds); err != nil {
				return err
			}
			r.Errors[kind]++
		}
		if len(b.lines[j]) > math.MaxInt32 {
			return fmt.Errorf("sample %s: a record of %d bytes", rec.ID, len(b.lines[j]))
		}
		off, n := at+int64(b.starts[j]), int32(len(b.lines[j]))
		r.rows = append(r.rows, row{
			id: rec.ID, model: uint16(mi), dataset: uint16(di), kind: uint8(ki),
			attempts: uint8(min(max(rec.Attempts, 0), math.MaxUint8)), rescored: rec.Rescored, pending: rec.Pending,
			latency: int32(min(rec.LatencyMillis, math.MaxInt32)),
			inTok:   int32(min(rec.InputTokens, math.MaxInt32)), outTok: int32(min(rec.OutTokens, math.MaxInt32)),
			cost: float32(rec.Cost), off: off, n: n,
		})
		at := len(r.scores)
		for range r.Metrics {
			r.scores = append(r.scores, float32(math.NaN()))
		}
		for _, sc := range rec.Scores {
			r.scores[at+ix.metric[sc.name]] = float32(sc.value)
		}
	}
	return nil
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

// writeAll appends b (lines, each ending in a newline) and says where it
// starts.
func (s *spill) writeAll(b []byte) (int64, error) {
	off := s.off
	if _, err := s.w.Write(b); err != nil {
		return 0, err
	}
	s.off += int64(len(b))
	return off, nil
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
