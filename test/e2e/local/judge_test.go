package local_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestRetryErrorsRescoresWithoutCallingTheModelAgain: when only the judge
// failed, --retry-errors pays for the judge again, never for the evaluated
// model; the judge's tokens are in the records and the summary.
func TestRetryErrorsRescoresWithoutCallingTheModelAgain(t *testing.T) {
	t.Parallel()
	const n = 6
	var judgeDown atomic.Bool
	var modelCalls, judgeCalls atomic.Int64
	fake := fakellm.New(fakellm.Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), `"fake-judge"`) {
			judgeCalls.Add(1)
			if judgeDown.Load() {
				http.Error(w, `{"error":{"message":"judge endpoint misconfigured","type":"invalid_request_error"}}`, http.StatusBadRequest)
				return
			}
		} else {
			modelCalls.Add(1)
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	w.writeEval("judged", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: %[1]s/v1
  - name: grader
    provider: openai
    model: fake-judge
    baseURL: %[1]s/v1
  scoring:
  - type: judge
    judge: {model: grader}
`, srv.URL))

	judgeDown.Store(true)
	first := w.run()
	if first.Code != 0 && first.Code != 1 {
		t.Fatalf("first run: want exit 0 or 1\n%s", first)
	}
	recs, _ := readRecords(t, w.out)
	for _, r := range recs {
		if !strings.Contains(r.Error, "judge endpoint misconfigured") || r.Output == "" {
			t.Fatalf("first run, %s: %+v; want the judge's error with the model's output kept", r.ID, r)
		}
	}
	calledModel := modelCalls.Load()
	if calledModel != n {
		t.Fatalf("first run called the model %d times, want %d", calledModel, n)
	}

	judgeDown.Store(false)
	judgeBefore := judgeCalls.Load()
	second := w.run("--retry-errors")
	if second.Code != 0 {
		t.Fatalf("second run: want exit 0\n%s", second)
	}
	if got := modelCalls.Load() - calledModel; got != 0 {
		t.Errorf("--retry-errors called the evaluated model %d more times; only the judge failed, so want 0", got)
	}
	if got := judgeCalls.Load() - judgeBefore; got != n {
		t.Errorf("--retry-errors called the judge %d times, want %d", got, n)
	}
	recs, _ = readRecords(t, w.out)
	expectIDs(t, recs, "q", n)
	for _, r := range recs {
		if r.Error != "" || r.Scores["judge"] != 1 {
			t.Errorf("after retry, %s: %+v; want judged correct", r.ID, r)
		}
	}
	s := readSummary(t, w.out)
	if len(s.Results) != 1 || s.Results[0].Tokens.JudgeInput == 0 || s.Results[0].Tokens.JudgeOutput == 0 {
		t.Errorf("summary tokens = %+v; want the judge's tokens counted", s.Results)
	}
}
