package view

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/results"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// candidateRecords are testRecords changed: model a now answers sample 1
// wrong (a regression) and sample 4 right (an improvement); b's sample 3
// no longer fails scoring, and b has no sample 5.
func candidateRecords() []*results.Record {
	var out []*results.Record
	for _, rec := range testRecords() {
		switch {
		case rec.Model == "a" && rec.ID == "d-1":
			rec.Scores["exact_match"], rec.Output = 0, "WRONG"
		case rec.Model == "a" && rec.ID == "d-4":
			rec.Scores["exact_match"] = 1
		case rec.Model == "b" && rec.ID == "d-3":
			rec.Error, rec.ErrorKind = "", ""
			delete(rec.Scores, "judge")
		case rec.Model == "b" && rec.ID == "d-5":
			continue
		}
		out = append(out, rec)
	}
	return out
}

func testServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewServer([]*Run{loadRecords(t, "1", "run-1", testRecords()), loadRecords(t, "2", "run-2", candidateRecords())}, testr.New(t)))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// golden compares got, indented, with testdata/NAME.json.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, got, "", "  "); err != nil {
		t.Fatalf("%s: %v: %s", name, err, got)
	}
	path := filepath.Join("testdata", name+".json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// TestEndpoints: what the page reads, against golden results.
func TestEndpoints(t *testing.T) {
	srv := testServer(t)
	cases := []struct{ name, path string }{
		{"runs", "/api/runs"},
		{"samples-page", "/api/runs/1/samples?sort=latency&order=desc&offset=2&limit=3"},
		{"samples-errored", "/api/runs/1/samples?status=errored"},
		{"samples-wrong-of-a-model", "/api/runs/2/samples?status=wrong&model=a"},
		{"samples-past-the-end", "/api/runs/1/samples?offset=50"},
		{"histogram-latency", "/api/runs/1/histogram?field=latency&bins=4"},
		{"histogram-score", "/api/runs/1/histogram?field=score:exact_match&bins=2&model=a"},
		{"compare", "/api/compare?base=1&cand=2&limit=4"},
		{"compare-regressions", "/api/compare?base=1&cand=2&change=regressed"},
		{"compare-against-a-baseline-model", "/api/compare?base=1&cand=2&baselineModel=a&model=b&limit=2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, srv, tc.path)
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", tc.path, code, body)
			}
			golden(t, tc.name, body)
		})
	}
}

func TestEndpointErrors(t *testing.T) {
	srv := testServer(t)
	cases := []struct {
		path string
		code int
		want string
	}{
		{"/api/runs/9/samples", http.StatusNotFound, `run "9": not found`},
		{"/api/runs/1/samples?limit=5000", http.StatusBadRequest, `limit: "5000" is not a number of rows from 1 to 1000`},
		{"/api/runs/1/samples?offset=-1", http.StatusBadRequest, `offset: "-1" is not a number of rows`},
		{"/api/runs/1/samples?status=lost", http.StatusBadRequest, `status: "lost" is not correct, wrong or errored`},
		{"/api/runs/1/sample?model=a&dataset=d&id=nope", http.StatusNotFound, "sample nope of model a on dataset d: not found"},
		{"/api/runs/1/export?format=xlsx", http.StatusBadRequest, `format: "xlsx" is not csv or jsonl`},
		{"/api/runs/1/histogram?field=mood", http.StatusBadRequest, `field: "mood" is not latency, cost or score:METRIC`},
		{"/api/compare?base=1&cand=2&metric=judge&change=worse", http.StatusBadRequest, `change: "worse" is not regressed, improved or same`},
		{"/api/compare?base=1&cand=2&baselineModel=z", http.StatusBadRequest, `baselineModel: run 1 has no model "z" (its models: a, b)`},
	}
	for _, tc := range cases {
		code, body := get(t, srv, tc.path)
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if code != tc.code || e.Error != tc.want {
			t.Errorf("%s: %d %q, want %d %q", tc.path, code, e.Error, tc.code, tc.want)
		}
	}
}

