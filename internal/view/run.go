// Package view serves proctor view: a local web page of runs, their samples
// and comparisons. A run's records are read once into a compact index (a
// row of numbers per sample, for filters and sorting), whose rows point at
// each record's JSON line: in the results file itself when the run is a
// local file, else in a spill file of its own. So a run of a million
// records fits in memory and its first page comes at once.
package view

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

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
	// StartedAt and EndedAt are when its first sample started and its last
	// ended, if its records say.
	StartedAt *time.Time `json:"startedAt,omitempty"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`

	selectCache
	errIndex errorIndex

	rows   []row
	ids    []byte    // the rows' ids, one after another
	scores []float32 // len(Metrics) per row; NaN: no score
	kinds  []string  // error kinds; 0 is none
	lines  *lineFile
}

// row is a record's numbers; its JSON is a line of the run's lineFile. It
// holds no pointer, so that the collector never scans the index.
type row struct {
	idOff          uint32 // its id is ids[idOff:idOff+idLen]
	idLen          uint16
	model, dataset uint16
	kind           uint8
	attempts       uint8
	rescored       bool
	pending        bool // awaiting a judge's verdicts
	latency        int32
	inTok, outTok  int32
	cost           float32 // with its judge's; NaN: unknown
	off            int64
	n              int32
}

// Limits of the index's compact fields.
const (
	maxModels   = math.MaxUint16
	maxDatasets = math.MaxUint16
	maxKinds    = math.MaxUint8
	maxIDBytes  = math.MaxUint16
	maxIDsBytes = math.MaxUint32
)

// id is row i's id, in the index's memory (not to be kept or changed).
func (r *Run) id(i int) []byte {
	w := &r.rows[i]
	return r.ids[w.idOff : w.idOff+uint32(w.idLen)]
}

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

// LoadLines reads a run's records as JSON lines (lines calls fn with each,
// once; fn keeps no reference to it) into its index, spilling them into a
// file of dir.
func LoadLines(id, source, dir string, summary *compare.Summary, lines func(fn func([]byte) error) error) (*Run, error) {
	lf, err := newSpill(dir)
	if err != nil {
		return nil, err
	}
	return load(id, source, summary, lf, func(emit func(buf []byte, base int64) error) error {
		buf := getChunk(0)
		flush := func() error {
			if len(buf) == 0 {
				return nil
			}
			base, err := lf.append(buf)
			if err == nil {
				err = emit(buf, base)
			}
			buf = getChunk(0)
			return err
		}
		err := lines(func(l []byte) error {
			if len(buf) > 0 && len(buf)+len(l)+1 > cap(buf) {
				if err := flush(); err != nil {
					return err
				}
			}
			buf = append(append(buf, l...), '\n')
			return nil
		})
		if err == nil {
			err = flush()
		}
		return err
	})
}

// LoadFile reads a run's results file (results.jsonl, or a directory that
// holds one) into its index. The index points into the file, which stays
// open until Close: a file replaced since (proctor run renames its new
// results into place) is still read as it was; one rewritten in place is
// noticed when a record is read.
func LoadFile(id, source, path string, summary *compare.Summary) (*Run, error) {
	file := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		file = filepath.Join(path, results.ResultsFile)
	}
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: no results there (a directory proctor run wrote, with its %s)", path, results.ResultsFile)
		}
		return nil, err
	}
	return load(id, source, summary, &lineFile{f: f, name: file}, func(emit func([]byte, int64) error) error {
		return readChunks(f, emit)
	})
}

// chunkSize is how much of a run one worker decodes at a time.
const chunkSize = 1 << 20

var chunks = sync.Pool{New: func() any { b := make([]byte, 0, chunkSize); return &b }}

// getChunk is an empty buffer of at least n bytes.
func getChunk(n int) []byte {
	if n > chunkSize {
		return make([]byte, 0, n)
	}
	return (*chunks.Get().(*[]byte))[:0]
}

func putChunk(b []byte) {
	if cap(b) == chunkSize {
		chunks.Put(&b)
	}
}

