package local_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestGateAgainstABaselineLocally: a run with a gate against the results of
// an earlier run passes when nothing changed, and exits 3 with the regression
// in summary.json when the model got worse (the fake server answers 30% of
// the questions wrong); proctor compare says the same of the two directories.
func TestGateAgainstABaselineLocally(t *testing.T) {
	t.Parallel()
	good := newFake(t, fakellm.Config{})
	worse := newFake(t, fakellm.Config{WrongRate: 0.3})

	spec := func(url, baseline string) string {
		s := fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %q}
  scoring:
  - type: exact_match
`, url)
		if baseline != "" {
			s += fmt.Sprintf(`  baseline: {path: %q}
  gate:
    rules:
    - {metric: exact_match, min: 0.5, maxDrop: 0.05}
`, baseline)
		}
		return s
	}
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 120))
	w.writeEval("nightly", spec(good.OpenAIURL(), ""))
	if res := w.run(); res.Code != 0 {
		t.Fatalf("baseline run: exit %d\n%s", res.Code, res)
	}
	baseline := filepath.Join(filepath.Dir(w.out), "nightly")
	if err := os.Rename(w.out, baseline); err != nil {
		t.Fatal(err)
	}

	// The same model again: no drop, the gate passes. The path is relative to
	// the Evaluation file.
	rel, err := filepath.Rel(w.dir, baseline)
	if err != nil {
		t.Fatal(err)
	}
	w.writeEval("candidate", spec(good.OpenAIURL(), rel))
	res := w.run()
	if res.Code != 0 || !strings.Contains(res.Stdout, "Gate: passed") {
		t.Fatalf("unchanged model: exit %d, want 0 and Gate: passed\n%s", res.Code, res)
	}
	sum := readSummary(t, w.out)
	if sum.Gate == nil || !sum.Gate.Passed || sum.Comparison == nil || sum.Comparison.Results[0].Paired != 120 ||
		sum.Comparison.Results[0].Metrics[0].Diff != 0 {
		t.Errorf("summary.json: gate %+v comparison %+v", sum.Gate, sum.Comparison)
	}

	// The worse model: exit 3, the violation said and kept in summary.json.
	w.writeEval("candidate", spec(worse.OpenAIURL(), rel))
	res = w.run("--restart")
	if res.Code != 3 {
		t.Fatalf("worse model: exit %d, want 3\n%s", res.Code, res)
	}
	if !strings.Contains(res.Stdout, "Gate: FAILED") || !strings.Contains(res.Stderr, "missed its gate") {
		t.Errorf("the output does not say the gate failed\n%s", res)
	}
	sum = readSummary(t, w.out)
	m := sum.Comparison.Results[0].Metrics[0]
	if sum.Gate == nil || sum.Gate.Passed || len(sum.Gate.Violations) != 1 || !strings.Contains(sum.Gate.Violations[0], "exact_match fell") {
		t.Errorf("summary.json gate %+v", sum.Gate)
	}
	if m.Test != "mcnemar" || m.Improved != 0 || m.Regressed == 0 || m.PValue >= 0.05 || m.Interval.Hi >= 0 {
		t.Errorf("comparison %+v: want McNemar, only regressions, p < 0.05, an interval below 0", m)
	}

	cmp := w.proctor("compare", baseline, w.out)
	if cmp.Code != 0 || !strings.Contains(cmp.Stdout, "mcnemar") || !strings.Contains(cmp.Stdout, fmt.Sprintf("%+.4f", m.Diff)) {
		t.Errorf("proctor compare: exit %d\n%s", cmp.Code, cmp)
	}

	// A baseline that is not there: nothing runs.
	w.writeEval("candidate", spec(good.OpenAIURL(), "no-such-dir"))
	if res := w.run("-o", filepath.Join(t.TempDir(), "x")); res.Code != 2 || !strings.Contains(res.Stderr, "spec.baseline.path") {
		t.Errorf("missing baseline: exit %d, want 2 naming spec.baseline.path\n%s", res.Code, res)
	}
}

// TestGatedExample runs the README's gate example (docs/examples/gated.yaml):
// the offline quickstart's results as its baseline, then the same model (the
// gate passes), then a worse one (exit 3, below the minimum).
func TestGatedExample(t *testing.T) {
	t.Parallel()
	good := newFake(t, fakellm.Config{WrongRate: 0.25})
	worse := newFake(t, fakellm.Config{WrongRate: 0.6})
	read := func(name string) string {
		b, err := os.ReadFile("../../../docs/examples/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	example, data := read("gated.yaml"), read("arithmetic.jsonl")
	// The example's layout: docs/examples/gated.yaml, its baseline in out/offline.
	w := newWorkspace(t)
	w.write("docs/examples/arithmetic.jsonl", data)
	baselineSpec, _, _ := strings.Cut(example, "  baseline:")
	w.write("docs/examples/base.yaml", strings.ReplaceAll(baselineSpec, "http://127.0.0.1:8080", good.URL))
	if res := w.proctor("run", "-f", filepath.Join(w.dir, "docs/examples/base.yaml"), "-o", filepath.Join(w.dir, "out/offline"), "--progress", "none"); res.Code != 0 {
		t.Fatalf("the baseline: %s", res)
	}
	run := func(url string) result {
		w.write("docs/examples/gated.yaml", strings.ReplaceAll(example, "http://127.0.0.1:8080", url))
		return w.proctor("run", "-f", filepath.Join(w.dir, "docs/examples/gated.yaml"), "-o", filepath.Join(w.dir, "out/gated"), "--progress", "none", "--restart")
	}
	if res := run(good.URL); res.Code != 0 || !strings.Contains(res.Stdout, "Gate: passed") || !strings.Contains(res.Stdout, "+0.0000") {
		t.Errorf("the same model: %s", res)
	}
	if res := run(worse.URL); res.Code != 3 || !strings.Contains(res.Stdout, "below the minimum 0.7") {
		t.Errorf("a worse model: want exit 3 below the minimum 0.7: %s", res)
	}
}
