//go:build e2e

package cluster_test

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// rescoreEvaluation is additions answered by a model on port 8081 of the
// fake servers named rescore, scored by exact_match and a judge on port 8082.
func rescoreEvaluation(ns string, n int, scoring string) string {
	return fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: rescored}
spec:
  datasets:
  - name: add
    source:
      inline:
%s  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: http://rescore.%[2]s.svc:8081/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
  - name: grader
    provider: openai
    model: fake-judge
    baseURL: http://rescore.%[2]s.svc:8082/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
  prompt: {system: "Answer with a number only."}
  scoring:
%[3]s  concurrency: 4
  shardSize: %[4]d
`, additions(n), ns, scoring, n/2)
}

// testScoringEditRescoresInACluster: editing only the scoring of a finished
// Evaluation starts a run that scores the answers of the one before again:
// the model is not called again, an unchanged judge is not either, a
// changed judge is, every sample is recorded once and says it was re-scored.
func testScoringEditRescoresInACluster(t *testing.T) {
	ns := namespace(t, "e2e-rescore")
	const n = 40
	fakeServers(t, ns, "rescore", []string{"-wrong-rate=0.25", "-seed=7"}, []string{})
	judge := "  - {type: judge, name: judged, judge: {model: grader}}\n"
	applyYAML(t, ns, rescoreEvaluation(ns, n, "  - {type: exact_match, normalize: [trim]}\n"+judge))
	if got := watchColumns(t, ns, 5*time.Minute, "rescored")["rescored"]; got[0] != "Succeeded" {
		t.Fatalf("the first run: %v", got)
	}
	first := getEvaluation(t, ns, "rescored")
	if m, j := stats(t, ns, "rescore", 8081)["requests"], stats(t, ns, "rescore", 8082)["requests"]; m != n || j != n {
		t.Fatalf("the first run called the model %v and the judge %v times, want %d each", m, j, n)
	}

	// exact_match changes, the judge does not: nothing is called again.
	start := time.Now()
	applyYAML(t, ns, rescoreEvaluation(ns, n, "  - {type: exact_match, name: exact, normalize: [trim, lowercase]}\n"+judge))
	eventually(t, 5*time.Minute, 500*time.Millisecond, "the re-scoring run to succeed", func() error {
		ev := getEvaluation(t, ns, "rescored")
		if ev.Status.Run == first.Status.Run || ev.Status.Phase != "Succeeded" {
			return fmt.Errorf("%w: run %s %s", errNotYet, ev.Status.Run, ev.Status.Phase)
		}
		return nil
	})
	record("a scoring edit re-scored 40 answers", time.Since(start))
	if m, j := stats(t, ns, "rescore", 8081)["requests"], stats(t, ns, "rescore", 8082)["requests"]; m != n || j != n {
		t.Errorf("re-scoring called the model %v and the judge %v more times, want 0 (only exact_match changed)", m-n, j-n)
	}
	if r := reasons(t, ns, "Evaluation", "rescored"); !slices.Contains(r, "Rescoring") {
		t.Errorf("no Rescoring event: %v", r)
	}
	recs, sums := fetchRecords(t, ns, "rescored")
	exactlyOnce(t, recs, n)
	wrong := 0
	for _, r := range recs {
		if !r.Rescored || r.Output == "" {
			t.Errorf("record %s: rescored %v, output %q; want the earlier answer re-scored", r.ID, r.Rescored, r.Output)
		}
		if _, ok := r.Scores["exact"]; !ok {
			t.Errorf("record %s has no score of the renamed metric: %v", r.ID, r.Scores)
		}
		if r.Scores["judged"] != r.Scores["exact"] {
			wrong++ // the fake's judge grades the numbers as exact_match does
		}
	}
	if wrong > 0 {
		t.Errorf("%d records whose kept verdict disagrees with exact_match", wrong)
	}
	if len(sums) != 1 || sums[0].Completed != n {
		t.Errorf("summaries %+v", sums)
	}

	// The judge changes: it is called again, the model still not.
	second := getEvaluation(t, ns, "rescored").Status.Run
	applyYAML(t, ns, rescoreEvaluation(ns, n, "  - {type: exact_match, name: exact, normalize: [trim, lowercase]}\n"+
		"  - {type: judge, name: judged, judge: {model: grader, rubric: \"The answer is the number expected.\"}}\n"))
	eventually(t, 5*time.Minute, 500*time.Millisecond, "the second re-scoring run to succeed", func() error {
		ev := getEvaluation(t, ns, "rescored")
		if ev.Status.Run == second || ev.Status.Phase != "Succeeded" {
			return fmt.Errorf("%w: run %s %s", errNotYet, ev.Status.Run, ev.Status.Phase)
		}
		return nil
	})
	if m, j := stats(t, ns, "rescore", 8081)["requests"], stats(t, ns, "rescore", 8082)["requests"]; m != n || j != 2*n {
		t.Errorf("after the judge changed: the model called %v and the judge %v times in all, want %d and %d", m, j, n, 2*n)
	}
	recs, _ = fetchRecords(t, ns, "rescored")
	exactlyOnce(t, recs, n)
}
