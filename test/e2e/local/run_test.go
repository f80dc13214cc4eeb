package local_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// recordKeys are the keys of a results.jsonl line without tool calls, in order.
var recordKeys = []string{"id", "model", "dataset", "output", "scores", "error", "attempts", "latencyMillis", "inputTokens", "outputTokens"}

func TestHappyPathTwoModelsTwoDatasets(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("data/questions.jsonl", arithmeticJSONL("f", 5))
	w.writeEval("happy", fmt.Sprintf(`  concurrency: 4
  retry: {maxAttempts: 2, initialBackoff: 10ms, maxBackoff: 50ms}
  datasets:
  - name: inline-qs
    source:
      inline:
      - {id: a1, input: "What is 2 + 2?", expected: "4"}
      - {id: a2, input: "REPLY: The answer is 42", expected: "42"}
      - {id: a3, input: "REPLY: 41", expected: "42"}
      - {id: a4, input: "STATUS: 400", expected: "1"}
      - id: a5
        input: 'TOOL: get_weather {"city": "Paris"}'
        expected: "0"
        tools: [{name: get_weather, description: "Weather in a city", parameters: {type: object, properties: {city: {type: string}}}}]
  - name: file-qs
    source:
      file: data/questions.jsonl
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %s
  - name: claude
    provider: anthropic
    model: fake-model
    baseURL: %s
  scoring:
  - type: exact_match
  - type: numeric
`, srv.OpenAIURL(), srv.AnthropicURL()))

	res := w.run()
	if res.Code != 0 {
		t.Fatalf("proctor run: want exit 0\n%s", res)
	}
	recs, keys := readRecords(t, w.out)

	// One record per sample per model, model by model, dataset by dataset, in file order.
	type key struct{ model, dataset, id string }
	var want []key
	for _, m := range []string{"gpt", "claude"} {
		for _, id := range []string{"a1", "a2", "a3", "a4", "a5"} {
			want = append(want, key{m, "inline-qs", id})
		}
		for i := 1; i <= 5; i++ {
			want = append(want, key{m, "file-qs", fmt.Sprintf("f%d", i)})
		}
	}
	var got []key
	for _, r := range recs {
		got = append(got, key{r.Model, r.Dataset, r.ID})
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(key{})); diff != "" {
		t.Fatalf("results.jsonl order (-want +got):\n%s", diff)
	}
	for i, k := range keys {
		want := recordKeys
		if recs[i].Error != "" { // an error says which step failed, after it
			at := slices.Index(want, "error") + 1
			want = slices.Insert(slices.Clone(want), at, "errorKind")
		}
		if recs[i].ID == "a5" { // the one sample whose answer calls a tool
			want = append(slices.Clone(want), "toolCalls")
		}
		want = append(slices.Clone(want), "expected", "input", "startedAt", "endedAt")
		if !slices.Equal(k, want) {
			t.Errorf("results.jsonl line %d (%s): keys %v, want exactly %v", i+1, recs[i].ID, k, want)
		}
		if r := recs[i]; len(r.Expected) == 0 || r.StartedAt == nil || r.EndedAt == nil || r.EndedAt.Before(*r.StartedAt) {
			t.Errorf("results.jsonl line %d (%s): expected %s, started %v, ended %v", i+1, r.ID, r.Expected, r.StartedAt, r.EndedAt)
		}
		// The request as sent: the sample's question (no system prompt here).
		if r := recs[i]; len(r.Input) != 1 || r.Input[0].Role != "user" || r.Input[0].Content == "" || (r.ID == "a1" && r.Input[0].Content != "What is 2 + 2?") {
			t.Errorf("results.jsonl line %d (%s): input %+v, want the question alone", i+1, r.ID, r.Input)
		}
	}

	// Per-sample outcomes.
	wantScores := map[string]map[string]float64{
		"a1": {"exact_match": 1, "numeric": 1},
		"a2": {"exact_match": 0, "numeric": 1}, // "The answer is 42"
		"a3": {"exact_match": 0, "numeric": 0}, // "41"
		"a4": {"exact_match": 0, "numeric": 0}, // a 400: an error record, 0 as the summary counts it
		"a5": {"exact_match": 0, "numeric": 0}, // a tool call, no text
	}
	for i := 1; i <= 5; i++ {
		wantScores[fmt.Sprintf("f%d", i)] = map[string]float64{"exact_match": 1, "numeric": 1}
	}
	for _, r := range recs {
		where := r.Model + "/" + r.Dataset + "/" + r.ID
		if diff := cmp.Diff(wantScores[r.ID], r.Scores); diff != "" {
			t.Errorf("%s: scores (-want +got):\n%s", where, diff)
		}
		if r.ID == "a4" {
			if r.Error == "" || !strings.Contains(r.Error, "400") || r.Attempts != 1 {
				t.Errorf("%s: want an error record naming the 400 after 1 attempt, got error %q, attempts %d", where, r.Error, r.Attempts)
			}
			continue
		}
		if r.ID == "a5" {
			var calls []struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			}
			if err := json.Unmarshal(r.ToolCalls, &calls); err != nil || len(calls) != 1 ||
				calls[0].Name != "get_weather" || calls[0].Arguments["city"] != "Paris" || r.Output != "" {
				t.Errorf("%s: want one get_weather call with city Paris and no text, got output %q, toolCalls %s", where, r.Output, r.ToolCalls)
			}
		}
		if r.Error != "" || r.Attempts != 1 || r.InputTokens <= 0 || r.OutputTokens <= 0 || r.LatencyMillis < 0 {
			t.Errorf("%s: want a clean success (1 attempt, tokens counted), got %+v", where, r)
		}
	}
	if r := recs[0]; r.Output != "4" {
		t.Errorf("gpt/inline-qs/a1 output: got %q, want %q", r.Output, "4")
	}

	// summary.json agrees with the records.
	sum := readSummary(t, w.out)
	if len(sum.Results) != 4 {
		t.Fatalf("summary.json: %d results, want 4 (2 models x 2 datasets): %+v", len(sum.Results), sum)
	}
	pairs := [][2]string{{"gpt", "inline-qs"}, {"gpt", "file-qs"}, {"claude", "inline-qs"}, {"claude", "file-qs"}}
	for i, s := range sum.Results {
		if s.Model != pairs[i][0] || s.Dataset != pairs[i][1] {
			t.Errorf("summary.json results[%d]: %s/%s, want %s/%s", i, s.Model, s.Dataset, pairs[i][0], pairs[i][1])
			continue
		}
		var total, errored, in, out int64
		sums := map[string]float64{}
		for _, r := range recs {
			if r.Model != s.Model || r.Dataset != s.Dataset {
				continue
			}
			total++
			if r.Error != "" {
				errored++
			}
			in += r.InputTokens
			out += r.OutputTokens
			for m, v := range r.Scores {
				sums[m] += v
			}
		}
		if s.Total != total || s.Completed != total || s.Errored != errored {
			t.Errorf("summary %s/%s: total %d completed %d errored %d, want %d, %d, %d", s.Model, s.Dataset, s.Total, s.Completed, s.Errored, total, total, errored)
		}
		// Latency percentiles are nearest-rank over the successful samples.
		var lat []int64
		for _, r := range recs {
			if r.Model == s.Model && r.Dataset == s.Dataset && r.Error == "" {
				lat = append(lat, r.LatencyMillis)
			}
		}
		slices.Sort(lat)
		rank := func(q float64) int64 { return lat[max(0, int(math.Ceil(q*float64(len(lat))))-1)] }
		if s.LatencyMillis.P50 != rank(0.5) || s.LatencyMillis.P95 != rank(0.95) {
			t.Errorf("summary %s/%s: latency p50/p95 %d/%d, want the records' %d/%d", s.Model, s.Dataset,
				s.LatencyMillis.P50, s.LatencyMillis.P95, rank(0.5), rank(0.95))
		}
		if s.Tokens.Input != in || s.Tokens.Output != out {
			t.Errorf("summary %s/%s: tokens %d/%d, want the records' %d/%d", s.Model, s.Dataset, s.Tokens.Input, s.Tokens.Output, in, out)
		}
		for _, m := range []string{"exact_match", "numeric"} {
			want := sums[m] / float64(total) // errored samples count 0
			if got, ok := s.Metrics[m]; !ok || math.Abs(got-want) > 1e-9 {
				t.Errorf("summary %s/%s metric %s: got %v (present %v), want the records' mean %v", s.Model, s.Dataset, m, got, ok, want)
			}
		}
		if len(s.Metrics) != 2 {
			t.Errorf("summary %s/%s: metrics %v, want exactly exact_match and numeric", s.Model, s.Dataset, s.Metrics)
		}
	}
	if m := sum.Results[0].Metrics; m["exact_match"] != 0.2 || m["numeric"] != 0.4 {
		t.Errorf("summary gpt/inline-qs: metrics %v, want exact_match 0.2 and numeric 0.4", m)
	}

	// The summary table: a header and one row per model and dataset.
	out := lines(res.Stdout)
	if len(out) != 5 {
		t.Fatalf("stdout: %d lines, want a header and 4 rows:\n%s", len(out), res.Stdout)
	}
	for _, h := range []string{"MODEL", "DATASET", "EXACT_MATCH", "NUMERIC"} {
		if !strings.Contains(out[0], h) {
			t.Errorf("stdout header %q lacks %s", out[0], h)
		}
	}
	for i, p := range pairs {
		f := strings.Fields(out[i+1])
		if len(f) < 2 || f[0] != p[0] || f[1] != p[1] {
			t.Errorf("stdout row %d: %q, want it to start with %s %s", i+1, out[i+1], p[0], p[1])
		}
	}
	if f := strings.Fields(out[1]); !slices.Contains(f, "0.2000") || !slices.Contains(f, "0.4000") || !slices.Contains(f, "5/5") {
		t.Errorf("stdout row gpt/inline-qs: %q, want 5/5 done and metrics 0.2000 and 0.4000", out[1])
	}
	if st := srv.Stats(); st.Requests != 20 {
		t.Errorf("server requests: %d, want 20 (10 samples x 2 models, no retries)", st.Requests)
	}
}

