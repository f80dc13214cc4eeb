//go:build e2e

package cluster_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// spendEvaluation is an Evaluation document: n additions in 4 shards of
// n/4 running at once, 2 in flight each, on the fake server at port, priced,
// with a budget of maxCost dollars ("" for none).
func spendEvaluation(ns, name string, port, n int, maxCost string) string {
	budget := ""
	if maxCost != "" {
		budget = "  budget: {maxCost: " + maxCost + "}\n"
	}
	return additionsEvaluation(name, n, fmt.Sprintf(`    provider: openai
    model: fake-model
    baseURL: http://spend.%s.svc:%d/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
    parameters: {maxTokens: 16}
    pricing: {inputPerMillion: 300, outputPerMillion: 1200}
`, ns, port), fmt.Sprintf("  concurrency: 2\n  shardSize: %d\n  parallelism: 4\n%s", n/4, budget))
}

// bill is what a fake server's answers cost at spendEvaluation's prices.
func bill(s map[string]float64) float64 {
	return (s["inputTokens"]*300 + s["outputTokens"]*1200) / 1e6
}

// testBudgetInACluster: a budget of a third of a run's cost, divided among
// 4 shards running at once, stops the run (Failed, BudgetExceeded, its
// results written) having spent no more than the budget and the calls in
// flight; `kubectl get` shows the cost; raising the budget with kubectl
// patch resumes the run to its end, with no sample called twice, for exactly
// what the run costs in one go.
func testBudgetInACluster(t *testing.T) {
	ns := namespace(t, "e2e-budget")
	const n = 160
	fakeServers(t, ns, "spend", []string{}, []string{})

	applyYAML(t, ns, spendEvaluation(ns, "whole", 8081, n, ""))
	if got := watchColumns(t, ns, 5*time.Minute, "whole")["whole"]; got[0] != "Succeeded" {
		t.Fatalf("the run without a budget: %v", got)
	}
	full := bill(stats(t, ns, "spend", 8081))
	whole := getEvaluation(t, ns, "whole")
	if got := whole.Status.Spend; got == nil || got.Cost != fmt.Sprintf("%.6f", full) {
		t.Fatalf("status.spend %+v, the server's bill %.6f", got, full)
	}
	// The planner's estimate: every prompt counted as the server counts it,
	// each answer at its bound (maxTokens 16).
	if est, st := whole.Status.Estimate, stats(t, ns, "spend", 8081); est == nil || !est.Exact || float64(est.InputTokens) != st["inputTokens"] ||
		est.OutputTokens != n*16 || est.Cost != fmt.Sprintf("%.6f", (float64(est.InputTokens)*300+float64(est.OutputTokens)*1200)/1e6) {
		t.Errorf("status.estimate %+v; the server counted %v input tokens", est, st["inputTokens"])
	}
	if !slices.Contains(reasons(t, ns, "Evaluation", "whole"), "Estimated") {
		t.Errorf("no Estimated event: %v", reasons(t, ns, "Evaluation", "whole"))
	}

	budget := full / 3
	applyYAML(t, ns, spendEvaluation(ns, "budgeted", 8082, n, fmt.Sprintf("%.6f", budget)))
	start := time.Now()
	eventually(t, 5*time.Minute, time.Second, "budgeted to stop", func() error {
		if p := getEvaluation(t, ns, "budgeted").Status.Phase; p != "Failed" && p != "Succeeded" {
			return fmt.Errorf("%w: %s", errNotYet, p)
		}
		return nil
	})
	record("a third of the budget spent by 4 shards, the run stopped", time.Since(start))
	ev := getEvaluation(t, ns, "budgeted")
	if ev.Status.Reason != "BudgetExceeded" || !strings.Contains(ev.Status.Message, "Raise spec.budget to resume the run") {
		t.Fatalf("phase %s reason %q message %q", ev.Status.Phase, ev.Status.Reason, ev.Status.Message)
	}
	spent := bill(stats(t, ns, "spend", 8082))
	// A call's worst case: 64 tokens bound its input, and maxTokens its output.
	worst := (64*300.0 + 16*1200.0) / 1e6
	if spent > budget+8*worst || spent < budget/2 {
		t.Errorf("spent %.6f of a %.6f budget (the 8 calls in flight at worst: %.6f)", spent, budget, 8*worst)
	}
	if len(ev.Status.Results) != 1 || ev.Status.Results[0].Completed == 0 || ev.Status.Results[0].Completed >= n {
		t.Errorf("results %+v: want the samples done before it stopped", ev.Status.Results)
	}
	if cost, err := strconv.ParseFloat(ev.Status.Spend.Cost, 64); err != nil || cost > budget+8*worst {
		t.Errorf("status.spend.cost %q", ev.Status.Spend.Cost)
	}
	if out := printed(t, ns); !strings.Contains(out, "COST") || !strings.Contains(out, ev.Status.Spend.Cost) || !strings.Contains(out, "BudgetExceeded") {
		t.Errorf("kubectl get evaluations:\n%s", out)
	}

	mustKubectl(t, "-n", ns, "patch", "evaluation", "budgeted", "--type=merge", "-p", fmt.Sprintf(`{"spec":{"budget":{"maxCost":%.6f}}}`, 2*full))
	// Until the controller has seen the patch, the run still shows Failed.
	eventually(t, time.Minute, 250*time.Millisecond, "the raised budget observed", func() error {
		ev := getEvaluation(t, ns, "budgeted")
		if ev.Status.ObservedGeneration < ev.Generation {
			return fmt.Errorf("%w: observedGeneration %d of %d", errNotYet, ev.Status.ObservedGeneration, ev.Generation)
		}
		return nil
	})
	if got := watchColumns(t, ns, 5*time.Minute, "budgeted")["budgeted"]; got != [3]string{"Succeeded", fmt.Sprintf("%d/%d", n, n), "1.0000"} {
		t.Fatalf("after raising the budget: %v", got)
	}
	s := stats(t, ns, "spend", 8082)
	if s["requests"] != n {
		t.Errorf("%v calls for %d samples", s["requests"], n)
	}
	if got := bill(s); fmt.Sprintf("%.9f", got) != fmt.Sprintf("%.9f", full) {
		t.Errorf("the two parts cost %.9f, the run in one go %.9f", got, full)
	}
	recs, _ := fetchRecords(t, ns, "budgeted")
	exactlyOnce(t, recs, n)
}

