package view

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Histogram counts the selected samples' values of a field in equal bins.
type Histogram struct {
	Field string  `json:"field"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	// Counts[i] counts values in [Min+i*w, Min+(i+1)*w), the last bin
	// closed, where w = (Max-Min)/len(Counts).
	Counts []int `json:"counts"`
	// None counts samples without a value (no score, an unknown cost).
	None int `json:"none"`
}

// histogram bins field (score:METRIC, latency or cost) of rows.
func (r *Run) histogram(rows []int32, field string, bins int) (*Histogram, error) {
	var value func(i int32) float64
	switch {
	case strings.HasPrefix(field, "score:"):
		m := slices.Index(r.Metrics, strings.TrimPrefix(field, "score:"))
		if m < 0 {
			return nil, fmt.Errorf("field: the run has no metric %q", strings.TrimPrefix(field, "score:"))
		}
		value = func(i int32) float64 { return r.score(int(i), m) }
	case field == "latency":
		value = func(i int32) float64 { return float64(r.rows[i].latency) }
	case field == "cost":
		value = func(i int32) float64 { return float64(r.rows[i].cost) }
	default:
		return nil, fmt.Errorf("field: %q is not latency, cost or score:METRIC", field)
	}
	h := &Histogram{Field: field, Min: math.Inf(1), Max: math.Inf(-1), Counts: make([]int, bins)}
	for _, i := range rows {
		v := value(i)
		if math.IsNaN(v) {
			h.None++
			continue
		}
		h.Min, h.Max = math.Min(h.Min, v), math.Max(h.Max, v)
	}
	if math.IsInf(h.Min, 1) {
		h.Min, h.Max = 0, 0
		return h, nil
	}
	if strings.HasPrefix(field, "score:") && h.Min >= 0 && h.Max <= 1 {
		h.Min, h.Max = 0, 1 // scores: the whole scale
	}
	width := (h.Max - h.Min) / float64(bins)
	for _, i := range rows {
		v := value(i)
		if math.IsNaN(v) {
			continue
		}
		b := bins - 1
		if width > 0 {
			b = min(int((v-h.Min)/width), bins-1)
		}
		h.Counts[b]++
	}
	return h, nil
}

func (s *Server) histogram(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r, "run")
	if err != nil {
		s.fail(w, err)
		return
	}
	v := r.URL.Query()
	bins := 20
	if b := v.Get("bins"); b != "" {
		if bins, err = strconv.Atoi(b); err != nil || bins < 1 || bins > 200 {
			s.fail(w, &badRequest{fmt.Errorf("bins: %q is not a number from 1 to 200", b)})
			return
		}
	}
	rows, err := selected(run, v)
	if err != nil {
		s.fail(w, err)
		return
	}
	h, err := run.histogram(rows, v.Get("field"), bins)
	if err != nil {
		s.fail(w, &badRequest{err})
		return
	}
	writeJSON(w, http.StatusOK, h)
}
