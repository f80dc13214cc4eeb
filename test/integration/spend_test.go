package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// Prices of the budget test, in dollars per million tokens.
const (
	inputPrice  = 300.0
	outputPrice = 1200.0
)

// bill is what a fake server's answers cost at those prices.
func bill(s fakellm.Stats) float64 {
	return (float64(s.InputTokens)*inputPrice + float64(s.OutputTokens)*outputPrice) / 1e6
}

// TestBudgetAcrossShards: a budget of a third of a run's cost, divided among
// 4 shards running at once, stops the run with BudgetExceeded having spent
// no more than the budget plus what the calls in flight could cost, with its
// results written; raising the budget resumes it to the end with no sample
// called twice, for exactly what the run costs in one go.
//
// With a results store, the stopped run commits what it has, and the run
// that went on commits all of it as the next generation.
func TestBudgetAcrossShards(t *testing.T) {
	t.Run("ConfigMaps", func(t *testing.T) { testBudgetAcrossShards(t, nil) })
	t.Run("ResultsStore", func(t *testing.T) {
		weed := testutil.StartSeaweed(t)
		resultsStore = weed
		t.Cleanup(func() { resultsStore = nil })
		testBudgetAcrossShards(t, weed.Bucket(t, "budget", "cluster"))
	})
}

func testBudgetAcrossShards(t *testing.T, store *objstore.Store) {
	ns := newNamespace(t)
	startManagerWith(t, ns, func(o *controllers.Options) { o.ResultsStore = store })
	startKubelet(t, ns)
	const n, shards, concurrency, maxTokens = 160, 4, 2, 16
	eval := func(name, url string) *testutil.EvaluationWrapper {
		return testutil.MakeEvaluation(name, ns).InlineDataset("d", n).OpenAIModel("m", url).
			Pricing(strconv.FormatFloat(inputPrice, 'f', -1, 64), strconv.FormatFloat(outputPrice, 'f', -1, 64)).MaxTokens(maxTokens).
			Scorer(v1alpha1.ScorerExactMatch).ShardSize(n / shards).Parallelism(shards).Concurrency(concurrency)
	}

	whole, wholeURL := fakeLLM(t, fakellm.Config{Latency: 5 * time.Millisecond})
	create(t, eval("whole", wholeURL).Obj())
	ev := waitPhase(t, ns, "whole", v1alpha1.PhaseSucceeded, 90*time.Second)
	full := bill(whole.Stats())
	if got := ev.Status.Spend; got == nil || got.Cost != fmt.Sprintf("%.6f", full) {
		t.Fatalf("status.spend %+v, the server's bill %.6f", got, full)
	}
	// Each metric's 95% interval holds its mean.
	if r := ev.Status.Results[0]; len(r.Intervals) != 1 || r.Intervals[0].Metric != "exact_match" ||
		r.Intervals[0].Lo > r.Metrics["exact_match"] || r.Intervals[0].Hi < r.Metrics["exact_match"] {
		t.Errorf("status.results[0]: metrics %v, intervals %+v", r.Metrics, r.Intervals)
	}
	// Estimated by the planner before it ran: the input exactly as the
	// server counted it, the output within its bound.
	est := ev.Status.Estimate
	switch st := whole.Stats(); {
	case est == nil:
		t.Fatal("no status.estimate")
	case est.InputTokens != st.InputTokens || !est.Exact || est.OutputTokens != n*maxTokens || st.OutputTokens > est.OutputTokens:
		t.Errorf("estimate %+v; the server counted %d input and %d output tokens", est, st.InputTokens, st.OutputTokens)
	case est.Cost != fmt.Sprintf("%.6f", (float64(est.InputTokens)*inputPrice+float64(est.OutputTokens)*outputPrice)/1e6):
		t.Errorf("estimated cost %s for %d input and %d output tokens", est.Cost, est.InputTokens, est.OutputTokens)
	}

	srv, url := fakeLLM(t, fakellm.Config{Latency: 5 * time.Millisecond})
	budget := full / 3
	create(t, eval("budgeted", url).Budget(fmt.Sprintf("%.6f", budget)).Obj())
	ev = waitPhase(t, ns, "budgeted", v1alpha1.PhaseFailed, 90*time.Second)
	if ev.Status.Reason != v1alpha1.ReasonBudgetExceeded || ev.Status.Spend == nil || ev.Status.Spend.MaxCost != fmt.Sprintf("%.6f", budget) {
		t.Fatalf("reason %q, spend %+v, message %q", ev.Status.Reason, ev.Status.Spend, ev.Status.Message)
	}
	spent := bill(srv.Stats())
	// A call's worst case: 64 tokens bound its input, and maxTokens its output.
	worst := (64*inputPrice + maxTokens*outputPrice) / 1e6
	if spent > budget+shards*concurrency*worst {
		t.Errorf("spent %.6f of a %.6f budget: more than the calls in flight (%d) at worst", spent, budget, shards*concurrency)
	}
	if spent < budget/2 {
		t.Errorf("spent %.6f of a %.6f budget: it stopped far too early", spent, budget)
	}
	if len(ev.Status.Results) != 1 || ev.Status.Results[0].Completed == 0 || ev.Status.Results[0].Completed >= n {
		t.Errorf("results %+v, want the samples done before it stopped", ev.Status.Results)
	}
	stopped := ev.Status.Results[0].Completed
	if store != nil {
		// At least what status shows: the calls in flight at the stop may
		// have added records since, and a later pass commits them.
		checkCommit(t, ev.Status.ResultsLocation, 1, true, stopped)
	}

	// Raised: the run resumes and ends.
	ev = getEvaluation(t, ns, "budgeted")
	patch := client.MergeFrom(ev.DeepCopy())
	raised := v1alpha1.Number(fmt.Sprintf("%.6f", 2*full))
	ev.Spec.Budget.MaxCost = &raised
	if err := k8sClient.Patch(context.Background(), ev, patch); err != nil {
		t.Fatal(err)
	}
	ev = waitPhase(t, ns, "budgeted", v1alpha1.PhaseSucceeded, 90*time.Second)
	checkRecords(t, ns, "budgeted", []string{"m"}, sampleIDs("d", n))
	if got := srv.Stats().Requests; got != n {
		t.Errorf("%d calls for %d samples", got, n)
	}
	if got := bill(srv.Stats()); fmt.Sprintf("%.9f", got) != fmt.Sprintf("%.9f", full) {
		t.Errorf("cost %.9f over the two parts, %.9f in one go", got, full)
	}
	if ev.Status.Spend.Cost != fmt.Sprintf("%.6f", full) || ev.Status.Results[0].Cost == nil || ev.Status.Results[0].Cost.Model != fmt.Sprintf("%.6f", full) {
		t.Errorf("spend %+v, results cost %+v; want %.6f", ev.Status.Spend, ev.Status.Results[0].Cost, full)
	}
	if store != nil {
		checkCommit(t, ev.Status.ResultsLocation, 2, false, n)
		// They go on the pass after the one that ended the run (tidyEnded).
		eventually(t, 30*time.Second, "no staging chunk left after the last commit", func() (bool, string) {
			keys, err := resultsStore.Store(t, ev.Status.ResultsLocation).List(context.Background(), "staging/")
			return err == nil && len(keys) == 0, fmt.Sprintf("%v (%v)", keys, err)
		})
	}
}

