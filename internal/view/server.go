package view

import (
	"embed"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

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
	s.mux.HandleFunc("GET /api/runs/{run}/errors", s.errorsOf)
	s.mux.HandleFunc("GET /api/compare", s.compare)
	s.mux.HandleFunc("GET /api/compare/export", s.compareExport)
	s.mux.HandleFunc("GET /api/summary/export", s.summaryExport)
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
			v = shortest(v)
			out.Scores[name] = &v
		}
	}
	if c := float64(w.cost); !math.IsNaN(c) {
		c = shortest(c)
		out.Cost = &c
	}
	return out
}

// shortest is v, a float32 of the index, as the shortest decimal that
// float32 reads as v: the 0.1 a record said, not 0.10000000149011612.
func shortest(v float64) float64 {
	x, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', -1, 32), 64)
	if err != nil {
		return v
	}
	return x
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
	// Select's errors in what was asked are badRequests; others are not.
	return run.Select(q)
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

// exportFormat is the format an export asks for: csv or jsonl.
func exportFormat(r *http.Request) (string, error) {
	format := r.URL.Query().Get("format")
	if format != "csv" && format != "jsonl" {
		return "", &badRequest{fmt.Errorf("format: %q is not csv or jsonl", format)}
	}
	return format, nil
}

// exportWriter writes an export's rows: as CSV under its header, or as
// JSON lines.
type exportWriter struct {
	w   http.ResponseWriter
	csv *csv.Writer
	enc *json.Encoder
}

func newExport(w http.ResponseWriter, format, name string, header ...string) *exportWriter {
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	ew := &exportWriter{w: w}
	if format == "jsonl" {
		w.Header().Set("Content-Type", "application/x-ndjson")
		ew.enc = json.NewEncoder(w)
		return ew
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	ew.csv = csv.NewWriter(w)
	_ = ew.csv.Write(header)
	return ew
}

// write writes a row: v as a JSON line, or the CSV cells.
func (ew *exportWriter) write(v any, cells ...string) error {
	if ew.enc != nil {
		return ew.enc.Encode(v)
	}
	return ew.csv.Write(cells)
}

func (ew *exportWriter) flush() {
	if ew.csv != nil {
		ew.csv.Flush()
	}
}

// export writes the rows a samples view selects, as CSV (the table's
// columns) or JSONL (whole records).
func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	run, err := s.run(r, "run")
	if err != nil {
		s.fail(w, err)
		return
	}
	format, err := exportFormat(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	rows, err := selected(run, r.URL.Query())
	if err != nil {
		s.fail(w, err)
		return
	}
	name := fmt.Sprintf("run-%s-samples.%s", run.ID, format)
	if format == "jsonl" {
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
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
	head := []string{"model", "dataset", "id"}
	for _, m := range run.Metrics {
		head = append(head, "score:"+m)
	}
	head = append(head, "error", "latencyMillis", "cost", "inputTokens", "outputTokens", "attempts", "output")
	ew := newExport(w, format, name, head...)
	for _, i := range rows {
		rec, err := run.Record(int(i))
		if err != nil {
			s.log.Error(err, "Failed to export a sample")
			return
		}
		// The record's own numbers, not the index's float32s.
		row := run.Row(i)
		line := []string{row.Model, row.Dataset, row.ID}
		for _, m := range run.Metrics {
			var v *float64
			if x, ok := rec.Scores[m]; ok {
				v = &x
			}
			line = append(line, optional(v))
		}
		cost := rec.Cost
		if cost != nil && rec.JudgeCost != nil {
			c := *cost + *rec.JudgeCost
			cost = &c
		}
		line = append(line, row.Error, strconv.Itoa(int(row.Latency)), optional(cost),
			strconv.Itoa(int(row.InputTokens)), strconv.Itoa(int(row.OutputTokens)), strconv.Itoa(int(row.Attempts)), rec.Output)
		if err := ew.write(nil, line...); err != nil {
			return
		}
	}
	ew.flush()
}

// SummaryRow is a line of the runs view's export: a metric of a model on a
// dataset in a run, with the run's and the pair's figures.
type SummaryRow struct {
	Run          string   `json:"run"`
	Source       string   `json:"source"`
	Phase        string   `json:"phase,omitempty"`
	StartedAt    string   `json:"startedAt,omitempty"`
	Model        string   `json:"model"`
	Dataset      string   `json:"dataset"`
	Total        int64    `json:"total"`
	Completed    int64    `json:"completed"`
	Errored      int64    `json:"errored"`
	Metric       string   `json:"metric,omitempty"`
	Mean         *float64 `json:"mean,omitempty"`
	Low          *float64 `json:"low,omitempty"`
	High         *float64 `json:"high,omitempty"`
	LatencyP50   int64    `json:"latencyP50Millis"`
	LatencyP95   int64    `json:"latencyP95Millis"`
	InputTokens  int64    `json:"inputTokens"`
	OutputTokens int64    `json:"outputTokens"`
	Cost         *float64 `json:"cost"` // with the judge's; nil: unknown
}

// summaryExport writes what the runs view shows: each run's models on
// each dataset, a row per metric, as CSV or JSONL.
func (s *Server) summaryExport(w http.ResponseWriter, r *http.Request) {
	format, err := exportFormat(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	ew := newExport(w, format, "runs."+format, "run", "source", "phase", "startedAt", "model", "dataset", "total", "completed", "errored",
		"metric", "mean", "low", "high", "latencyP50Millis", "latencyP95Millis", "inputTokens", "outputTokens", "cost")
	for _, run := range s.runs {
		started := ""
		if run.StartedAt != nil {
			started = run.StartedAt.UTC().Format(time.RFC3339)
		}
		for _, sum := range run.Summary.Results {
			row := SummaryRow{Run: run.ID, Source: run.Source, Phase: run.Phase, StartedAt: started, Model: sum.Model, Dataset: sum.Dataset,
				Total: sum.Total, Completed: sum.Completed, Errored: sum.Errored, LatencyP50: sum.LatencyMillis.P50, LatencyP95: sum.LatencyMillis.P95,
				InputTokens: sum.Tokens.Input, OutputTokens: sum.Tokens.Output}
			if c := sum.Cost.Model; c != nil && (!sum.Cost.Judged || sum.Cost.Judge != nil) {
				total := *c
				if sum.Cost.Judge != nil {
					total += *sum.Cost.Judge
				}
				row.Cost = &total
			}
			metrics := slices.Sorted(maps.Keys(sum.Metrics))
			if len(metrics) == 0 {
				metrics = []string{""}
			}
			for _, m := range metrics {
				row.Metric, row.Mean, row.Low, row.High = m, nil, nil, nil
				if v, ok := sum.Metrics[m]; ok {
					row.Mean = &v
				}
				if iv, ok := sum.Intervals[m]; ok {
					row.Low, row.High = &iv.Lo, &iv.Hi
				}
				if err := ew.write(row, row.Run, row.Source, row.Phase, row.StartedAt, row.Model, row.Dataset,
					strconv.FormatInt(row.Total, 10), strconv.FormatInt(row.Completed, 10), strconv.FormatInt(row.Errored, 10),
					row.Metric, optional(row.Mean), optional(row.Low), optional(row.High),
					strconv.FormatInt(row.LatencyP50, 10), strconv.FormatInt(row.LatencyP95, 10),
					strconv.FormatInt(row.InputTokens, 10), strconv.FormatInt(row.OutputTokens, 10), optional(row.Cost)); err != nil {
					return
				}
			}
		}
	}
	ew.flush()
}

func optional(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'g', -1, 64)
}