func TestMalformedJSONLLineIsThatSamplesError(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	// Line 3 is blank (blank lines count as lines), line 4 is cut short.
	w.write("qs.jsonl", `{"id":"q1","input":"What is 1 + 1?","expected":"2"}
{"id":"q2","input":"What is 2 + 2?","expected":"4"}

{"id":"q3","input":"What is 3 +
{"id":"q4","input":"What is 4 + 4?","expected":"8"}
`)
	w.writeEval("malformed", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
`, srv.OpenAIURL()))

	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0 despite a malformed line\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 4 {
		t.Fatalf("results.jsonl: %d records, want 4: %+v", len(recs), recs)
	}
	for i, r := range recs {
		if i == 2 {
			if r.Error == "" || !strings.Contains(r.Error, "line 4") || r.Attempts != 0 {
				t.Errorf("record 3 (the malformed line): want an error mentioning line 4 and no call, got %+v", r)
			}
			continue
		}
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("record %d (%s): want a correct answer, got %+v", i+1, r.ID, r)
		}
	}
	if got := ids(recs); got[0] != "q1" || got[1] != "q2" || got[3] != "q4" {
		t.Errorf("ids: %v, want q1 q2 _ q4", got)
	}
	if st := srv.Stats(); st.Requests != 3 {
		t.Errorf("server requests: %d, want 3 (the malformed line makes no call)", st.Requests)
	}
	if s := readSummary(t, w.out).Results[0]; s.Completed != 4 || s.Errored != 1 || s.Metrics["exact_match"] != 0.75 {
		t.Errorf("summary: %+v, want 4 completed, 1 errored, exact_match 0.75", s)
	}
}

func TestFailingSampleNeverStopsOthers(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	var data strings.Builder
	for i := 1; i <= 8; i++ {
		switch i {
		case 3:
			data.WriteString(`{"id":"q3","input":"What is 3 + 3?\nSTATUS: 400","expected":"6"}` + "\n")
		case 6:
			data.WriteString(`{"id":"q6","input":"What is 6 + 6?\nSTATUS: 500","expected":"12"}` + "\n")
		default:
			fmt.Fprintf(&data, `{"id":"q%d","input":"What is %d + %d?","expected":"%d"}`+"\n", i, i, i, 2*i)
		}
	}
	w.write("qs.jsonl", data.String())
	w.writeEval("failing", fmt.Sprintf(`  concurrency: 3
  retry: {maxAttempts: %d, initialBackoff: 10ms, maxBackoff: 20ms}
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
`, maxAttempts, srv.OpenAIURL()))

	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0: failed samples are records, not a failed run\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", 8)
	for _, r := range recs {
		switch r.ID {
		case "q3":
			if r.Error == "" || !strings.Contains(r.Error, "400") || r.Attempts != 1 {
				t.Errorf("q3 (STATUS: 400): want an error after exactly 1 attempt (4xx is final), got attempts %d, error %q", r.Attempts, r.Error)
			}
		case "q6":
			if r.Error == "" || !strings.Contains(r.Error, "500") || r.Attempts != maxAttempts {
				t.Errorf("q6 (STATUS: 500): want an error after %d attempts, got attempts %d, error %q", maxAttempts, r.Attempts, r.Error)
			}
		default:
			if r.Error != "" || r.Scores["exact_match"] != 1 || r.Attempts != 1 {
				t.Errorf("%s: want a correct answer in 1 attempt, got %+v", r.ID, r)
			}
		}
		// As the summary counts it: averaging results.jsonl gives its metrics.
		if r.Error != "" && !maps.Equal(r.Scores, map[string]float64{"exact_match": 0}) {
			t.Errorf("%s: an error record has scores %v, want exact_match 0", r.ID, r.Scores)
		}
	}
	if st := srv.Stats(); st.Requests != 6+1+maxAttempts {
		t.Errorf("server requests: %d, want %d (6 good samples, the 400 once, the 500 %d times)", st.Requests, 6+1+maxAttempts, maxAttempts)
	}
}

func TestRetriesSurviveInjectedFaults(t *testing.T) {
	t.Parallel()
	// With 30% failures and 10% drops an attempt fails with probability 0.37. The
	// brief's 8 attempts leave 60 samples a 60 x 0.37^8 ~ 2% chance that one of
	// them fails every attempt, too flaky to be useful, so allow 12 (~0.04%).
	const n, maxAttempts = 60, 12
	srv := newFake(t, fakellm.Config{FailureRate: 0.3, DropRate: 0.1, Seed: 7})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	w.writeEval("faults", fmt.Sprintf(`  concurrency: 6
  retry: {maxAttempts: %d, initialBackoff: 10ms, maxBackoff: 100ms}
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
`, maxAttempts, srv.OpenAIURL()))

	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", n)
	attempts := 0
	retried := 0
	for _, r := range recs {
		attempts += r.Attempts
		if r.Attempts > 1 {
			retried++
		}
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("%s: want a correct answer after retries, got %+v", r.ID, r)
		}
	}
	st := srv.Stats()
	if int64(attempts) != st.Requests {
		t.Errorf("attempts in records sum to %d, but the server received %d requests (stats %+v)", attempts, st.Requests, st)
	}
	if st.Failed == 0 || st.Dropped == 0 || retried == 0 {
		t.Errorf("the faults were not exercised: server stats %+v, %d samples retried", st, retried)
	}
	if st.Succeeded != n {
		t.Errorf("server answered %d requests successfully, want exactly %d (one per sample)", st.Succeeded, n)
	}
}

func TestCacheAnswersASecondRunWithoutCalls(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{Latency: 5 * time.Millisecond})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 6)+`{"id":"q7","input":"REPLY: not a number","expected":"1"}`+"\n")
	w.writeEval("cached", fmt.Sprintf(`  cache: {enabled: true}
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  - {name: claude, provider: anthropic, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
  - type: numeric
`, srv.OpenAIURL(), srv.AnthropicURL()))

	first := w.run()
	if first.Code != 0 {
		t.Fatalf("first run: want exit 0\n%s", first)
	}
	firstRecs, _ := readRecords(t, w.out)
	calls := srv.Stats().Requests
	if calls != 14 {
		t.Fatalf("first run: %d server requests, want 14 (7 samples x 2 models)", calls)
	}
	if entries, _ := filepath.Glob(filepath.Join(w.cacheDir, "*", "*")); len(entries) == 0 {
		t.Errorf("first run left nothing in --cache-dir %s", w.cacheDir)
	}

	if err := os.RemoveAll(w.out); err != nil {
		t.Fatal(err)
	}
	second := w.run()
	if second.Code != 0 {
		t.Fatalf("second run: want exit 0\n%s", second)
	}
	if got := srv.Stats().Requests; got != calls {
		t.Errorf("second run called the server %d times, want 0 (everything cached)", got-calls)
	}
	secondRecs, _ := readRecords(t, w.out)
	if len(secondRecs) != len(firstRecs) {
		t.Fatalf("second run: %d records, want %d", len(secondRecs), len(firstRecs))
	}
	for i, r := range secondRecs {
		f := firstRecs[i]
		if r.Attempts != 0 {
			t.Errorf("%s/%s: attempts %d, want 0 for a cached answer", r.Model, r.ID, r.Attempts)
		}
		if r.ID != f.ID || r.Model != f.Model || r.Output != f.Output || !cmp.Equal(r.Scores, f.Scores) || r.Error != f.Error {
			t.Errorf("record %d differs from the first run's:\nfirst  %+v\nsecond %+v", i, f, r)
		}
		if r.LatencyMillis != f.LatencyMillis || r.InputTokens != f.InputTokens || r.OutputTokens != f.OutputTokens {
			t.Errorf("%s/%s: latency/tokens %d/%d/%d, want the original call's %d/%d/%d", r.Model, r.ID,
				r.LatencyMillis, r.InputTokens, r.OutputTokens, f.LatencyMillis, f.InputTokens, f.OutputTokens)
		}
	}
	if a, b := lines(first.Stdout), lines(second.Stdout); len(a) != len(b) {
		t.Errorf("summary tables differ in length:\n%s\n%s", first.Stdout, second.Stdout)
	}
}

func TestEditedEvaluationNeedsRestart(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 4))
	spec := func(template string) string {
		return fmt.Sprintf(`  prompt:
    template: %q
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: numeric
`, template, srv.OpenAIURL())
	}
	w.writeEval("edited", spec("{{ .Input }}"))
	if res := w.run(); res.Code != 0 {
		t.Fatalf("first run: want exit 0\n%s", res)
	}
	if got := srv.Stats().Requests; got != 4 {
		t.Fatalf("first run: %d requests, want 4", got)
	}

	// The same evaluation again: everything is done already.
	if res := w.run(); res.Code != 0 {
		t.Fatalf("unchanged rerun: want exit 0\n%s", res)
	}
	if got := srv.Stats().Requests; got != 4 {
		t.Errorf("unchanged rerun made %d calls, want 0 (every sample is checkpointed)", got-4)
	}

	w.writeEval("edited", spec("Answer briefly. {{ .Input }}"))
	res := w.run()
	if res.Code != 2 {
		t.Fatalf("edited rerun: want exit 2\n%s", res)
	}
	if !strings.Contains(res.Stderr, "--restart") {
		t.Errorf("edited rerun: stderr does not mention --restart:\n%s", res.Stderr)
	}
	if got := srv.Stats().Requests; got != 4 {
		t.Errorf("edited rerun made %d calls before refusing, want 0", got-4)
	}

	res = w.run("--restart")
	if res.Code != 0 {
		t.Fatalf("--restart: want exit 0\n%s", res)
	}
	if got := srv.Stats().Requests; got != 8 {
		t.Errorf("--restart: %d calls, want 4 (all samples again)", got-4)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", 4)
	for _, r := range recs {
		if r.Error != "" || r.Scores["numeric"] != 1 {
			t.Errorf("%s after --restart: %+v", r.ID, r)
		}
	}
}

func TestConcurrencyFlagOverridesFile(t *testing.T) {
	t.Parallel()
	const n, latency = 10, 100 * time.Millisecond
	srv := newFake(t, fakellm.Config{Latency: latency})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	w.writeEval("serial", fmt.Sprintf(`  concurrency: 10
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s, concurrency: 10}
  scoring:
  - type: exact_match
`, srv.OpenAIURL()))

	start := time.Now()
	res := w.run("--concurrency", "1")
	elapsed := time.Since(start)
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	if elapsed < n*latency {
		t.Errorf("with --concurrency 1, %d samples of %v each took %v, want at least %v (one at a time)", n, latency, elapsed, n*latency)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", n)
	if res := w.proctor("run", "-f", w.evalFile(), "-o", w.out, "--concurrency", "-1"); res.Code != 2 || len(lines(res.Stderr)) != 1 {
		t.Errorf("--concurrency -1: want exit 2 with a one-line message\n%s", res)
	}
}

func TestRetryErrorsRerunsOnlyErroredSamples(t *testing.T) {
	t.Parallel()
	// A sample marked FLAKY is refused (400, final) the first time only.
	var mu sync.Mutex
	refused := false
	srv := newFake(t, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, "FLAKY") {
			mu.Lock()
			defer mu.Unlock()
			if !refused {
				refused = true
				return fakellm.Reply{Status: 400}
			}
		}
		return fakellm.DefaultReply(req)
	}})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 2)+
		`{"id":"q3","input":"What is 3 + 6?\nFLAKY","expected":"9"}`+"\n"+
		`{"id":"q4","input":"What is 4 + 8?","expected":"12"}`+"\n")
	w.writeEval("flaky", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
`, srv.OpenAIURL()))

	if res := w.run(); res.Code != 0 {
		t.Fatalf("first run: want exit 0\n%s", res)
	}
	if s := readSummary(t, w.out).Results[0]; s.Errored != 1 {
		t.Fatalf("first run: summary %+v, want q3 errored", s)
	}
	if res := w.run(); res.Code != 0 || srv.Stats().Requests != 4 {
		t.Fatalf("plain rerun: want exit 0 and no call (errored samples are done too), got %d calls\n%s", srv.Stats().Requests-4, res)
	}
	res := w.run("--retry-errors")
	if res.Code != 0 {
		t.Fatalf("--retry-errors: want exit 0\n%s", res)
	}
	if got := srv.Stats().Requests; got != 5 {
		t.Errorf("--retry-errors made %d calls, want 1 (only the errored sample)", got-4)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", 4)
	for _, r := range recs {
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("%s after --retry-errors: %+v", r.ID, r)
		}
	}
	if s := readSummary(t, w.out).Results[0]; s.Errored != 0 || s.Completed != 4 || s.Metrics["exact_match"] != 1 {
		t.Errorf("summary after --retry-errors: %+v, want 4 completed, none errored", s)
	}
}

