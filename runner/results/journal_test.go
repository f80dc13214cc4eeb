package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proctor-dev/proctor/runner/stats"
)

func rec(id string, score float64, errMsg string) *Record {
	r := &Record{ID: id, Model: "m", Dataset: "d", Output: "out-" + id, Scores: map[string]float64{}, Error: errMsg, Attempts: 1, LatencyMillis: 10, InputTokens: 3, OutputTokens: 1}
	if errMsg == "" {
		r.Scores["acc"] = score
	}
	return r
}

func openJ(t *testing.T, path string, total int, retryErrors bool) *Journal {
	t.Helper()
	j, err := OpenJournal(path, Pair{Model: "m", Dataset: "d", Fingerprint: "fp1", Total: total}, OpenOptions{RetryErrors: retryErrors})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func TestJournalResumesAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j := openJ(t, path, 10, false)
	for _, i := range []int{3, 0, 7} {
		if err := j.Append(i, rec(fmt.Sprint(i), 1, "")); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash mid-write leaves half a line.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if _, err := f.WriteString(`{"i":5,"r":{"id":"5","mod`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	j = openJ(t, path, 10, false)
	for i := range 10 {
		want := i == 0 || i == 3 || i == 7
		if j.Done(i) != want {
			t.Errorf("Done(%d) = %v, want %v", i, j.Done(i), want)
		}
	}
	if done, errored := j.Counts(); done != 3 || errored != 0 {
		t.Errorf("Counts = %d, %d; want 3, 0", done, errored)
	}
	// Appending after the torn line must leave a well-formed file.
	if err := j.Append(5, rec("5", 0, "")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	lines := readLines(t, path)
	if len(lines) != 5 {
		t.Fatalf("journal has %d lines, want header + 4 records:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("invalid line %q", l)
		}
	}
}

func TestJournalRefusesAnotherEvaluation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j := openJ(t, path, 3, false)
	if err := j.Append(0, rec("0", 1, "")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, err := OpenJournal(path, Pair{Model: "m", Dataset: "d", Fingerprint: "fp2", Total: 3}, OpenOptions{})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("OpenJournal with another fingerprint = %v, want ErrMismatch", err)
	}
	if err := os.WriteFile(path, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenJournal(path, Pair{Model: "m", Dataset: "d", Fingerprint: "fp1", Total: 3}, OpenOptions{}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("OpenJournal on a foreign file = %v, want ErrMismatch", err)
	}
}

func TestJournalRetryErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j := openJ(t, path, 3, false)
	mustAppend(t, j, 0, rec("0", 1, ""))
	mustAppend(t, j, 1, rec("1", 0, "HTTP 500"))
	j.Close()

	j = openJ(t, path, 3, false)
	if !j.Done(1) {
		t.Error("an errored sample is not done without --retry-errors")
	}
	j.Close()
	j = openJ(t, path, 3, true)
	if j.Done(1) || !j.Done(0) {
		t.Errorf("with retryErrors: Done(0)=%v Done(1)=%v, want true, false", j.Done(0), j.Done(1))
	}
	mustAppend(t, j, 1, rec("1", 1, ""))
	j.Close()

	// Assembly keeps the latest record of a sample run twice.
	var out bytes.Buffer
	agg := NewAggregate("m", "d", 3, []string{"acc"})
	if err := Assemble(path, &out, agg, 3); err != nil {
		t.Fatal(err)
	}
	var got []Record
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[1].Error != "" || got[1].Scores["acc"] != 1 {
		t.Errorf("assembled %+v, want samples 0 and 1, the retried 1 without error", got)
	}
}

func TestAssembleOrdersAndSummarizes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j := openJ(t, path, 6, false)
	// Complete out of order, concurrently; sample 4 never finished.
	var wg sync.WaitGroup
	for _, i := range []int{5, 2, 0, 3, 1} {
		wg.Go(func() {
			errMsg := ""
			if i == 3 {
				errMsg = "timed out"
			}
			mustAppend(t, j, i, rec(fmt.Sprint(i), float64(i%2), errMsg))
		})
	}
	wg.Wait()
	j.Close()

	var out bytes.Buffer
	agg := NewAggregate("m", "d", 6, []string{"acc"})
	if err := Assemble(path, &out, agg, 6); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("bad line %q: %v", l, err)
		}
		order = append(order, r.ID)
	}
	if diff := cmp.Diff([]string{"0", "1", "2", "3", "5"}, order); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	want := Summary{
		Model: "m", Dataset: "d", Total: 6, Completed: 5, Errored: 1,
		// acc: 0,1,0,(error→0),1 → 2/5.
		Metrics: map[string]float64{"acc": 0.4},
		// Wilson's 95% interval of 2/5 (statsmodels).
		Intervals:     map[string]stats.Interval{"acc": {Lo: 0.117620774, Hi: 0.769275719}},
		LatencyMillis: Latency{P50: 10, P95: 10},
		Tokens:        Tokens{Input: 15, Output: 5},
	}
	if diff := cmp.Diff(want, agg.Summary(), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}