// readChunks reads f in chunks of whole lines, the last one's end
// perhaps without its newline.
func readChunks(f io.Reader, emit func(buf []byte, base int64) error) error {
	var base int64
	var carry []byte
	for eof := false; !eof; {
		size := chunkSize
		for size < 2*len(carry) {
			size *= 2
		}
		buf := append(getChunk(size), carry...)
		for len(buf) < cap(buf) {
			n, err := f.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				eof = true
				break
			}
			if err != nil {
				return err
			}
		}
		cut := bytes.LastIndexByte(buf, '\n') + 1
		if eof {
			cut = len(buf)
		}
		if cut == 0 {
			if len(buf) > results.MaxRecordLine {
				return fmt.Errorf("a line at byte %d is longer than %d MiB", base, results.MaxRecordLine>>20)
			}
			carry = buf // a line longer than the buffer: read on, into a larger one
			continue
		}
		carry = append([]byte(nil), buf[cut:]...)
		if err := emit(buf[:cut], base); err != nil {
			return err
		}
		base += int64(cut)
	}
	return nil
}

// chunk is whole lines read together, decoded by one worker.
type chunk struct {
	buf  []byte // lines, each ending in a newline (the last may lack one)
	base int64  // where buf starts in the run's lineFile
	// What the worker made of it: a record per line that is not empty.
	recs   []indexed
	ids    []byte  // the records' ids, one after another
	scores []score // the records' scores, one after another
	lines  int     // how many lines, empty ones too
	// first and last are the earliest startedAt and the latest endedAt.
	first, last []byte
	err         error
	errAt       int // the line of err, from 1
	done        chan struct{}
}

// indexed is what the index keeps of a record, decoded from its JSON.
type indexed struct {
	// Its id ends at the chunk's ids[idEnd] and its scores at
	// scores[scoreEnd]; its line is buf[start:start+n].
	idEnd, scoreEnd, start, n             int
	Model, Dataset                        string
	Errored, MaxTokensReached             bool
	ErrorKind                             string
	Rescored, Pending                     bool
	Attempts                              int
	LatencyMillis, InputTokens, OutTokens int64
	JudgeInputTokens, JudgeOutputTokens   int64
	// Cost and JudgeCost are NaN when unknown; Judged says JudgeCost was
	// there.
	Cost, JudgeCost float64
	Judged          bool
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

func newDecoder() *decoder { return &decoder{strs: map[string]string{}} }

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

// decodeChunk splits c into lines and decodes each.
func (d *decoder) decodeChunk(c *chunk) {
	b := c.buf
	c.recs = make([]indexed, 0, len(b)/128+1)
	c.ids = make([]byte, 0, len(b)/16)
	for start := 0; start < len(b); {
		end := bytes.IndexByte(b[start:], '\n')
		next := 0
		if end < 0 {
			end, next = len(b), len(b)
		} else {
			end += start
			next = end + 1
		}
		line := bytes.TrimSuffix(b[start:end], []byte{'\r'})
		c.lines++
		if len(line) > 0 {
			c.recs = append(c.recs, indexed{start: start, n: len(line)})
			if err := d.decode(line, c); err != nil {
				c.err, c.errAt = fmt.Errorf("%w (%s)", err, clip(line)), c.lines
				return
			}
		}
		start = next
	}
}

// decode reads the index fields of c's last record, from line, in one pass
// over its keys.
func (d *decoder) decode(line []byte, c *chunk) error {
	rec := &c.recs[len(c.recs)-1]
	rec.Cost, rec.JudgeCost = math.NaN(), math.NaN()
	v, err := d.p.ParseBytes(line)
	if err != nil {
		return err
	}
	o, err := v.Object()
	if err != nil {
		return errors.New("not a JSON object")
	}
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) {
		case "id":
			c.ids = append(c.ids, v.GetStringBytes()...)
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
		case "maxTokensReached":
			rec.MaxTokensReached = v.GetBool()
		case "attempts":
			rec.Attempts = v.GetInt()
		case "latencyMillis":
			rec.LatencyMillis = v.GetInt64()
		case "inputTokens":
			rec.InputTokens = v.GetInt64()
		case "outputTokens":
			rec.OutTokens = v.GetInt64()
		case "judgeInputTokens":
			rec.JudgeInputTokens = v.GetInt64()
		case "judgeOutputTokens":
			rec.JudgeOutputTokens = v.GetInt64()
		case "cost":
			if v.Type() == fastjson.TypeNumber {
				rec.Cost = v.GetFloat64()
			}
		case "judgeCost":
			if v.Type() == fastjson.TypeNumber {
				rec.JudgeCost, rec.Judged = v.GetFloat64(), true
			}
		case "startedAt":
			if b := v.GetStringBytes(); len(b) > 0 && (len(c.first) == 0 || earlier(b, c.first)) {
				c.first = append(c.first[:0], b...)
			}
		case "endedAt":
			if b := v.GetStringBytes(); len(b) > 0 && (len(c.last) == 0 || earlier(c.last, b)) {
				c.last = append(c.last[:0], b...)
			}
		case "scores":
			if so, err := v.Object(); err == nil {
				so.Visit(func(k []byte, sv *fastjson.Value) {
					c.scores = append(c.scores, score{d.shared(k), sv.GetFloat64()})
				})
			}
		}
	})
	rec.idEnd, rec.scoreEnd = len(c.ids), len(c.scores)
	return nil
}

