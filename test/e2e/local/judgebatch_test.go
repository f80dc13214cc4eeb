package local_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// judgedEval is an Evaluation of qs.jsonl by a model, judged by a priced
// judge on another server (judgeExtra: the judge's batch block, "" for calls).
func judgedEval(modelURL, judgeURL, judgeExtra string) string {
	return fmt.Sprintf(`  concurrency: 8
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %s
    parameters: {maxTokens: 16}
  - name: grader
    provider: openai
    model: fake-judge
    baseURL: %s
    parameters: {maxTokens: 16}
    pricing: {inputPerMillion: 2, outputPerMillion: 8}
%s  scoring:
  - type: judge
    judge: {model: grader}
`, modelURL, judgeURL, judgeExtra)
}

// TestJudgeInBatchesSurvivesKills: a judge in batch mode, killed with -9
// twice while its batches are in flight, then run to its end: the model is
// called once per sample (the answers awaiting their verdicts are kept), no
// judge request is submitted twice, every sample is judged once with the
// verdict calls give, and judging costs exactly half.
func TestJudgeInBatchesSurvivesKills(t *testing.T) {
	t.Parallel()
	const n = 120
	data := arithmeticJSONL("q", n)

	refModel, refJudge := newFake(t, fakellm.Config{WrongRate: 0.2, Seed: 9}), newFake(t, fakellm.Config{})
	ref := newWorkspace(t)
	ref.write("qs.jsonl", data)
	ref.writeEval("sync", judgedEval(refModel.OpenAIURL(), refJudge.OpenAIURL(), ""))
	if r := ref.run(); r.Code != 0 {
		t.Fatalf("the run with calls:\n%s", r)
	}
	syncSum := readSummary(t, ref.out).Results[0]

	model, judge := newFake(t, fakellm.Config{WrongRate: 0.2, Seed: 9}), newFake(t, fakellm.Config{BatchDelay: 1500 * time.Millisecond})
	w := newWorkspace(t)
	w.write("qs.jsonl", data)
	w.writeEval("batched", judgedEval(model.OpenAIURL(), judge.OpenAIURL(), "    batch: {maxRequests: 50, maxInFlight: 2, pollInterval: 100ms}\n"))
	killTwiceMidBatch(t, w, judge)
	final := w.run()
	if final.Code != 0 {
		t.Fatalf("the last run:\n%s", final)
	}
	if st := model.Stats(); st.Requests != n {
		t.Errorf("the model was called %d times for %d samples", st.Requests, n)
	}
	st := judge.Stats()
	if st.DuplicateBatchRequests != 0 || st.BatchRequests != n || st.Requests != 0 {
		t.Errorf("the judge's server saw %d batch requests (%d submitted twice) and %d calls; want %d, 0 and 0", st.BatchRequests, st.DuplicateBatchRequests, st.Requests, n)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", n)
	for _, r := range recs {
		if r.Error != "" || r.JudgeCost == nil || r.JudgeIn == 0 {
			t.Fatalf("%s: error %q, judge cost %v, %d judge input tokens", r.ID, r.Error, r.JudgeCost, r.JudgeIn)
		}
	}
	sum := readSummary(t, w.out).Results[0]
	if got, want := sum.Metrics["judge"], syncSum.Metrics["judge"]; got != want || want == 1 {
		t.Errorf("judge score %v judged in batches, %v by calls (the model answers 20%% wrongly)", got, want)
	}
	if half, got := *syncSum.Cost["judge"]/2, *sum.Cost["judge"]; math.Abs(got-half) > 1e-12 {
		t.Errorf("judging in batches cost $%.9f; half of the calls' $%.9f is $%.9f", got, *syncSum.Cost["judge"], half)
	}
}