func TestRecordJSONFields(t *testing.T) {
	b, _ := json.Marshal(rec("q1", 1, ""))
	want := `{"id":"q1","model":"m","dataset":"d","output":"out-q1","scores":{"acc":1},"error":"","attempts":1,"latencyMillis":10,"inputTokens":3,"outputTokens":1}`
	if string(b) != want {
		t.Errorf("record JSON\n got %s\nwant %s", b, want)
	}
}

func TestPercentiles(t *testing.T) {
	agg := NewAggregate("m", "d", 100, nil)
	for i := 1; i <= 100; i++ {
		agg.Add(&Record{LatencyMillis: int64(i)})
	}
	if got := agg.Summary().LatencyMillis; got != (Latency{P50: 50, P95: 95}) {
		t.Errorf("latency = %+v, want p50 50, p95 95", got)
	}
	if got := NewAggregate("m", "d", 0, []string{"x"}).Summary(); got.Metrics == nil || got.LatencyMillis != (Latency{}) {
		t.Errorf("empty summary = %+v", got)
	}
}

func TestDirAssemblesEveryPair(t *testing.T) {
	d, err := OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pairs := []Pair{{Model: "a", Dataset: "x", Fingerprint: "f", Total: 2, Metrics: []string{"acc"}}, {Model: "b", Dataset: "x", Fingerprint: "f", Total: 1, Metrics: []string{"acc"}}}
	for _, p := range pairs {
		if _, err := d.Open(p, OpenOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, d, "b", "x", 0, &Record{ID: "b0", Model: "b", Dataset: "x", Scores: map[string]float64{"acc": 1}})
	mustPut(t, d, "a", "x", 1, &Record{ID: "a1", Model: "a", Dataset: "x", Scores: map[string]float64{"acc": 1}})
	mustPut(t, d, "a", "x", 0, &Record{ID: "a0", Model: "a", Dataset: "x", Scores: map[string]float64{"acc": 0}})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ss, err := d.Assemble(pairs)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range readLines(t, filepath.Join(d.Root(), ResultsFile)) {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	if diff := cmp.Diff([]string{"a0", "a1", "b0"}, ids); diff != "" {
		t.Errorf("results.jsonl order (-want +got):\n%s", diff)
	}
	var sum struct{ Results []Summary }
	b, _ := os.ReadFile(filepath.Join(d.Root(), SummaryFile))
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ss, sum.Results); diff != "" {
		t.Errorf("summary.json differs from the returned summaries:\n%s", diff)
	}
	if ss[0].Metrics["acc"] != 0.5 || ss[1].Metrics["acc"] != 1 {
		t.Errorf("metrics = %v, %v", ss[0].Metrics, ss[1].Metrics)
	}
}

func mustAppend(t testing.TB, j *Journal, i int, r *Record) {
	t.Helper()
	if err := j.Append(i, r); err != nil {
		t.Fatal(err)
	}
}

func mustPut(t testing.TB, d *Dir, model, dataset string, i int, r *Record) {
	t.Helper()
	if err := d.Put(model, dataset, i, r); err != nil {
		t.Fatal(err)
	}
}

// TestJournalKeepsRecordsAwaitingJudging: a record awaiting a judge's batch
// is done and found again when the journal is reopened; the record that
// replaces it ends its wait, and its calls are not counted twice.
func TestJournalKeepsRecordsAwaitingJudging(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	cost := func(d float64) *float64 { return &d }
	awaiting := func(id string) *Record {
		r := rec(id, 1, "")
		r.Cost, r.JudgePending = cost(0.001), []string{"graded"}
		return r
	}
	judged := func(id string, errMsg string) *Record {
		r := rec(id, 1, errMsg)
		r.Cost, r.JudgeCost = cost(0.001), cost(0.0005)
		if errMsg == "" {
			r.Scores["graded"] = 1
		}
		return r
	}
	j := openJ(t, path, 4, false)
	for i := range 3 {
		mustAppend(t, j, i, awaiting(fmt.Sprint(i)))
	}
	mustAppend(t, j, 0, judged("0", ""))
	if done, errored := j.Counts(); done != 3 || errored != 0 {
		t.Errorf("counts %d, %d; want 3 done (one judged, two awaiting)", done, errored)
	}
	j.Close()

	j = openJ(t, path, 4, false)
	if got := keysOf(j.Awaiting()); !cmp.Equal(got, []int{1, 2}) || !j.Done(1) || j.Done(3) {
		t.Errorf("awaiting %v, Done(1) %v, Done(3) %v; want 1 and 2 awaiting, and done", got, j.Done(1), j.Done(3))
	}
	if r := j.Awaiting()[1]; r.Output != "out-1" || !cmp.Equal(r.JudgePending, []string{"graded"}) {
		t.Errorf("awaiting record %+v", r)
	}
	// Three answers and one judging: each paid once.
	if got := j.Spent().Cost.Dollars(); fmt.Sprintf("%.6f", got) != "0.003500" {
		t.Errorf("spent %.6f, want 0.003500", got)
	}
	mustAppend(t, j, 1, judged("1", "scorer graded: no verdict"))
	if done, errored := j.Counts(); done != 3 || errored != 1 {
		t.Errorf("counts %d, %d; want 3 done, 1 errored", done, errored)
	}
	if got := keysOf(j.Awaiting()); !cmp.Equal(got, []int{2}) {
		t.Errorf("awaiting %v, want [2]", got)
	}
	j.Close()

	j = openJ(t, path, 4, false)
	defer j.Close()
	if done, errored := j.Counts(); done != 3 || errored != 1 || fmt.Sprintf("%.6f", j.Spent().Cost.Dollars()) != "0.004000" {
		t.Errorf("reopened: counts %d, %d, spent %.6f; want 3, 1 and 0.004000", done, errored, j.Spent().Cost.Dollars())
	}
}

func keysOf(m map[int]*Record) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestAggregateOfRecordsAwaitingJudging: a record still awaiting its
// verdicts (a run stopped while its judge's batches were out) counts its
// tokens and cost, but is not finished: no completion, no metrics.
func TestAggregateOfRecordsAwaitingJudging(t *testing.T) {
	cost := 0.002
	agg := NewAggregate("m", "d", 3, []string{"acc", "graded"})
	judged := rec("0", 1, "")
	judged.Scores["graded"], judged.Cost = 1, &cost
	awaiting := rec("1", 1, "")
	awaiting.JudgePending, awaiting.Cost = []string{"graded"}, &cost
	agg.Add(judged)
	agg.Add(awaiting)
	s := agg.Summary()
	if s.Completed != 1 || s.Metrics["graded"] != 1 || s.Metrics["acc"] != 1 || s.Tokens.Input != 6 || s.Cost.Model == nil || *s.Cost.Model != 0.004 {
		t.Errorf("summary %+v: want 1 completed, its metrics, and both records' tokens and cost", s)
	}
}

// TestAggregateIntervals: each metric's 95% interval, computed in the same
// pass: Wilson's for a 0/1 metric (an errored sample scores 0), Student's t
// for a continuous one (references: statsmodels and SciPy, see runner/stats).
func TestAggregateIntervals(t *testing.T) {
	agg := NewAggregate("m", "d", 6, []string{"exact", "graded"})
	for i, g := range []float64{0.2, 0.5, 0.9, 0.4, 0.7} {
		r := rec(fmt.Sprint(i), float64(i%2), "")
		r.Scores = map[string]float64{"exact": float64(i % 2), "graded": g}
		agg.Add(r)
	}
	agg.Add(rec("5", 0, "HTTP 500"))
	s := agg.Summary()
	// exact: 2 of 6. graded: 0.2, 0.5, 0.9, 0.4, 0.7 and the errored 0.
	want := map[string][2]float64{"exact": {0.096771411, 0.700006685}, "graded": {0.106720635, 0.793279365}}
	for m, w := range want {
		iv := s.Intervals[m]
		if math.Abs(iv.Lo-w[0]) > 1e-6 || math.Abs(iv.Hi-w[1]) > 1e-6 {
			t.Errorf("%s: [%.9f, %.9f], want [%.9f, %.9f]", m, iv.Lo, iv.Hi, w[0], w[1])
		}
	}
}
