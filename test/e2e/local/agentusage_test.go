package local_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestAgentReportedUsageLocally: agents that call their API themselves (no
// agent.endpoints) and report their usage as Claude Code and Codex do
// (agent.outputFormat) are scored on the answer inside their report, and
// their records, summary and table carry the tokens the server counted:
// priced at the model's pricing (Codex), or at the cost Claude Code
// reported (no pricing).
func TestAgentReportedUsageLocally(t *testing.T) {
	t.Parallel()
	const n, calls = 6, 2
	claude, codex := newFake(t, fakellm.Config{}), newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	w.writeEval("reports", fmt.Sprintf(`  concurrency: 3
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: claude
    provider: agent
    agent:
      command: [%[1]q, -calls, "%[2]d", -format, claude-code, -cost-per-token, "0.000002", "{{ .Prompt }}"]
      outputFormat: claude-code
      env: [{name: OPENAI_BASE_URL, value: %[3]q}]
  - name: codex
    provider: agent
    pricing: {inputPerMillion: 3, outputPerMillion: 15}
    agent:
      command: [%[1]q, -calls, "%[2]d", -format, codex, "{{ .Prompt }}"]
      outputFormat: codex
      env: [{name: OPENAI_BASE_URL, value: %[4]q}]
  scoring:
  - type: exact_match
`, fakeAgentBin, calls, claude.OpenAIURL(), codex.OpenAIURL()))
	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 2*n {
		t.Fatalf("%d records, want %d", len(recs), 2*n)
	}
	in, out := map[string]int64{}, map[string]int64{}
	for _, r := range recs {
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("%s/%s: error %q, scores %v, output %q; want the report's answer scored 1", r.Model, r.ID, r.Error, r.Scores, r.Output)
		}
		in[r.Model] += r.InputTokens
		out[r.Model] += r.OutputTokens
		want := float64(r.InputTokens+r.OutputTokens) * 0.000002
		if r.Model == "codex" {
			want = (float64(r.InputTokens)*3 + float64(r.OutputTokens)*15) / 1e6
		}
		if r.InputTokens == 0 || r.Cost == nil || math.Abs(*r.Cost-want) > 1e-12 {
			t.Errorf("%s/%s: %d input tokens, cost %v; want tokens, costing $%g", r.Model, r.ID, r.InputTokens, r.Cost, want)
		}
	}
	for model, srv := range map[string]*fake{"claude": claude, "codex": codex} {
		st := srv.Stats()
		if st.Requests != n*calls || in[model] != st.InputTokens || out[model] != st.OutputTokens {
			t.Errorf("%s: records hold %d/%d tokens; the server answered %d calls with %d/%d", model, in[model], out[model], st.Requests, st.InputTokens, st.OutputTokens)
		}
	}
	for _, e := range readSummary(t, w.out).Results {
		if e.Cost["model"] == nil || e.Tokens.Input != in[e.Model] {
			t.Errorf("summary of %s: cost %v, %d input tokens; want a cost and %d", e.Model, e.Cost["model"], e.Tokens.Input, in[e.Model])
		}
	}
}