// checkCommit checks the latest commit at location in the results store:
// its generation (at least gen), whether it says the run stopped, and that
// it holds each sample at most once: done of them, or, for a stopped run,
// at least done.
func checkCommit(t *testing.T, location string, gen int64, stopped bool, done int64) {
	t.Helper()
	ctx := context.Background()
	res, err := objects.ReadResults(ctx, resultsStore.Store(t, location), location)
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Manifest; m.Generation < gen || (m.Stopped != "") != stopped {
		t.Errorf("the commit at %s: generation %d, stopped %q; want at least %d, stopped %v", location, m.Generation, m.Stopped, gen, stopped)
	}
	seen := map[string]int{}
	if err := res.Records(ctx, func(r *results.Record) { seen[r.ID]++ }); err != nil {
		t.Fatal(err)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("sample %s is in the commit %d times", id, k)
		}
	}
	if got := int64(len(seen)); got != done && (!stopped || got < done) {
		t.Errorf("the commit holds %d samples, want %d", got, done)
	}
}

// TestBatchModeInShards: a model in batch mode in 2 shards; one shard's pod
// is deleted while its batches are in flight, and its next pod takes them up.
// No sample is submitted twice, every sample has its record, status.batches
// counts the batches, and the run costs the server's batch bill.
func TestBatchModeInShards(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{BatchDelay: 1500 * time.Millisecond})
	startManager(t, ns)
	k := startKubelet(t, ns)
	const n = 200
	ev := testutil.MakeEvaluation("batched", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Pricing(strconv.FormatFloat(inputPrice, 'f', -1, 64), strconv.FormatFloat(outputPrice, 'f', -1, 64)).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(n / 2).Parallelism(2).Obj()
	ev.Spec.Models[0].Batch = &v1alpha1.BatchMode{MaxRequests: ptr.To[int32](30), PollInterval: &v1alpha1.PollInterval{Duration: 100 * time.Millisecond}}
	create(t, ev)
	eventually(t, 30*time.Second, "shard m/1's batches to be submitted", func() (bool, string) {
		st := srv.Stats()
		return st.BatchRequests >= n, fmt.Sprintf("%+v", st)
	})
	if !k.kill("m", 1) {
		t.Fatal("shard m/1 was not running")
	}
	done := waitPhase(t, ns, "batched", v1alpha1.PhaseSucceeded, 90*time.Second)
	checkRecords(t, ns, "batched", []string{"m"}, sampleIDs("d", n))
	st := srv.Stats()
	if st.DuplicateBatchRequests != 0 || st.BatchRequests != n || st.Requests != 0 {
		t.Errorf("the server saw %d batch requests (%d twice) and %d calls", st.BatchRequests, st.DuplicateBatchRequests, st.Requests)
	}
	if k.attempts("m", 1) < 2 {
		t.Errorf("shard m/1 ran %d pods, want a second one after the deletion", k.attempts("m", 1))
	}
	b := done.Status.Batches
	if b == nil || b.Submitted != 8 || b.Ended != 8 || b.Text != "8/8" || len(b.InFlight) != 0 {
		t.Errorf("status.batches %+v, want 8 submitted (4 a shard of 100 in 30s) and ended", b)
	}
	bill := (float64(st.BatchInputTokens)*inputPrice + float64(st.BatchOutputTokens)*outputPrice) / 2 / 1e6
	if done.Status.Spend == nil || done.Status.Spend.Cost != fmt.Sprintf("%.6f", bill) {
		t.Errorf("status.spend %+v, the server's batch bill (half price) %.6f", done.Status.Spend, bill)
	}
}

