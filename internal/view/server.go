package view

import (
	"embed"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"

	"github.com/go-logr/logr"
)

//go:embed assets
var assets embed.FS

// MaxPage is the most rows one page of samples holds.
const MaxPage = 1000

// Server serves the page and the data it shows: the runs, each run's
// samples (filtered, sorted, paged), one sample, comparisons of two runs,
// histograms, and exports of what a view shows.
type Server struct {
	runs []*Run
	log  logr.Logger
	mux  *http.ServeMux

	compMu  sync.Mutex
	compKey string
	comp    *Comparison
}

// NewServer serves runs.
func NewServer(runs []*Run, log logr.Logger) *Server {
	s := &Server{runs: runs, log: log, mux: http.NewServeMux()}
	static, _ := fs.Sub(assets, "assets") // embedded: it is there
	s.mux.Handle("GET /", http.FileServerFS(static))
	s.mux.HandleFunc("GET /api/runs", s.listRuns)
	s.mux.HandleFunc("GET /api/runs/{run}/samples", s.samples)
	s.mux.HandleFunc("GET /api/runs/{run}/sample", s.sample)
	s.mux.HandleFunc("GET /api/runs/{run}/export", s.export)
	s.mux.HandleFunc("GET /api/runs/{run}/histogram", s.histogram)
	s.mux.HandleFunc("GET /api/compare", s.compare)
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The page loads nothing from elsewhere, and nothing else may frame it.
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	s.mux.ServeHTTP(w, r)
}

// badRequest is an error in what the request asked for.
type badRequest struct{ err error }

func (e *badRequest) Error() string { return e.err.Error() }

func (s *Server) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		code = http.StatusBadRequest
	case errors.Is(err, errNotFound):
		code = http.StatusNotFound
	default:
		s.log.Error(err, "Failed to serve a request")
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

var errNotFound = errors.New("not found")

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v) // the client went away
}

// run is the run the request's {run} names.
func (s *Server) run(r *http.Request, name string) (*Run, error) {
	id := r.PathValue(name)
	if id == "" {
		id = r.URL.Query().Get(name)
	}
	for _, run := range s.runs {
		if run.ID == id {
			return run, nil
		}
	}
	return nil, fmt.Errorf("run %q: %w", id, errNotFound)
}

func (s *Server) listRuns(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.runs)
}

// Row is a sample as the samples table shows it.
type Row struct {
	Row          int32               `json:"row"`
	ID           string              `json:"id"`
	Model        string              `json:"model"`
	Dataset      string              `json:"dataset"`
	Scores       map[string]*float64 `json:"scores"`
	Error        string              `json:"error,omitempty"`
	Latency      int32               `json:"latencyMillis"`
	Cost         *float64            `json:"cost"`
	InputTokens  int32               `json:"inputTokens"`
	OutputTokens int32               `json:"outputTokens"`
	Attempts     uint8               `json:"attempts"`
	Rescored     bool                `json:"rescored,omitempty"`
}

// Row is row i as the table shows it.
func (r *Run) Row(i int32) Row {
	w := &r.rows[i]
	out := Row{Row: i, ID: string(r.id(int(i))), Model: r.Models[w.model], Dataset: r.Datasets[w.dataset], Scores: map[string]*float64{},
		Error: r.kinds[w.kind], Latency: w.latency, InputTokens: w.inTok, OutputTokens: w.outTok, Attempts: w.attempts, Rescored: w.rescored}
	for m, name := range r.Metrics {
		if v := r.score(int(i), m); !math.IsNaN(v) {
			out.Scores[name] = &v
		}
	}
	if c := float64(w.cost); !math.IsNaN(c) {
		out.Cost = &c
	}
	return out
}

// page reads offset and limit.
func page(v url.Values) (offset, limit int, err error) {
	offset, limit = 0, 100
	if s := v.Get("offset"); s != "" {
		if offset, err = strconv.Atoi(s); err != nil || offset < 0 {
			return 0, 0, &badRequest{fmt.Errorf("offset: %q is not a number of rows", s)}
		}
	}
	if s := v.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > MaxPage {
			return 0, 0, &badRequest{fmt.Errorf("limit: %q is not a number of rows from 1 to %d", s, MaxPage)}
		}
	}
	return offset, limit, nil
}

