package local_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// countingFake serves fakellm, counting the calls of the evaluated model
// and of the judge (model fake-judge) apart.
func countingFake(t *testing.T) (url string, modelCalls, judgeCalls *atomic.Int64) {
	t.Helper()
	modelCalls, judgeCalls = new(atomic.Int64), new(atomic.Int64)
	fake := fakellm.New(fakellm.Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), `"fake-judge"`) {
			judgeCalls.Add(1)
		} else {
			modelCalls.Add(1)
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", modelCalls, judgeCalls
}

// rescoreEval is an Evaluation of capitals whose answers differ from the
// expected ones in case only, scored by exact_match (with normalize) and a
// judge, with model parameters temperature.
func rescoreEval(url, normalize, temperature string) string {
	return fmt.Sprintf(`  datasets:
  - name: capitals
    source: {file: capitals.jsonl}
  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: %[1]s
    parameters: {temperature: %[3]s}
  - name: grader
    provider: openai
    model: fake-judge
    baseURL: %[1]s
  scoring:
  - type: exact_match
    normalize: [%[2]s]
  - type: judge
    name: judged
    judge: {model: grader}
`, url, normalize, temperature)
}

// capitalsRun is a workspace whose n capitals (ids c1..cn, answered "City
// i" against the expected "city i") ran once under rescoreEval's scoring
// with normalize [trim].
func capitalsRun(t *testing.T, url string, n int) *workspace {
	t.Helper()
	w := newWorkspace(t)
	var data strings.Builder
	for i := range n {
		fmt.Fprintf(&data, `{"id":"c%d","input":"REPLY: City %d","expected":"city %d"}`+"\n", i+1, i, i)
	}
	w.write("capitals.jsonl", data.String())
	w.writeEval("capitals", rescoreEval(url, "trim", "0"))
	if r := w.run(); r.Code != 0 {
		t.Fatalf("the first run: want exit 0\n%s", r)
	}
	return w
}

// TestScoringChangeRescoresWithoutCallingTheModel: adding lowercase to
// exact_match's normalize keeps the answers, scores them again without
// calling the model or the judge (its scorer did not change), and says
// what changed; changing the model's parameters is refused, naming the
// model; proctor score --all pays the judge again, never the model.
func TestScoringChangeRescoresWithoutCallingTheModel(t *testing.T) {
	t.Parallel()
	const n = 5
	url, modelCalls, judgeCalls := countingFake(t)
	w := capitalsRun(t, url, n)
	if m, j := modelCalls.Load(), judgeCalls.Load(); m != n || j != n {
		t.Fatalf("first run called the model %d and the judge %d times, want %d each", m, j, n)
	}
	recs, _ := readRecords(t, w.out)
	for _, r := range recs {
		if r.Scores["exact_match"] != 0 {
			t.Fatalf("first run, %s: exact_match %v, want 0 (the case differs)", r.ID, r.Scores["exact_match"])
		}
	}
	before, _ := os.ReadFile(filepath.Join(w.out, "results.jsonl"))

	// The scoring alone changes: the answers are kept and scored again.
	w.writeEval("capitals", rescoreEval(url, "trim, lowercase", "0"))
	r := w.run()
	if r.Code != 0 {
		t.Fatalf("run after the scoring changed: want exit 0\n%s", r)
	}
	if m, j := modelCalls.Load(), judgeCalls.Load(); m != n || j != n {
		t.Errorf("re-scoring called the model %d and the judge %d more times, want 0 (only exact_match changed)", m-n, j-n)
	}
	if !strings.Contains(r.Stderr, "Scoring 5 answers of model small on dataset capitals again (the scoring changed: scorer exact_match changed)") {
		t.Errorf("the run did not say what it re-scored and why:\n%s", r.Stderr)
	}
	recs, _ = readRecords(t, w.out)
	expectIDs(t, recs, "c", n)
	for _, r := range recs {
		if r.Scores["exact_match"] != 1 || r.Scores["judged"] != 1 || r.Output == "" {
			t.Errorf("after re-scoring, %s: %+v; want exact_match 1, judged kept at 1", r.ID, r)
		}
	}
	s := readSummary(t, w.out)
	if s.Results[0].Metrics["exact_match"] != 1 || s.Results[0].Completed != n {
		t.Errorf("summary after re-scoring: %+v", s.Results[0])
	}
	if after, _ := os.ReadFile(filepath.Join(w.out, "results.jsonl")); bytes.Equal(before, after) {
		t.Error("results.jsonl did not change")
	}

	// What decides the answers changes: refused, naming it, nothing run.
	w.writeEval("capitals", rescoreEval(url, "trim, lowercase", "0.7"))
	r = w.run()
	if r.Code != 2 || !strings.Contains(r.Stderr, `model "small" (its provider, endpoint, model or parameters) changed since`) ||
		!strings.Contains(r.Stderr, "--restart") {
		t.Errorf("a changed model: want exit 2 naming the model and --restart\n%s", r)
	}
	if m := modelCalls.Load(); m != n {
		t.Errorf("the refused run called the model %d times", m-n)
	}

	// proctor score --all: every scorer again, the judge paid, the model never.
	w.writeEval("capitals", rescoreEval(url, "trim, lowercase", "0"))
	r = w.proctor("score", "-f", w.evalFile(), "-o", w.out, "--all", "--progress", "none")
	if r.Code != 0 {
		t.Fatalf("proctor score --all: want exit 0\n%s", r)
	}
	if m, j := modelCalls.Load(), judgeCalls.Load(); m != n || j != 2*n {
		t.Errorf("proctor score --all called the model %d and the judge %d more times, want 0 and %d", m-n, j-n, n)
	}
	recs, _ = readRecords(t, w.out)
	expectIDs(t, recs, "c", n)

	// Nothing changed: proctor score says so and calls nothing.
	r = w.proctor("score", "-f", w.evalFile(), "-o", w.out, "--progress", "none")
	if r.Code != 0 || !strings.Contains(r.Stderr, "Nothing to score again") {
		t.Errorf("proctor score with nothing changed: want exit 0 saying so\n%s", r)
	}
	if m, j := modelCalls.Load(), judgeCalls.Load(); m != n || j != 2*n {
		t.Errorf("proctor score with nothing changed called the model %d and the judge %d more times", m-n, j-2*n)
	}
	// Into a directory without answers: refused, nothing written.
	empty := filepath.Join(w.dir, "nothing-here")
	if r := w.proctor("score", "-f", w.evalFile(), "-o", empty); r.Code != 2 || !strings.Contains(r.Stderr, "nothing to score") {
		t.Errorf("proctor score of a directory without answers: want exit 2\n%s", r)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("proctor score created %s: %v", empty, err)
	}
}