// earlier says whether time a (RFC 3339) is before b. Times of one writer
// in UTC and of one length compare as text; others are parsed (one that
// cannot be is never earlier).
func earlier(a, b []byte) bool {
	if len(a) == len(b) && a[len(a)-1] == 'Z' && b[len(b)-1] == 'Z' {
		return bytes.Compare(a, b) < 0
	}
	ta, err := time.Parse(time.RFC3339Nano, string(a))
	if err != nil {
		return false
	}
	tb, err := time.Parse(time.RFC3339Nano, string(b))
	return err != nil || ta.Before(tb)
}

// load reads a run: produce sends its lines in chunks (in lf, at base),
// which are decoded on every core and indexed in their order.
func load(id, source string, summary *compare.Summary, lf *lineFile, produce func(emit func(buf []byte, base int64) error) error) (*Run, error) {
	r := &Run{ID: id, Source: source, Errors: map[string]int64{}, kinds: []string{""}, lines: lf}
	if summary != nil {
		r.Summary = *summary
	}
	ix := newIndexer(r, summary == nil)
	work := make(chan *chunk, 2*runtime.GOMAXPROCS(0))
	order := make(chan *chunk, 2*runtime.GOMAXPROCS(0))
	var workers sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		workers.Add(1)
		go func() {
			defer workers.Done()
			d := newDecoder()
			for c := range work {
				d.decodeChunk(c)
				close(c.done)
			}
		}()
	}
	// The indexer takes the chunks in the order they were read.
	indexed := make(chan error, 1)
	go func() {
		var err error
		for c := range order {
			<-c.done
			if err == nil && c.err != nil {
				err = fmt.Errorf("line %d: %w", ix.lines+c.errAt, c.err)
			}
			if err == nil {
				err = ix.add(c)
			}
			putChunk(c.buf)
		}
		indexed <- err
	}()
	err := produce(func(buf []byte, base int64) error {
		c := &chunk{buf: buf, base: base, done: make(chan struct{})}
		order <- c
		work <- c
		return nil
	})
	close(work)
	close(order)
	workers.Wait()
	if ierr := <-indexed; err == nil {
		err = ierr
	}
	if err != nil {
		lf.close()
		return nil, fmt.Errorf("reading the records of %s: %w", source, err)
	}
	ix.finish()
	r.Samples = len(r.rows)
	// Rows by model and dataset (by name), in the order results.jsonl has
	// each one's samples; most runs are in that order already.
	byPair := func(x, y *row) int {
		if x.model != y.model {
			return strings.Compare(r.Models[x.model], r.Models[y.model])
		}
		return strings.Compare(r.Datasets[x.dataset], r.Datasets[y.dataset])
	}
	if !slices.IsSortedFunc(r.rows, func(x, y row) int { return byPair(&x, &y) }) {
		order2 := make([]int, len(r.rows))
		for i := range order2 {
			order2[i] = i
		}
		slices.SortStableFunc(order2, func(a, b int) int { return byPair(&r.rows[a], &r.rows[b]) })
		r.permute(order2, ix.extras)
	}
	r.sortMetrics()
	if len(r.Summary.Results) == 0 && len(r.rows) > 0 {
		// A results.jsonl alone: summarized as proctor run would, over the
		// samples it has.
		r.summarize(ix.extras)
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
	// last are the last strings interned, and their indexes: records come
	// in runs of one model and dataset.
	last  [3]string
	lastI [3]int
	parts [][]row
	n     int // rows so far
	lines int // lines so far
	// extras are what a summary needs beyond the index, for a run read
	// without one.
	extras []extra
	keep   bool
}

