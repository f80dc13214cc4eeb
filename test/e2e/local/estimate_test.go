package local_test

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestEstimate: `proctor run --estimate` calls no model and writes nothing;
// its input tokens are within 2% of what the run is then charged (exact,
// here: the fake server counts as it charges), its output and cost bounds
// hold, and the judge's calls are estimated apart.
func TestEstimate(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 40))
	w.writeEval("estimated", fmt.Sprintf(`  prompt:
    system: "You are a careful calculator. Think, then answer with the number alone."
    template: "Question {{ .ID }}: {{ .Input }}"
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %[1]s
    parameters: {maxTokens: 24}
    pricing: {inputPerMillion: 2.5, outputPerMillion: 10}
  - name: claude
    provider: anthropic
    model: fake-claude
    baseURL: %[2]s
    parameters: {maxTokens: 32}
    pricing: {inputPerMillion: 3, outputPerMillion: 15}
  - name: grader
    provider: openai
    model: fake-judge
    baseURL: %[1]s
    parameters: {maxTokens: 64}
    pricing: {inputPerMillion: 0.4, outputPerMillion: 1.6}
  scoring:
  - type: exact_match
  - type: judge
    judge: {model: grader}
  budget: {maxCost: 5}
`, srv.OpenAIURL(), srv.AnthropicURL()))

	est := w.run("--estimate")
	if est.Code != 0 {
		t.Fatalf("--estimate:\n%s", est)
	}
	if st := srv.Stats(); st.Requests != 0 || st.Counted == 0 {
		t.Fatalf("--estimate made %d model requests and %d counts; want none and some", st.Requests, st.Counted)
	}
	if _, err := os.Stat(w.out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--estimate made %s (%v)", w.out, err)
	}
	rows := estimateRows(t, est.Stdout)
	if !strings.Contains(est.Stderr, "No model was called") || !strings.Contains(est.Stderr, "gpt: 24 tokens a call (parameters.maxTokens)") ||
		!strings.Contains(est.Stderr, "spec.budget.maxCost $5.000000 covers the run at its bound") {
		t.Errorf("notes:\n%s", est.Stderr)
	}

	run := w.run()
	if run.Code != 0 {
		t.Fatalf("the run:\n%s", run)
	}
	sum := readSummary(t, w.out)
	for _, s := range sum.Results {
		row, ok := rows[s.Model]
		if !ok {
			t.Fatalf("no estimate of %s in\n%s", s.Model, est.Stdout)
		}
		if off := math.Abs(float64(row.in-s.Tokens.Input)) / float64(s.Tokens.Input); off > 0.02 {
			t.Errorf("%s: estimated %d input tokens, charged %d (%.1f%% off)", s.Model, row.in, s.Tokens.Input, 100*off)
		}
		if s.Tokens.Output > row.out {
			t.Errorf("%s: %d output tokens, over the bound %d", s.Model, s.Tokens.Output, row.out)
		}
		if cost := *s.Cost["model"]; cost > row.cost {
			t.Errorf("%s: cost $%f, over the bound $%f", s.Model, cost, row.cost)
		}
		judge, ok := rows["grader (judging "+s.Model+")"]
		if !ok {
			t.Fatalf("no estimate of the judge of %s in\n%s", s.Model, est.Stdout)
		}
		if s.Tokens.JudgeInput > judge.in || s.Tokens.JudgeOutput > judge.out || *s.Cost["judge"] > judge.cost {
			t.Errorf("judging %s: %d/%d tokens for $%f, over the estimate %+v", s.Model, s.Tokens.JudgeInput, s.Tokens.JudgeOutput, *s.Cost["judge"], judge)
		}
	}
}

// estimateRow is a row of the estimate table.
type estimateRow struct {
	in, out int64
	cost    float64
}

// estimateRows reads the estimate table by model (a judge's row by its
// "NAME (judging SUBJECT)").
func estimateRows(t *testing.T, table string) map[string]estimateRow {
	t.Helper()
	cols := regexp.MustCompile(`\s{2,}`)
	out := map[string]estimateRow{}
	for _, line := range lines(table)[1:] {
		f := cols.Split(strings.TrimSpace(line), -1)
		if f[0] == "TOTAL" {
			continue
		}
		if len(f) != 8 {
			t.Fatalf("estimate row %q", line)
		}
		in, err1 := strconv.ParseInt(strings.TrimPrefix(f[3], "~"), 10, 64)
		outTok, err2 := strconv.ParseInt(f[4], 10, 64)
		cost, err3 := strconv.ParseFloat(strings.TrimPrefix(f[6], "$"), 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("estimate row %q", line)
		}
		out[f[0]] = estimateRow{in: in, out: outTok, cost: cost}
	}
	return out
}
