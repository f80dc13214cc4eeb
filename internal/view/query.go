package view

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Query selects and orders a run's samples: what the samples page's URL
// says (its filters are the page's, so a shared URL shows the same rows).
type Query struct {
	Model, Dataset string
	// Status is "" (all), "correct", "wrong" (scored below 1 on Metric,
	// not errored) or "errored" (of Kind, if set).
	Status string
	Kind   string
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
		Model: v.Get("model"), Dataset: v.Get("dataset"), Status: v.Get("status"), Kind: v.Get("kind"),
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
			return nil, fmt.Errorf("metric: the run has no metric %q (it has %s)", q.Metric, strings.Join(r.Metrics, ", "))
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
		return nil, fmt.Errorf("metric: the run has no metric to filter by")
	}
	out := make([]int32, 0, len(r.rows))
	for i := range r.rows {
		w := &r.rows[i]
		if (model >= 0 && int(w.model) != model) || (dataset >= 0 && int(w.dataset) != dataset) {
			continue
		}
		switch q.Status {
		case "errored":
			if w.kind == 0 || (kind > 0 && int(w.kind) != kind) {
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
// text, regardless of case.
func (r *Run) search(rows []int32, text string) ([]int32, error) {
	needle := bytes.ToLower([]byte(text))
	var fields struct {
		Input    json.RawMessage `json:"input"`
		Output   string          `json:"output"`
		Expected json.RawMessage `json:"expected"`
	}
	out := rows[:0]
	for _, i := range rows {
		if bytes.Contains(bytes.ToLower(r.id(int(i))), needle) {
			out = append(out, i)
			continue
		}
		b, err := r.raw(int(i))
		if err != nil {
			return nil, err
		}
		fields.Input, fields.Output, fields.Expected = nil, "", nil
		if err := json.Unmarshal(b, &fields); err != nil {
			return nil, err
		}
		if containsFold([]byte(fields.Output), needle) || containsFold(unquoted(fields.Input), needle) || containsFold(unquoted(fields.Expected), needle) {
			out = append(out, i)
		}
	}
	return out, nil
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
			return fmt.Errorf("sort: the run has no metric %q", strings.TrimPrefix(column, "score:"))
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
		return fmt.Errorf("sort: %q is not a column (%s, or score:METRIC)", column, strings.Join(columns, ", "))
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