// extra is a row's fields that only summarizing it needs.
type extra struct {
	cost, judgeCost       float64 // NaN: unknown
	judgeIn, judgeOut     int64
	judged, maxTokReached bool
}

func newIndexer(r *Run, summarize bool) *indexer {
	ix := &indexer{r: r, metric: map[string]int{}, model: map[string]int{}, dataset: map[string]int{}, kind: map[string]int{"": 0}, keep: summarize}
	ix.last = [3]string{"\x00model", "\x00dataset", "\x00kind"}
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
// to the n rows indexed.
func (ix *indexer) widen(m string, n int) {
	r := ix.r
	ix.metric[m] = len(r.Metrics)
	r.Metrics = append(r.Metrics, m)
	k := len(r.Metrics)
	wide := make([]float32, 0, (n+chunkSize/128)*k)
	for i := range n {
		wide = append(wide, r.scores[i*(k-1):(i+1)*(k-1)]...)
		wide = append(wide, float32(math.NaN()))
	}
	r.scores = wide
}

// intern is v's index in list (which m indexes), added if new; which is
// the list's slot in last.
func (ix *indexer) intern(which int, m map[string]int, list *[]string, v string, limit int) (int, error) {
	if v == ix.last[which] {
		return ix.lastI[which], nil
	}
	i, ok := m[v]
	if !ok {
		if len(*list) >= limit {
			return 0, fmt.Errorf("more than %d distinct values of %q's kind", limit, v)
		}
		i = len(*list)
		m[v] = i
		*list = append(*list, v)
	}
	ix.last[which], ix.lastI[which] = v, i
	return i, nil
}

// add indexes a chunk's records.
func (ix *indexer) add(c *chunk) error {
	r := ix.r
	ix.lines += c.lines
	if t, err := time.Parse(time.RFC3339Nano, string(c.first)); err == nil && (r.StartedAt == nil || t.Before(*r.StartedAt)) {
		r.StartedAt = &t
	}
	if t, err := time.Parse(time.RFC3339Nano, string(c.last)); err == nil && (r.EndedAt == nil || t.After(*r.EndedAt)) {
		r.EndedAt = &t
	}
	if len(r.ids)+len(c.ids) > maxIDsBytes {
		return fmt.Errorf("the samples' ids add up to more than %d GiB", maxIDsBytes>>30)
	}
	idBase := len(r.ids)
	r.ids = append(r.ids, c.ids...)
	rows := make([]row, 0, len(c.recs))
	idStart, scoreStart := 0, 0
	for j := range c.recs {
		rec := &c.recs[j]
		id := c.ids[idStart:rec.idEnd]
		scores := c.scores[scoreStart:rec.scoreEnd]
		scoreStart = rec.scoreEnd
		if len(id) > maxIDBytes {
			return fmt.Errorf("sample %.80s…: an id of %d bytes (at most %d)", id, len(id), maxIDBytes)
		}
		for _, sc := range scores {
			if _, ok := ix.metric[sc.name]; !ok {
				ix.widen(sc.name, ix.n+len(rows))
			}
		}
		mi, err := ix.intern(0, ix.model, &r.Models, rec.Model, maxModels)
		if err != nil {
			return err
		}
		di, err := ix.intern(1, ix.dataset, &r.Datasets, rec.Dataset, maxDatasets)
		if err != nil {
			return err
		}
		var ki int
		if rec.Errored {
			kind := rec.ErrorKind
			if kind == "" {
				kind = "error"
			}
			if ki, err = ix.intern(2, ix.kind, &r.kinds, kind, maxKinds); err != nil {
				return err
			}
			r.Errors[kind]++
		}
		cost := rec.Cost
		if rec.Judged {
			cost += rec.JudgeCost // NaN stays NaN: unknown
		}
		rows = append(rows, row{
			idOff: uint32(idBase + idStart), idLen: uint16(len(id)),
			model: uint16(mi), dataset: uint16(di), kind: uint8(ki),
			attempts: uint8(min(max(rec.Attempts, 0), math.MaxUint8)), rescored: rec.Rescored, pending: rec.Pending,
			latency: int32(min(rec.LatencyMillis, math.MaxInt32)),
			inTok:   int32(min(rec.InputTokens, math.MaxInt32)), outTok: int32(min(rec.OutTokens, math.MaxInt32)),
			cost: float32(cost), off: c.base + int64(rec.start), n: int32(rec.n),
		})
		idStart = rec.idEnd
		at := len(r.scores)
		for range r.Metrics {
			r.scores = append(r.scores, float32(math.NaN()))
		}
		for _, sc := range scores {
			r.scores[at+ix.metric[sc.name]] = float32(sc.value)
		}
		if ix.keep {
			ix.extras = append(ix.extras, extra{cost: rec.Cost, judgeCost: rec.JudgeCost, judgeIn: rec.JudgeInputTokens,
				judgeOut: rec.JudgeOutputTokens, judged: rec.Judged, maxTokReached: rec.MaxTokensReached})
		}
	}
	ix.parts = append(ix.parts, rows)
	ix.n += len(rows)
	return nil
}

// finish puts the rows of every chunk into one slice.
func (ix *indexer) finish() {
	rows := make([]row, 0, ix.n)
	for _, p := range ix.parts {
		rows = append(rows, p...)
	}
	ix.r.rows, ix.parts = rows, nil
}

// summarize makes the run's summaries from its index (and the extras it
// kept for this), as results.Aggregate makes proctor run's from its
// records. Scores are the index's (float32): a mean differs from proctor
// run's in its seventh digit at most.
func (r *Run) summarize(extras []extra) {
	aggs := map[[2]uint16]*results.Aggregate{}
	counts := map[[2]uint16]int64{}
	var order [][2]uint16
	rec := results.Record{Scores: map[string]float64{}}
	pending := []string{"pending"}
	for i := range r.rows {
		w, x := &r.rows[i], &extras[i]
		k := [2]uint16{w.model, w.dataset}
		if aggs[k] == nil {
			aggs[k] = results.NewAggregate(r.Models[w.model], r.Datasets[w.dataset], 0, r.Metrics)
			order = append(order, k)
		}
		counts[k]++
		clear(rec.Scores)
		for m, name := range r.Metrics {
			if v := r.score(i, m); !math.IsNaN(v) {
				rec.Scores[name] = v
			}
		}
		rec.Error, rec.ErrorKind = "", ""
		if w.kind != 0 {
			rec.Error, rec.ErrorKind = "error", r.kinds[w.kind]
		}
		rec.JudgePending = nil
		if w.pending {
			rec.JudgePending = pending
		}
		rec.MaxTokensReached, rec.LatencyMillis = x.maxTokReached, int64(w.latency)
		rec.InputTokens, rec.OutputTokens = int64(w.inTok), int64(w.outTok)
		rec.JudgeInputTokens, rec.JudgeOutputTokens = x.judgeIn, x.judgeOut
		rec.Cost, rec.JudgeCost = nil, nil
		if !math.IsNaN(x.cost) {
			rec.Cost = &x.cost
		}
		if x.judged {
			rec.JudgeCost = &x.judgeCost
		}
		aggs[k].Add(&rec)
	}
	for _, k := range order {
		s := aggs[k].Summary()
		s.Total = counts[k]
		r.Summary.Results = append(r.Summary.Results, s)
	}
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

// permute puts the rows (and their scores and extras) in order.
func (r *Run) permute(order []int, extras []extra) {
	k := len(r.Metrics)
	rows := make([]row, len(r.rows))
	scores := make([]float32, len(r.scores))
	for i, j := range order {
		rows[i] = r.rows[j]
		copy(scores[i*k:(i+1)*k], r.scores[j*k:(j+1)*k])
	}
	r.rows, r.scores = rows, scores
	if extras != nil {
		old := slices.Clone(extras)
		for i, j := range order {
			extras[i] = old[j]
		}
	}
}

// Close closes the run's file (and removes it, if it was a spill file).
func (r *Run) Close() { r.lines.close() }

// score is row i's score of metric m (an index of Metrics).
func (r *Run) score(i, m int) float64 { return float64(r.scores[i*len(r.Metrics)+m]) }

// Record reads row i's whole record.
func (r *Run) Record(i int) (*results.Record, error) {
	b, err := r.raw(i)
	if err != nil {
		return nil, err
	}
	var rec results.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("sample %s: %w", r.id(i), err)
	}
	return &rec, nil
}

// raw reads row i's record as JSON.
func (r *Run) raw(i int) ([]byte, error) {
	w := &r.rows[i]
	b, err := r.lines.read(w.off, w.n)
	if err != nil {
		return nil, err
	}
	return r.checked(i, b)
}

// checked is b, read as row i's line, unless the run's own results file no
// longer holds its record there (it was rewritten in place).
func (r *Run) checked(i int, b []byte) ([]byte, error) {
	if !r.lines.temp && !holds(b, r.id(i)) {
		return nil, r.lines.changed()
	}
	return b, nil
}

// holds says whether line could be the record of id: a JSON object that
// holds it (as is, unless JSON would escape it).
func holds(line, id []byte) bool {
	if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
		return false
	}
	for _, c := range id {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return true // escaped or not: it cannot tell
		}
	}
	return bytes.Contains(line, id)
}