// TestJudgeInBatchesInShards: a judge in batch mode judges the answers of 2
// shards; one shard's pod is deleted while its judge batches are in flight,
// and its next pod takes them up with the answers it kept: the model is
// called once per sample, no judge request is submitted twice, and every
// record has its verdict.
func TestJudgeInBatchesInShards(t *testing.T) {
	ns := newNamespace(t)
	model, modelURL := fakeLLM(t, fakellm.Config{WrongRate: 0.3, Seed: 3})
	judge, judgeURL := fakeLLM(t, fakellm.Config{BatchDelay: 1500 * time.Millisecond})
	startManager(t, ns)
	k := startKubelet(t, ns)
	const n = 100
	ev := testutil.MakeEvaluation("judged", ns).InlineDataset("d", n).OpenAIModel("m", modelURL).
		OpenAIModel("grader", judgeURL).Pricing("2", "8").ShardSize(n / 2).Parallelism(2).Obj()
	ev.Spec.Models[1].Batch = &v1alpha1.BatchMode{MaxRequests: ptr.To[int32](20), PollInterval: &v1alpha1.PollInterval{Duration: 100 * time.Millisecond}}
	ev.Spec.Scoring = []v1alpha1.Scorer{{Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "grader"}}}
	create(t, ev)
	eventually(t, 30*time.Second, "the judge batches to be submitted", func() (bool, string) {
		st := judge.Stats()
		return st.BatchRequests >= n, fmt.Sprintf("%+v", st)
	})
	if !k.kill("m", 1) {
		t.Fatal("shard m/1 was not running")
	}
	done := waitPhase(t, ns, "judged", v1alpha1.PhaseSucceeded, 90*time.Second)
	recs := checkRecords(t, ns, "judged", []string{"m"}, sampleIDs("d", n))
	if got := model.Stats().Requests; got != n {
		t.Errorf("the model was called %d times for %d samples", got, n)
	}
	st := judge.Stats()
	if st.DuplicateBatchRequests != 0 || st.BatchRequests != n || st.Requests != 0 {
		t.Errorf("the judge's server saw %d batch requests (%d twice) and %d calls", st.BatchRequests, st.DuplicateBatchRequests, st.Requests)
	}
	if k.attempts("m", 1) < 2 {
		t.Errorf("shard m/1 ran %d pods, want a second one after the deletion", k.attempts("m", 1))
	}
	wrong := 0
	for _, r := range recs {
		v, ok := r.Scores["judge"]
		if !ok || len(r.JudgePending) != 0 || r.Error != "" || r.JudgeCost == nil {
			t.Fatalf("record %s: %+v", r.ID, r)
		}
		if v == 0 {
			wrong++
		}
	}
	if wrong == 0 || wrong == n {
		t.Errorf("%d of %d answers judged wrong; the model answers 30%% wrongly", wrong, n)
	}
	if len(done.Status.Results) != 1 || done.Status.Results[0].Completed != n {
		t.Errorf("status.results %+v", done.Status.Results)
	}
}
