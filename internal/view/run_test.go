package view

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proctor-dev/proctor/runner/results"
)

// writeLines writes recs as a results.jsonl in a new directory, with
// between them what between says (by position: after record i).
func writeLines(t *testing.T, recs []*results.Record, between func(i int) string) string {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	for i, rec := range recs {
		l, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(l)
		b.WriteString(between(i))
	}
	if err := os.WriteFile(filepath.Join(dir, results.ResultsFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLoadFile reads a results file in place as Load reads the same
// records: lines ending in CRLF, empty lines, a record longer than a chunk
// (so read across several), and no newline at the end.
func TestLoadFile(t *testing.T) {
	recs := testRecords()
	recs[2].Output = strings.Repeat("long ", 3*chunkSize/5) // 3 chunks
	dir := writeLines(t, recs, func(i int) string {
		switch {
		case i == len(recs)-1:
			return ""
		case i%3 == 0:
			return "\r\n"
		case i%3 == 1:
			return "\n\n"
		}
		return "\n"
	})
	got, err := LoadFile("1", "test", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	want := loadRecords(t, "1", "test", recs)
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Run{}), cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("the run (-Load +LoadFile):\n%s", diff)
	}
	if len(got.rows) != len(want.rows) {
		t.Fatalf("%d rows, want %d", len(got.rows), len(want.rows))
	}
	for i := range want.rows {
		if diff := cmp.Diff(want.Row(int32(i)), got.Row(int32(i))); diff != "" {
			t.Errorf("row %d (-Load +LoadFile):\n%s", i, diff)
		}
		w, err := want.Record(i)
		if err != nil {
			t.Fatal(err)
		}
		g, err := got.Record(i)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("record %d (-Load +LoadFile):\n%s", i, diff)
		}
	}
}

func TestLoadFileErrors(t *testing.T) {
	recs := testRecords()[:4]
	t.Run("a malformed line is named", func(t *testing.T) {
		dir := writeLines(t, recs, func(i int) string {
			if i == 1 {
				return "\n\n{\"id\": \"x\", \"model\": \n"
			}
			return "\n"
		})
		_, err := LoadFile("1", "test", dir, nil)
		if err == nil || !strings.Contains(err.Error(), "line 4:") {
			t.Errorf("error %v, want one naming line 4", err)
		}
	})
	t.Run("no results there", func(t *testing.T) {
		_, err := LoadFile("1", "test", t.TempDir(), nil)
		if err == nil || !strings.Contains(err.Error(), "no results there") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("a file rewritten in place is noticed", func(t *testing.T) {
		dir := writeLines(t, recs, func(int) string { return "\n" })
		r, err := LoadFile("1", "test", dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		file := filepath.Join(dir, results.ResultsFile)
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// The same records, their ids changed (as if another run's): the
		// offsets now fall elsewhere.
		if err := os.WriteFile(file, bytes.ReplaceAll(b, []byte(`"d-`), []byte(`"e-`)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Record(1); err == nil || !strings.Contains(err.Error(), "changed since proctor view read it") {
			t.Errorf("reading a record of a changed file: %v", err)
		}
		// Cut short: past its end.
		if err := os.Truncate(file, 10); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Record(3); err == nil || !strings.Contains(err.Error(), "changed since proctor view read it") {
			t.Errorf("reading a record of a truncated file: %v", err)
		}
	})
	t.Run("a file replaced is read as it was", func(t *testing.T) {
		dir := writeLines(t, recs, func(int) string { return "\n" })
		r, err := LoadFile("1", "test", dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		file := filepath.Join(dir, results.ResultsFile)
		if err := os.WriteFile(file+".new", []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
		if rec, err := r.Record(1); err != nil || rec.ID != recs[1].ID {
			t.Errorf("record 1 of a replaced file: %v, %v", rec, err)
		}
	})
}

// TestSummarizeAsProctorRun: a run read without its summary is summarized
// from its index as results.Aggregate summarizes the records themselves.
func TestSummarizeAsProctorRun(t *testing.T) {
	recs := testRecords()
	for i, rec := range recs {
		rec.InputTokens, rec.OutputTokens = int64(10+i), int64(3*i)
		switch i % 4 {
		case 0:
			jc := 0.001 * float64(i)
			rec.JudgeCost, rec.JudgeInputTokens, rec.JudgeOutputTokens = &jc, 7, 2
		case 1:
			rec.MaxTokensReached = true
		case 2:
			rec.JudgeInputTokens = 5 // a judge without pricing
		}
	}
	recs[7].JudgePending = []string{"judge"}
	r := loadRecords(t, "1", "test", recs)
	var want []results.Summary
	for _, m := range []string{"a", "b"} {
		agg := results.NewAggregate(m, "d", 0, []string{"exact_match", "judge"})
		n := int64(0)
		for _, rec := range recs {
			if rec.Model == m {
				agg.Add(rec)
				n++
			}
		}
		s := agg.Summary()
		s.Total = n
		want = append(want, s)
	}
	if diff := cmp.Diff(want, r.Summary.Results, cmpopts.EquateApprox(1e-6, 1e-9)); diff != "" {
		t.Errorf("summaries (-Aggregate +view):\n%s", diff)
	}
}

// TestIDIndexWhenHashesCollide finds every row by its id when every id
// hashes alike.
func TestIDIndexWhenHashesCollide(t *testing.T) {
	recs := testRecords()
	recs = append(recs, &results.Record{ID: "d-1", Model: "a", Dataset: "d", Scores: map[string]float64{"exact_match": 1}}) // a second d-1
	r := loadRecords(t, "1", "test", recs)
	x := newIDIndex(r, 0)
	x.hash = func([]byte) uint64 { return 42 }
	for i := range r.rows {
		x.add(int32(i))
	}
	if x.len() != 6 {
		t.Errorf("%d distinct ids, want 6", x.len())
	}
	for i := range 6 {
		id := fmt.Sprintf("d-%d", i)
		j, ok := x.get([]byte(id))
		if !ok || string(r.id(int(j))) != id {
			t.Errorf("%s: row %d (%v)", id, j, ok)
		}
	}
	// Of the rows with one id, the last.
	last := -1
	for i := range r.rows {
		if string(r.id(i)) == "d-1" {
			last = i
		}
	}
	if j, _ := x.get([]byte("d-1")); int(j) != last {
		t.Errorf("d-1: row %d, want the last, %d", j, last)
	}
	if _, ok := x.get([]byte("d-9")); ok {
		t.Error("found d-9, which no row has")
	}
}

// TestSearchAsDecoded: text search, which passes over lines that cannot
// hold the text undecoded, finds what decoding every record finds, among
// records whose JSON escapes characters in every way JSON allows.
func TestSearchAsDecoded(t *testing.T) {
	lines := []string{
		`{"id":"e-1","model":"m","dataset":"d","output":"caf\u00e9 au lait","expected":"x"}`,
		`{"id":"e-2","model":"m","dataset":"d","output":"\u0041nswer: \u004B","expected":"y"}`,
		`{"id":"e-3","model":"m","dataset":"d","output":"line one\nline two \"quoted\" a\/b","expected":"z"}`,
		`{"id":"e-4","model":"m","dataset":"d","output":"CAFÉ","expected":"Kelvin: \u212a"}`,
		`{"id":"e-5","model":"m","dataset":"d","output":"plain","input":{"messages":[{"role":"user","content":"Say \"hi\" to ÅSA"}]},"expected":{"answer":"forty-two"}}`,
		`{"id":"e-6","model":"m","dataset":"d","output":"tab\there","input":"system: be brief","expected":["a","b"]}`,
		`{"id":"e-7","model":"m","dataset":"d","output":"nothing","expected":"answer"}`,
		`{"id":"e-8","model":"answer","dataset":"d","output":"no","expected":"no"}`,
	}
	r := loadLines(t, lines)
	// decoded is the search done by decoding every record.
	decoded := func(text string) []string {
		needle := bytes.ToLower([]byte(text))
		var out []string
		for _, l := range lines {
			var rec struct {
				ID, Output      string
				Input, Expected json.RawMessage
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatal(err)
			}
			if containsFold([]byte(rec.ID), needle) || containsFold([]byte(rec.Output), needle) ||
				containsFold(unquoted(rec.Input), needle) || containsFold(unquoted(rec.Expected), needle) {
				out = append(out, rec.ID)
			}
		}
		return out
	}
	for _, text := range []string{"café", "CAFÉ", "answer", "ANSWER: k", "k", "line one\nline", `"quoted"`, "a/b",
		"say \"hi\"", "åsa", "forty", "TAB\tHERE", "brief", `"a","b"`, "e-", "nothing", "zzz", "\\"} {
		all := make([]int32, len(r.rows))
		for i := range all {
			all[i] = int32(i)
		}
		got, err := r.search(all, text)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, i := range got {
			ids = append(ids, string(r.id(int(i))))
		}
		if diff := cmp.Diff(decoded(text), ids, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			t.Errorf("%q (-decoding every record +search):\n%s", text, diff)
		}
	}
}

func TestIndexFoldASCII(t *testing.T) {
	for _, c := range []struct {
		s, needle string
		want      int
	}{
		{"Hello World", "world", 6}, {"hello", "hello", 0}, {"HELLO", "hello", 0}, {"hell", "hello", -1},
		{"xxAbAbC", "abc", 4}, {"a-b", "-b", 1}, {"", "a", -1}, {"abc", "c", 2}, {"aB", "b", 1},
	} {
		if got := indexFoldASCII([]byte(c.s), []byte(c.needle)); got != c.want {
			t.Errorf("indexFoldASCII(%q, %q) = %d, want %d", c.s, c.needle, got, c.want)
		}
	}
}

// TestRunTimes: a run started when its first sample started and ended when
// its last ended, whatever form its records' times take.
func TestRunTimes(t *testing.T) {
	lines := []string{
		`{"id":"1","model":"m","dataset":"d","startedAt":"2026-11-28T10:00:00.5Z","endedAt":"2026-11-28T10:00:01.25Z"}`,
		`{"id":"2","model":"m","dataset":"d","startedAt":"2026-11-28T10:00:00.45Z","endedAt":"2026-11-28T10:00:01.3Z"}`,
		`{"id":"3","model":"m","dataset":"d","startedAt":"2026-11-28T11:59:59+02:00","endedAt":"2026-11-28T12:00:02+02:00"}`,
		`{"id":"4","model":"m","dataset":"d","startedAt":"not a time","endedAt":""}`,
		`{"id":"5","model":"m","dataset":"d"}`,
	}
	r := loadLines(t, lines)
	want := func(s string) string {
		tm, _ := time.Parse(time.RFC3339Nano, s)
		return tm.UTC().Format(time.RFC3339Nano)
	}
	if r.StartedAt == nil || r.EndedAt == nil {
		t.Fatalf("started %v, ended %v", r.StartedAt, r.EndedAt)
	}
	if got := r.StartedAt.UTC().Format(time.RFC3339Nano); got != want("2026-11-28T09:59:59Z") {
		t.Errorf("started at %s", got)
	}
	if got := r.EndedAt.UTC().Format(time.RFC3339Nano); got != want("2026-11-28T10:00:02Z") {
		t.Errorf("ended at %s", got)
	}
}

// loadLines loads a run of JSON lines as written (LoadLines, spilled).
func loadLines(t *testing.T, lines []string) *Run {
	t.Helper()
	r, err := LoadLines("1", "test", t.TempDir(), nil, func(fn func([]byte) error) error {
		for _, l := range lines {
			if err := fn([]byte(l)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}