// TestScoreFetchedResults: results without a checkpoint (as proctor results
// fetches them from a cluster) are scored by proctor score with the file's
// scoring: the answers are placed by id, the model is not called, the judge
// is, and what cannot be scored (a cut answer) is said and left unanswered.
func TestScoreFetchedResults(t *testing.T) {
	t.Parallel()
	const n = 5
	url, modelCalls, judgeCalls := countingFake(t)
	w := capitalsRun(t, url, n)
	// What proctor results writes: results.jsonl, summary.json, no checkpoint;
	// one answer cut, as a cluster stores one past its budget.
	fetched := filepath.Join(w.dir, "fetched")
	b, err := os.ReadFile(filepath.Join(w.out, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	lines[4] = strings.Replace(lines[4], `"output":"City 4"`, `"output":"","outputTruncated":true,"outputBytes":6`, 1)
	w.write("fetched/results.jsonl", strings.Join(lines, "\n")+"\n")
	s, _ := os.ReadFile(filepath.Join(w.out, "summary.json"))
	w.write("fetched/summary.json", string(s))
	m0, j0 := modelCalls.Load(), judgeCalls.Load()

	w.writeEval("capitals", rescoreEval(url, "trim, lowercase", "0"))
	r := w.proctor("score", "-f", w.evalFile(), "-o", fetched, "--progress", "none")
	if r.Code != 0 {
		t.Fatalf("proctor score of fetched results: want exit 0\n%s", r)
	}
	if m, j := modelCalls.Load()-m0, judgeCalls.Load()-j0; m != 0 || j != n-1 {
		t.Errorf("scoring fetched results called the model %d and the judge %d times, want 0 and %d", m, j, n-1)
	}
	if !strings.Contains(r.Stderr, "Read 4 answers from") || !strings.Contains(r.Stderr, "1 answers cut in the cluster (outputTruncated)") {
		t.Errorf("proctor score did not say what it read and left:\n%s", r.Stderr)
	}
	recs, _ := readRecords(t, fetched)
	if len(recs) != n-1 {
		t.Fatalf("%d records, want %d (the cut answer unanswered)", len(recs), n-1)
	}
	for _, rec := range recs {
		if !rec.Rescored || rec.Scores["exact_match"] != 1 || rec.Scores["judged"] != 1 {
			t.Errorf("%s: %+v; want re-scored, exact_match 1 with lowercase", rec.ID, rec)
		}
	}
}