// selected is the run's rows the request's query selects.
func selected(run *Run, v url.Values) ([]int32, error) {
	q, err := ParseQuery(v)
	if err != nil {
		return nil, &badRequest{err}
	}
	rows, err := run.Select(q)
	if err != nil {
		return nil, &badRequest{err}
	}
	return rows, nil
}

func (s *Server) samples(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r, "run")
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
	rows, err := selected(run, v)
	if err != nil {
		s.fail(w, err)
		return
	}
	out := struct {
		Total  int   `json:"total"`
		Offset int   `json:"offset"`
		Rows   []Row `json:"rows"`
	}{Total: len(rows), Offset: offset, Rows: []Row{}}
	for _, i := range rows[min(offset, len(rows)):min(offset+limit, len(rows))] {
		out.Rows = append(out.Rows, run.Row(i))
	}
	writeJSON(w, http.StatusOK, out)
}

// sample serves one sample's whole record, by model, dataset and id.
func (s *Server) sample(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r, "run")
	if err != nil {
		s.fail(w, err)
		return
	}
	v := r.URL.Query()
	i := run.find(v.Get("model"), v.Get("dataset"), v.Get("id"))
	if i < 0 {
		s.fail(w, fmt.Errorf("sample %s of model %s on dataset %s: %w", v.Get("id"), v.Get("model"), v.Get("dataset"), errNotFound))
		return
	}
	b, err := run.raw(i)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// find is the row of a model's sample id on a dataset, or -1.
func (r *Run) find(model, dataset, id string) int {
	m, d := slices.Index(r.Models, model), slices.Index(r.Datasets, dataset)
	if m < 0 || d < 0 {
		return -1
	}
	for i := range r.rows {
		if w := &r.rows[i]; int(w.model) == m && int(w.dataset) == d && string(r.id(i)) == id {
			return i
		}
	}
	return -1
}

// export writes the rows a samples view selects, as CSV (the table's
// columns) or JSONL (whole records).
func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r, "run")
	if err != nil {
		s.fail(w, err)
		return
	}
	v := r.URL.Query()
	format := v.Get("format")
	if format != "csv" && format != "jsonl" {
		s.fail(w, &badRequest{fmt.Errorf("format: %q is not csv or jsonl", format)})
		return
	}
	rows, err := selected(run, v)
	if err != nil {
		s.fail(w, err)
		return
	}
	name := fmt.Sprintf("run-%s-samples.%s", run.ID, format)
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	if format == "jsonl" {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, i := range rows {
			b, err := run.raw(int(i))
			if err != nil {
				s.log.Error(err, "Failed to export a sample")
				return
			}
			if _, err := w.Write(append(b, '\n')); err != nil {
				return
			}
		}
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	cw := csv.NewWriter(w)
	head := []string{"model", "dataset", "id"}
	for _, m := range run.Metrics {
		head = append(head, "score:"+m)
	}
	head = append(head, "error", "latencyMillis", "cost", "inputTokens", "outputTokens", "attempts", "output")
	_ = cw.Write(head)
	for _, i := range rows {
		rec, err := run.Record(int(i))
		if err != nil {
			s.log.Error(err, "Failed to export a sample")
			return
		}
		row := run.Row(i)
		line := []string{row.Model, row.Dataset, row.ID}
		for _, m := range run.Metrics {
			line = append(line, optional(row.Scores[m]))
		}
		line = append(line, row.Error, strconv.Itoa(int(row.Latency)), optional(row.Cost),
			strconv.Itoa(int(row.InputTokens)), strconv.Itoa(int(row.OutputTokens)), strconv.Itoa(int(row.Attempts)), rec.Output)
		if err := cw.Write(line); err != nil {
			return
		}
	}
	cw.Flush()
}

func optional(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'g', -1, 64)
}
