package local_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// Prices of the budget tests, in dollars per million tokens.
const (
	budgetInputPrice  = 300.0
	budgetOutputPrice = 1200.0
	budgetMaxTokens   = 16
)

// pricedEval is an Evaluation of qs.jsonl on one priced model "gpt" at url,
// answers bounded by maxTokens, with modelExtra added to the model and
// specExtra to the spec (YAML at their indentation).
func pricedEval(url string, concurrency, maxTokens int, in, out float64, modelExtra, specExtra string) string {
	return fmt.Sprintf(`  concurrency: %d
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %s
    parameters: {maxTokens: %d}
    pricing: {inputPerMillion: %g, outputPerMillion: %g}
%s  scoring:
  - type: exact_match
%s`, concurrency, url, maxTokens, in, out, modelExtra, specExtra)
}

// serverCost is what a fake server's successful answers cost at the budget
// tests' prices: the provider's bill, counted on its side.
func serverCost(s fakellm.Stats) float64 {
	return (float64(s.InputTokens)*budgetInputPrice + float64(s.OutputTokens)*budgetOutputPrice) / 1e6
}

// TestBudgetStopsAndResumes: a run with a budget of a third of its cost
// stops with reason BudgetExceeded having spent no more than the budget plus
// what the calls in flight could cost; every finished record is kept with
// its cost; raising the budget resumes it without calling any sample twice,
// and the two parts cost exactly what the run costs in one go.
func TestBudgetStopsAndResumes(t *testing.T) {
	t.Parallel()
	const n, concurrency = 90, 4
	spec := func(url, budget string) string {
		return pricedEval(url, concurrency, budgetMaxTokens, budgetInputPrice, budgetOutputPrice, "", budget)
	}

	// The whole run, without a budget: what it costs.
	whole := newFake(t, fakellm.Config{})
	ref := newWorkspace(t)
	ref.write("qs.jsonl", arithmeticJSONL("q", n))
	ref.writeEval("budget", spec(whole.OpenAIURL(), ""))
	if r := ref.run(); r.Code != 0 {
		t.Fatalf("the run without a budget:\n%s", r)
	}
	full := serverCost(whole.Stats())
	if got := *readSummary(t, ref.out).Results[0].Cost["model"]; math.Abs(got-full) > 1e-9 {
		t.Fatalf("summary cost %v, the server's bill %v", got, full)
	}

	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	budget := full / 3
	w.writeEval("budget", spec(srv.OpenAIURL(), fmt.Sprintf("  budget: {maxCost: %.6f}\n", budget)))
	first := w.run()
	if first.Code != 4 || !strings.Contains(first.Stderr, "the budget is exhausted: spent $") ||
		!strings.Contains(first.Stderr, "raise spec.budget and run the same command again to resume") {
		t.Fatalf("want exit 4, the budget exhausted:\n%s", first)
	}
	spent := serverCost(srv.Stats())
	// A call's worst case: its input (the prompts are short: 64 tokens
	// bounds them) and maxTokens of output.
	worst := (64*budgetInputPrice + budgetMaxTokens*budgetOutputPrice) / 1e6
	if spent > budget+concurrency*worst || spent < budget-2*concurrency*worst {
		t.Errorf("spent %.6f of a %.6f budget; want it within %.6f (the calls in flight at worst) of it", spent, budget, concurrency*worst)
	}
	recs, _ := readRecords(t, w.out)
	var recorded float64
	for _, r := range recs {
		if r.Cost == nil {
			t.Fatalf("%s has no cost", r.ID)
		}
		recorded += *r.Cost
	}
	if len(recs) == 0 || len(recs) >= n || int64(len(recs)) != srv.Stats().Requests || math.Abs(recorded-spent) > 1e-9 {
		t.Errorf("%d records costing %.9f after %d calls costing %.9f", len(recs), recorded, srv.Stats().Requests, spent)
	}
	if !strings.Contains(first.Stderr, "Budget: spent $") {
		t.Errorf("no budget line:\n%s", first.Stderr)
	}

	// Raised: the run resumes where it stopped.
	w.writeEval("budget", spec(srv.OpenAIURL(), fmt.Sprintf("  budget: {maxCost: %.6f}\n", 2*full)))
	second := w.run()
	if second.Code != 0 {
		t.Fatalf("after raising the budget:\n%s", second)
	}
	recs, _ = readRecords(t, w.out)
	expectIDs(t, recs, "q", n)
	if got := srv.Stats().Requests; got != n {
		t.Errorf("%d calls over both runs, want %d: a sample was called twice", got, n)
	}
	if got := serverCost(srv.Stats()); math.Abs(got-full) > 1e-9 {
		t.Errorf("the two parts cost %.9f, the run in one go %.9f", got, full)
	}
	if got := *readSummary(t, w.out).Results[0].Cost["model"]; math.Abs(got-full) > 1e-9 {
		t.Errorf("summary cost %.9f, want %.9f", got, full)
	}
	if !strings.Contains(second.Stdout, "COST") || !strings.Contains(second.Stdout, fmt.Sprintf("$%.6f", full)) {
		t.Errorf("the table does not show the cost %.6f:\n%s", full, second.Stdout)
	}
}

// TestIncompleteRunHasNoVerdict: a gated run its budget stopped part way
// passes no gate, however well its finished samples scored: no "Gate: passed"
// and summary.json's gate says it is incomplete.
func TestIncompleteRunHasNoVerdict(t *testing.T) {
	t.Parallel()
	const n = 40
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	// About a quarter of the run's cost (every answer is right).
	budget := float64(n/4) * (20*budgetInputPrice + 4*budgetOutputPrice) / 1e6
	w.writeEval("gated", pricedEval(srv.OpenAIURL(), 1, budgetMaxTokens, budgetInputPrice, budgetOutputPrice, "",
		fmt.Sprintf("  budget: {maxCost: %.6f}\n  gate:\n    rules: [{metric: exact_match, min: 0.5}]\n", budget)))
	r := w.run()
	if r.Code != 4 || strings.Contains(r.Stdout, "Gate: passed") || !strings.Contains(r.Stdout, "Gate: no verdict: the run is incomplete (") {
		t.Fatalf("want exit 4 and no verdict:\n%s", r)
	}
	g := readSummary(t, w.out).Gate
	if g == nil || g.Passed || !strings.HasSuffix(g.Incomplete, fmt.Sprintf(" of %d samples finished", n)) {
		t.Fatalf("summary.json gate %+v, want not passed, incomplete", g)
	}
}

// TestUnpricedCostIsUnknown: a model without pricing shows its cost as
// unknown in the records (no cost), summary.json (null) and the table.
func TestUnpricedCostIsUnknown(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 3))
	w.writeEval("unpriced", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
`, srv.OpenAIURL()))
	r := w.run()
	if r.Code != 0 {
		t.Fatalf("run:\n%s", r)
	}
	recs, _ := readRecords(t, w.out)
	for _, rec := range recs {
		if rec.Cost != nil {
			t.Errorf("%s: cost %v, want none", rec.ID, *rec.Cost)
		}
	}
	cost := readSummary(t, w.out).Results[0].Cost
	if v, ok := cost["model"]; !ok || v != nil {
		t.Errorf("summary cost %v, want model: null", cost)
	}
	if !strings.Contains(r.Stdout, "unknown") {
		t.Errorf("the table does not say unknown:\n%s", r.Stdout)
	}
}
