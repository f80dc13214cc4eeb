package view

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"
)

// Query selects and orders a run's samples: what the samples page's URL
// says (its filters are the page's, so a shared URL shows the same rows).
type Query struct {
	Model, Dataset string
	// Status is "" (all), "correct", "wrong" (scored below 1 on Metric,
	// not errored) or "errored". Kind keeps the samples errored of that kind.
	Status string
	Kind   string
	// Error keeps the errored samples whose message reads as this (an
	// ErrorGroup's Pattern).
	Error string
	// Metric is the score the status and MinScore/MaxScore look at;
	// default the run's first metric.
	Metric             string
	MinScore, MaxScore float64
	MinLatency         float64
	MaxLatency         float64
	MinCost, MaxCost   float64
	// Text is looked for in the sample's id, input, output and expected
	// value, regardless of case.
	Text string
	// Sort is a column: id, model, dataset, latency, cost, inputTokens,
	// outputTokens, attempts, error, or score:METRIC. Desc reverses it.
	Sort string
	Desc bool
}

// ParseQuery reads a query from a URL's parameters, naming the first bad one.
func ParseQuery(v url.Values) (Query, error) {
	q := Query{
		Model: v.Get("model"), Dataset: v.Get("dataset"), Status: v.Get("status"), Kind: v.Get("kind"), Error: v.Get("error"),
		Metric: v.Get("metric"), Text: v.Get("q"), Sort: v.Get("sort"), Desc: v.Get("order") == "desc",
		MinScore: math.Inf(-1), MaxScore: math.Inf(1), MinLatency: math.Inf(-1), MaxLatency: math.Inf(1),
		MinCost: math.Inf(-1), MaxCost: math.Inf(1),
	}
	switch q.Status {
	case "", "correct", "wrong", "errored":
	default:
		return q, fmt.Errorf("status: %q is not correct, wrong or errored", q.Status)
	}
	if o := v.Get("order"); o != "" && o != "asc" && o != "desc" {
		return q, fmt.Errorf("order: %q is not asc or desc", o)
	}
	for _, f := range []struct {
		name string
		to   *float64
	}{
		{"minScore", &q.MinScore}, {"maxScore", &q.MaxScore}, {"minLatency", &q.MinLatency}, {"maxLatency", &q.MaxLatency},
		{"minCost", &q.MinCost}, {"maxCost", &q.MaxCost},
	} {
		s := v.Get(f.name)
		if s == "" {
			continue
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(x) {
			return q, fmt.Errorf("%s: %q is not a number", f.name, s)
		}
		*f.to = x
	}
	return q, nil
}

// key is the query's identity, for the cache of its result.
func (q Query) key() string { return fmt.Sprintf("%#v", q) }

// columns a sort can name, besides score:METRIC.
var columns = []string{"id", "model", "dataset", "latency", "cost", "inputTokens", "outputTokens", "attempts", "error"}

// Select returns the rows q selects, in its order.
func (r *Run) Select(q Query) ([]int32, error) {
	r.cacheMu.Lock()
	defer r.cacheMu.Unlock()
	if r.cacheKey == q.key() && r.cached != nil {
		return r.cached, nil
	}
	out, err := r.selectRows(q)
	if err != nil {
		return nil, err
	}
	r.cacheKey, r.cached = q.key(), out
	return out, nil
}

func (r *Run) selectRows(q Query) ([]int32, error) {
	metric := -1
	if q.Metric != "" {
		if metric = slices.Index(r.Metrics, q.Metric); metric < 0 {
			return nil, &badRequest{fmt.Errorf("metric: the run has no metric %q (it has %s)", q.Metric, strings.Join(r.Metrics, ", "))}
		}
	} else if len(r.Metrics) > 0 {
		metric = 0
	}
	model, dataset, kind := -1, -1, -1
	if q.Model != "" {
		if model = slices.Index(r.Models, q.Model); model < 0 {
			return []int32{}, nil
		}
	}
	if q.Dataset != "" {
		if dataset = slices.Index(r.Datasets, q.Dataset); dataset < 0 {
			return []int32{}, nil
		}
	}
	if q.Kind != "" {
		if kind = slices.Index(r.kinds, q.Kind); kind <= 0 {
			return []int32{}, nil
		}
	}
	scored := !math.IsInf(q.MinScore, -1) || !math.IsInf(q.MaxScore, 1)
	if (scored || q.Status == "wrong" || q.Status == "correct") && metric < 0 {
		return nil, &badRequest{fmt.Errorf("metric: the run has no metric to filter by")}
	}
	var groups *errorIndex
	if q.Error != "" {
		var err error
		if groups, err = r.errorGroups(); err != nil {
			return nil, err
		}
	}
	out := make([]int32, 0, len(r.rows))
	for i := range r.rows {
		w := &r.rows[i]
		if (model >= 0 && int(w.model) != model) || (dataset >= 0 && int(w.dataset) != dataset) {
			continue
		}
		if groups != nil && !groups.inGroup(i, q.Error) {
			continue
		}
		if kind > 0 && int(w.kind) != kind {
			continue // an error kind: errored of it, whatever the status says
		}
		switch q.Status {
		case "errored":
			if w.kind == 0 {
				continue
			}
		case "wrong":
			if s := r.score(i, metric); w.kind != 0 || math.IsNaN(s) || s >= 1 {
				continue
			}
		case "correct":
			if s := r.score(i, metric); w.kind != 0 || math.IsNaN(s) || s < 1 {
				continue
			}
		}
		if scored {
			if s := r.score(i, metric); math.IsNaN(s) || s < q.MinScore || s > q.MaxScore {
				continue
			}
		}
		if l := float64(w.latency); l < q.MinLatency || l > q.MaxLatency {
			continue
		}
		if !math.IsInf(q.MinCost, -1) || !math.IsInf(q.MaxCost, 1) {
			if c := float64(w.cost); math.IsNaN(c) || c < q.MinCost || c > q.MaxCost {
				continue
			}
		}
		out = append(out, int32(i))
	}
	if q.Text != "" {
		var err error
		if out, err = r.search(out, q.Text); err != nil {
			return nil, err
		}
	}
	if err := r.sortRows(out, q.Sort, q.Desc); err != nil {
		return nil, err
	}
	return out, nil
}

// search keeps the rows whose id, input, output or expected value holds
// text, regardless of case. The rows' lines are read in large windows (the
// rows are mostly in file order) on every core; a line that cannot hold
// the text anywhere is passed over undecoded (mayHold), and only the rest
// are decoded.
func (r *Run) search(rows []int32, text string) ([]int32, error) {
	needle := bytes.ToLower([]byte(text))
	plain := plainNeedle(needle)
	keep := make([]bool, len(rows))
	parts := min(runtime.GOMAXPROCS(0), max(1, len(rows)/1024))
	var g errgroup.Group
	for p := range parts {
		lo, hi := p*len(rows)/parts, (p+1)*len(rows)/parts
		g.Go(func() error {
			var fields struct {
				Input    json.RawMessage `json:"input"`
				Output   string          `json:"output"`
				Expected json.RawMessage `json:"expected"`
			}
			win := &window{lf: r.lines}
			for k := lo; k < hi; k++ {
				i := int(rows[k])
				if containsFold(r.id(i), needle) {
					keep[k] = true
					continue
				}
				b, err := win.line(r.rows[i].off, r.rows[i].n)
				if err == nil {
					b, err = r.checked(i, b)
				}
				if err != nil {
					return err
				}
				if plain && !mayHold(b, needle) {
					continue
				}
				fields.Input, fields.Output, fields.Expected = nil, "", nil
				if err := json.Unmarshal(b, &fields); err != nil {
					return fmt.Errorf("sample %s: %w", r.id(i), err)
				}
				keep[k] = containsFold([]byte(fields.Output), needle) || containsFold(unquoted(fields.Input), needle) ||
					containsFold(unquoted(fields.Expected), needle)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := rows[:0]
	for k, i := range rows {
		if keep[k] {
			out = append(out, i)
		}
	}
	return out, nil
}

// plainNeedle says whether a lower-case needle is made of characters that
// JSON writes as they are, unless as \uXXXX: not a quote, backslash, slash
// ("\/" is JSON for "/") or control character.
func plainNeedle(needle []byte) bool {
	for _, c := range needle {
		if c < 0x20 || c == '"' || c == '\\' || c == '/' {
			return false
		}
	}
	return len(needle) > 0
}

// mayHold says whether a record's line may hold a plain needle in one of
// its strings once they are decoded. Decoding changes only escapes; with
// no \uXXXX in the line, the others make only characters a plain needle
// lacks, so a string that holds the needle holds it as is in the line. A
// line with \u, or not valid UTF-8, may hold it.
func mayHold(line, needle []byte) bool {
	if bytes.Contains(line, []byte(`\u`)) {
		return true
	}
	ascii := true
	for _, c := range line {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return indexFoldASCII(line, needle) >= 0
	}
	if !utf8.Valid(line) {
		return true
	}
	return bytes.Contains(bytes.ToLower(line), needle)
}

// indexFoldASCII is where s (ASCII) holds the lower-case needle, regardless
// of case, or -1. (bytes.ToLower would copy every line.)
func indexFoldASCII(s, needle []byte) int {
	first := needle[0]
	upper := first
	if 'a' <= first && first <= 'z' {
		upper -= 'a' - 'A'
	}
	for i := 0; i+len(needle) <= len(s); i++ {
		if c := s[i]; c != first && c != upper {
			// Skip to the next byte that can start it.
			j := bytes.IndexByte(s[i:len(s)-len(needle)+1], first)
			if upper != first {
				if k := bytes.IndexByte(s[i:len(s)-len(needle)+1], upper); k >= 0 && (j < 0 || k < j) {
					j = k
				}
			}
			if j < 0 {
				return -1
			}
			i += j
		}
		if asciiEqualFold(s[i:i+len(needle)], needle) {
			return i
		}
	}
	return -1
}

// asciiEqualFold says whether s (ASCII) is the lower-case needle, regardless
// of case.
func asciiEqualFold(s, needle []byte) bool {
	for i, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != needle[i] {
			return false
		}
	}
	return true
}

// window reads lines of a lineFile through a buffer of a large part of it,
// so that reading lines in file order costs a read per MiB, not per line.
type window struct {
	lf  *lineFile
	buf []byte
	at  int64 // where buf starts in the file
}

func (w *window) line(off int64, n int32) ([]byte, error) {
	if off >= w.at && off+int64(n) <= w.at+int64(len(w.buf)) {
		return w.buf[off-w.at : off-w.at+int64(n)], nil
	}
	size := max(chunkSize, int(n))
	if cap(w.buf) < size {
		w.buf = make([]byte, size)
	}
	w.buf = w.buf[:size]
	got, err := w.lf.readAt(w.buf, off)
	if got < int(n) {
		if err == nil || errors.Is(err, io.EOF) {
			err = w.lf.changed()
		}
		return nil, err
	}
	w.buf, w.at = w.buf[:got], off
	return w.buf[:n], nil
}

// unquoted is a JSON value's text: a string's, unescaped, else the JSON.
func unquoted(b json.RawMessage) []byte {
	var s string
	if len(b) > 0 && b[0] == '"' && json.Unmarshal(b, &s) == nil {
		return []byte(s)
	}
	return b
}

// containsFold says whether s holds the lower-case needle, regardless of case.
func containsFold(s, needle []byte) bool {
	if len(needle) == 0 {
		return true
	}
	if utf8.Valid(s) {
		return bytes.Contains(bytes.ToLower(s), needle)
	}
	return bytes.Contains(s, needle)
}

// sortRows orders rows by column (stable: ties keep sample order).
func (r *Run) sortRows(rows []int32, column string, desc bool) error {
	var less func(a, b int32) int
	switch {
	case column == "":
		return nil
	case strings.HasPrefix(column, "score:"):
		m := slices.Index(r.Metrics, strings.TrimPrefix(column, "score:"))
		if m < 0 {
			return &badRequest{fmt.Errorf("sort: the run has no metric %q", strings.TrimPrefix(column, "score:"))}
		}
		less = func(a, b int32) int { return cmpFloat(r.score(int(a), m), r.score(int(b), m), desc) }
	case column == "id":
		less = func(a, b int32) int { return bytes.Compare(r.id(int(a)), r.id(int(b))) }
	case column == "model":
		less = func(a, b int32) int { return strings.Compare(r.Models[r.rows[a].model], r.Models[r.rows[b].model]) }
	case column == "dataset":
		less = func(a, b int32) int {
			return strings.Compare(r.Datasets[r.rows[a].dataset], r.Datasets[r.rows[b].dataset])
		}
	case column == "latency":
		less = func(a, b int32) int { return int(r.rows[a].latency) - int(r.rows[b].latency) }
	case column == "cost":
		less = func(a, b int32) int { return cmpFloat(float64(r.rows[a].cost), float64(r.rows[b].cost), desc) }
	case column == "inputTokens":
		less = func(a, b int32) int { return int(r.rows[a].inTok) - int(r.rows[b].inTok) }
	case column == "outputTokens":
		less = func(a, b int32) int { return int(r.rows[a].outTok) - int(r.rows[b].outTok) }
	case column == "attempts":
		less = func(a, b int32) int { return int(r.rows[a].attempts) - int(r.rows[b].attempts) }
	case column == "error":
		less = func(a, b int32) int { return strings.Compare(r.kinds[r.rows[a].kind], r.kinds[r.rows[b].kind]) }
	default:
		return &badRequest{fmt.Errorf("sort: %q is not a column (%s, or score:METRIC)", column, strings.Join(columns, ", "))}
	}
	if desc {
		asc := less
		less = func(a, b int32) int { return asc(b, a) }
	}
	// (cmpFloat is given desc so that no value stays last either way.)
	slices.SortStableFunc(rows, less)
	return nil
}

// cmpFloat orders numbers, with NaN (no value) after every number: in a
// sort reversed (desc) too, which calls it with a and b swapped.
func cmpFloat(a, b float64, desc bool) int {
	last := 1
	if desc {
		last = -1
	}
	switch {
	case math.IsNaN(a) && math.IsNaN(b):
		return 0
	case math.IsNaN(a):
		return last
	case math.IsNaN(b):
		return -last
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// selectCache is the last query's rows, which paging through it reads again.
type selectCache struct {
	cacheMu  sync.Mutex
	cacheKey string
	cached   []int32
}