// TestBatchModeInACluster: a model in batch mode in 2 shards, with one runner
// pod killed (deleted with no grace) and the manager deleted while batches
// are in flight. The shards' next pods take their batches up: the server sees
// no sample submitted twice, every sample has one record, kubectl get shows
// the batches ended over those submitted and kubectl describe the ids in
// flight, and the run costs the batch price.
func TestBatchModeInACluster(t *testing.T) {
	ns := namespace(t, "e2e-batch")
	const n = 400
	fakeServers(t, ns, "spend", []string{"-batch-delay=10s"})
	applyYAML(t, ns, strings.Replace(spendEvaluation(ns, "batched", 8081, n, ""),
		"    pricing: {inputPerMillion: 300, outputPerMillion: 1200}\n",
		"    pricing: {inputPerMillion: 300, outputPerMillion: 1200}\n    batch: {maxRequests: 50, maxInFlight: 4, pollInterval: 1s}\n", 1))
	start := time.Now()
	eventually(t, 3*time.Minute, 500*time.Millisecond, "batches in flight in both shards", func() error {
		b := getEvaluation(t, ns, "batched").Status.Batches
		if b == nil || b.Submitted < 6 || len(b.InFlight) < 6 {
			return fmt.Errorf("%w: %+v", errNotYet, b)
		}
		return nil
	})
	ev := getEvaluation(t, ns, "batched")
	described := mustKubectl(t, "describe", "evaluation", "-n", ns, "batched")
	if !strings.Contains(described, ev.Status.Batches.InFlight[0].ID) {
		t.Errorf("kubectl describe does not show batch %s:\n%s", ev.Status.Batches.InFlight[0].ID, described)
	}
	pods := strings.Fields(mustKubectl(t, "get", "pods", "-n", ns, "-l", "proctor.dev/component=runner",
		"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) == 0 {
		t.Fatal("no runner pod is running")
	}
	mustKubectl(t, "delete", "pod", "-n", ns, pods[0], "--grace-period=0", "--force", "--wait=false")
	manager := mustKubectl(t, "get", "pods", "-n", releaseNamespace, "-l", "app.kubernetes.io/name=proctor",
		"-o", "jsonpath={.items[0].metadata.name}")
	mustKubectl(t, "delete", "pod", "-n", releaseNamespace, manager, "--wait=false")
	t.Logf("Killed runner pod %s and deleted manager pod %s with %d batches in flight", pods[0], manager, len(ev.Status.Batches.InFlight))

	if got := watchColumns(t, ns, 6*time.Minute, "batched")["batched"]; got != [3]string{"Succeeded", fmt.Sprintf("%d/%d", n, n), "1.0000"} {
		t.Fatalf("PHASE PROGRESS SCORE = %v", got)
	}
	record("400 samples in batches of 50 (10 s each), a runner pod and the manager killed", time.Since(start))
	s := stats(t, ns, "spend", 8081)
	if s["duplicateBatchRequests"] != 0 || s["batchRequests"] != n || s["requests"] != 0 {
		t.Errorf("the server saw %v batch requests (%v submitted twice) and %v calls", s["batchRequests"], s["duplicateBatchRequests"], s["requests"])
	}
	recs, _ := fetchRecords(t, ns, "batched")
	exactlyOnce(t, recs, n)
	for _, r := range recs {
		if !strings.HasPrefix(r.Batch, "batch_") {
			t.Fatalf("record %s has batch %q", r.ID, r.Batch)
		}
	}
	ev = getEvaluation(t, ns, "batched")
	bill := (s["batchInputTokens"]*300 + s["batchOutputTokens"]*1200) / 2 / 1e6
	if ev.Status.Spend == nil || ev.Status.Spend.Cost != fmt.Sprintf("%.6f", bill) {
		t.Errorf("status.spend %+v, the batch bill %.6f", ev.Status.Spend, bill)
	}
	if out := printed(t, ns); !strings.Contains(out, "BATCHES") || !strings.Contains(out, "8/8") {
		t.Errorf("kubectl get evaluations:\n%s", out)
	}
}

// testJudgeInBatchesInACluster: a judge in batch mode judges the answers of
// 2 shards; a runner pod is force-deleted while the judge's batches are in
// flight (status.batches names the judge). The model is called once per
// sample, no judge request is submitted twice, and every record has its
// verdict.
func testJudgeInBatchesInACluster(t *testing.T) {
	ns := namespace(t, "e2e-judge-batch")
	const n = 120
	fakeServers(t, ns, "judged", []string{"-wrong-rate=0.25", "-seed=4"}, []string{"-batch-delay=8s"})
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: judged}
spec:
  datasets:
  - name: add
    source:
      inline:
%s  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: http://judged.%[2]s.svc:8081/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
    parameters: {maxTokens: 16}
  - name: grader
    provider: openai
    model: fake-judge
    baseURL: http://judged.%[2]s.svc:8082/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
    parameters: {maxTokens: 16}
    pricing: {inputPerMillion: 300, outputPerMillion: 1200}
    batch: {maxRequests: 30, maxInFlight: 2, pollInterval: 1s}
  prompt: {system: "Answer with a number only."}
  scoring: [{type: judge, judge: {model: grader}}]
  concurrency: 4
  shardSize: %[3]d
  parallelism: 2
`, additions(n), ns, n/2))
	start := time.Now()
	var judgeOf string
	eventually(t, 3*time.Minute, 500*time.Millisecond, "the judge's batches in flight in both shards", func() error {
		b := getEvaluation(t, ns, "judged").Status.Batches
		if b == nil || len(b.InFlight) < 4 {
			return fmt.Errorf("%w: %+v", errNotYet, b)
		}
		judgeOf = b.InFlight[0].Judge
		return nil
	})
	if judgeOf != "grader/judge" {
		t.Errorf("status.batches.inFlight[0].judge = %q, want grader/judge", judgeOf)
	}
	pods := strings.Fields(mustKubectl(t, "get", "pods", "-n", ns, "-l", "proctor.dev/component=runner",
		"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) == 0 {
		t.Fatal("no runner pod is running")
	}
	mustKubectl(t, "delete", "pod", "-n", ns, pods[0], "--grace-period=0", "--force", "--wait=false")
	t.Logf("Killed runner pod %s with the judge's batches in flight", pods[0])

	if got := watchColumns(t, ns, 6*time.Minute, "judged")["judged"]; got[0] != "Succeeded" || got[1] != fmt.Sprintf("%d/%d", n, n) {
		t.Fatalf("PHASE PROGRESS SCORE = %v", got)
	}
	record("120 answers judged in batches of 30 (8 s each), a runner pod killed", time.Since(start))
	if s := stats(t, ns, "judged", 8081); s["requests"] != n {
		t.Errorf("the model was called %v times for %d samples", s["requests"], n)
	}
	s := stats(t, ns, "judged", 8082)
	if s["duplicateBatchRequests"] != 0 || s["batchRequests"] != n || s["requests"] != 0 {
		t.Errorf("the judge's server saw %v batch requests (%v submitted twice) and %v calls", s["batchRequests"], s["duplicateBatchRequests"], s["requests"])
	}
	recs, _ := fetchRecords(t, ns, "judged")
	exactlyOnce(t, recs, n)
	wrong := 0
	for _, r := range recs {
		v, ok := r.Scores["judge"]
		if !ok || r.Error != "" || len(r.JudgePending) != 0 || r.JudgeCost == nil {
			t.Fatalf("record %s: %+v", r.ID, r)
		}
		if v == 0 {
			wrong++
		}
	}
	if wrong == 0 || wrong == n {
		t.Errorf("%d of %d answers judged wrong; the model answers 25%% wrongly", wrong, n)
	}
}