// lineFile is a file of records' JSON lines, read at offsets: the run's
// own results file, or a spill file written as it is read.
type lineFile struct {
	mu   sync.Mutex
	f    *os.File
	name string
	temp bool  // a spill file, removed on close
	size int64 // a spill file's, so far
}

func newSpill(dir string) (*lineFile, error) {
	f, err := os.CreateTemp(dir, "run-*.jsonl")
	if err != nil {
		return nil, err
	}
	return &lineFile{f: f, name: f.Name(), temp: true}, nil
}

// append writes b (lines, each ending in a newline) at the spill file's
// end, and says where it starts.
func (l *lineFile) append(b []byte) (int64, error) {
	off := l.size
	if _, err := l.f.Write(b); err != nil {
		return 0, err
	}
	l.size += int64(len(b))
	return off, nil
}

func (l *lineFile) read(off int64, n int32) ([]byte, error) {
	l.mu.Lock()
	f := l.f
	l.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("%s: closed", l.name)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, l.changed()
		}
		return nil, err
	}
	return b, nil
}

// readAt reads into b from off, as much as the file has.
func (l *lineFile) readAt(b []byte, off int64) (int, error) {
	l.mu.Lock()
	f := l.f
	l.mu.Unlock()
	if f == nil {
		return 0, fmt.Errorf("%s: closed", l.name)
	}
	return f.ReadAt(b, off)
}

// changed is the error of a results file rewritten in place while read.
func (l *lineFile) changed() error {
	return fmt.Errorf("%s changed since proctor view read it: start proctor view again to see it as it is now", l.name)
}

func (l *lineFile) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		if l.temp {
			os.Remove(l.name)
		}
		l.f = nil
	}
}