func TestSampleAndExport(t *testing.T) {
	srv := testServer(t)
	code, body := get(t, srv, "/api/runs/2/sample?model=a&dataset=d&id=d-1")
	var rec results.Record
	if err := json.Unmarshal(body, &rec); code != http.StatusOK || err != nil || rec.Output != "WRONG" || rec.Scores["exact_match"] != 0 {
		t.Errorf("sample a/d-1 of run 2: %d %s", code, body)
	}

	code, body = get(t, srv, "/api/runs/1/export?format=csv&status=errored")
	rows, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
	if code != http.StatusOK || err != nil {
		t.Fatalf("CSV export: %d %v %s", code, err, body)
	}
	want := [][]string{
		{"model", "dataset", "id", "score:exact_match", "score:judge", "error", "latencyMillis", "cost", "inputTokens", "outputTokens", "attempts", "output"},
		{"a", "d", "d-5", "0", "", "call", "600", "0.05", "0", "0", "1", ""},
		{"b", "d", "d-3", "0.5", "0", "scoring", "450", "", "0", "0", "1", "ANSWER 3"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("CSV export of the errored samples (-want +got):\n%s", diff)
	}

	code, body = get(t, srv, "/api/runs/1/export?format=jsonl&model=b&maxLatency=300")
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if code != http.StatusOK || len(lines) != 2 {
		t.Fatalf("JSONL export: %d, %d lines: %s", code, len(lines), body)
	}
	for _, l := range lines {
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Model != "b" {
			t.Errorf("JSONL line %s: %v", l, err)
		}
	}

	// What the compare view shows: regressions first.
	code, body = get(t, srv, "/api/compare/export?format=csv&base=1&cand=2&model=a")
	rows, err = csv.NewReader(bytes.NewReader(body)).ReadAll()
	if code != http.StatusOK || err != nil {
		t.Fatalf("the comparison's CSV export: %d %v %s", code, err, body)
	}
	want = [][]string{
		{"model", "baselineModel", "dataset", "id", "change", "base", "cand", "delta", "baseError", "candError"},
		{"a", "a", "d", "d-1", "regressed", "1", "0", "-1", "", ""},
		{"a", "a", "d", "d-4", "improved", "0", "1", "1", "", ""},
		{"a", "a", "d", "d-0", "same", "1", "1", "0", "", ""},
		{"a", "a", "d", "d-2", "same", "1", "1", "0", "", ""},
		{"a", "a", "d", "d-3", "same", "1", "1", "0", "", ""},
		{"a", "a", "d", "d-5", "same", "0", "0", "0", "call", "call"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("the comparison's CSV export (-want +got):\n%s", diff)
	}
	code, body = get(t, srv, "/api/compare/export?format=jsonl&base=1&cand=2&change=regressed")
	var pair Pair
	if err := json.Unmarshal(body, &pair); code != http.StatusOK || err != nil || strings.Count(string(body), "\n") != 1 || pair.ID != "d-1" || *pair.Delta != -1 {
		t.Errorf("the regressions' JSONL export: %d %v %s", code, err, body)
	}

	// What the runs view shows: a row per run, model, dataset and metric.
	code, body = get(t, srv, "/api/summary/export?format=csv")
	rows, err = csv.NewReader(bytes.NewReader(body)).ReadAll()
	if code != http.StatusOK || err != nil || len(rows) != 1+4+2 { // run 2 has no judge metric
		t.Fatalf("the runs' CSV export: %d %v %s", code, err, body)
	}
	if diff := cmp.Diff([]string{"run", "source", "phase", "startedAt", "model", "dataset", "total", "completed", "errored", "metric", "mean", "low", "high",
		"latencyP50Millis", "latencyP95Millis", "inputTokens", "outputTokens", "cost"}, rows[0]); diff != "" {
		t.Errorf("the runs' CSV header (-want +got):\n%s", diff)
	}
	// Run 1's model a: 4 of 6 right, its cost 0+0.01+...+0.05.
	if got := rows[1]; got[0] != "1" || got[4] != "a" || got[6] != "6" || got[8] != "1" || got[9] != "exact_match" ||
		got[10] != strconv.FormatFloat(4.0/6, 'g', -1, 64) || got[11] == "" || got[17] != "0.15" {
		t.Errorf("the runs' first CSV row: %q", got)
	}
	code, body = get(t, srv, "/api/summary/export?format=jsonl")
	if code != http.StatusOK || strings.Count(string(body), "\n") != 6 || !strings.Contains(string(body), `"cost":null`) {
		t.Errorf("the runs' JSONL export: %d %s", code, body)
	}

	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); resp.StatusCode != http.StatusOK || !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("the page: %d, CSP %q", resp.StatusCode, csp)
	}
}