// TestAnswersCutAtMaxTokensAreSaid: a reasoning model that spends its
// maxTokens thinking answers nothing (content null, finish_reason length):
// its record says the answer was stopped, the summary counts it, and the run
// says so, instead of an empty answer passing for the model's.
func TestAnswersCutAtMaxTokensAreSaid(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("qs.jsonl", `{"id":"q1","input":"What is 2+2?","expected":"4"}
{"id":"q2","input":"THINK: 100\nWhat is 3+3?","expected":"6"}
{"id":"q3","input":"THINK: 10\nWhat is 4+4?","expected":"8"}
`)
	w.writeEval("cut", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: thinker
    provider: openai
    model: fake-reasoner
    baseURL: %s
    parameters: {maxTokens: 64}
  scoring:
  - type: exact_match
`, srv.OpenAIURL()))
	r := w.run()
	if r.Code != 0 || !strings.Contains(r.Stderr, "Model thinker on dataset qs: 1 of 3 answers stopped at parameters.maxTokens") {
		t.Fatalf("want exit 0 and the cut answer said\n%s", r)
	}
	recs, _ := readRecords(t, w.out)
	for _, rec := range recs {
		cut := rec.ID == "q2"
		if rec.MaxTokens != cut || cut && (rec.Output != "" || rec.OutputTokens != 64) || !cut && rec.Scores["exact_match"] != 1 {
			t.Errorf("%s: maxTokensReached %v, output %q, %d output tokens, scores %v", rec.ID, rec.MaxTokens, rec.Output, rec.OutputTokens, rec.Scores)
		}
	}
	if s := readSummary(t, w.out).Results[0]; s.Cut != 1 {
		t.Errorf("summary maxTokensReached %d, want 1", s.Cut)
	}
}
