package local_test

import (
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// batchEval is an Evaluation of qs.jsonl on one priced model, in batch
// mode (batch: the batch block, "" for calls).
func batchEval(url string, batch string) string {
	return pricedEval(url, 8, 16, 2.5, 10, batch, "")
}

// TestBatchModeSurvivesKills: a run in batch mode killed with -9 twice while
// its batches are in flight, then run to its end, submits no sample twice
// (the server counts resubmissions), records every sample exactly once with
// the scores the same run gets with calls, and costs exactly half.
func TestBatchModeSurvivesKills(t *testing.T) {
	t.Parallel()
	const n = 300
	data := arithmeticJSONL("q", n)

	calls := newFake(t, fakellm.Config{WrongRate: 0.1, Seed: 5})
	ref := newWorkspace(t)
	ref.write("qs.jsonl", data)
	ref.writeEval("sync", batchEval(calls.OpenAIURL(), ""))
	if r := ref.run(); r.Code != 0 {
		t.Fatalf("the run with calls:\n%s", r)
	}
	syncSum := readSummary(t, ref.out).Results[0]

	srv := newFake(t, fakellm.Config{WrongRate: 0.1, Seed: 5, BatchDelay: 1500 * time.Millisecond})
	w := newWorkspace(t)
	w.write("qs.jsonl", data)
	w.writeEval("batched", batchEval(srv.OpenAIURL(), "    batch: {maxRequests: 70, maxInFlight: 2, pollInterval: 100ms}\n"))
	killTwiceMidBatch(t, w, srv)
	final := w.run()
	if final.Code != 0 {
		t.Fatalf("the last run:\n%s", final)
	}
	st := srv.Stats()
	if st.DuplicateBatchRequests != 0 || st.BatchRequests != n || st.Requests != 0 {
		t.Errorf("the server saw %d batch requests (%d submitted twice) and %d calls; want %d, 0 and 0", st.BatchRequests, st.DuplicateBatchRequests, st.Requests, n)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", n)
	for _, r := range recs {
		if !strings.HasPrefix(r.Batch, "batch_") || r.Error != "" {
			t.Fatalf("%s: batch %q error %q", r.ID, r.Batch, r.Error)
		}
	}
	sum := readSummary(t, w.out).Results[0]
	if got, want := sum.Metrics["exact_match"], syncSum.Metrics["exact_match"]; got != want || want == 1 {
		t.Errorf("exact_match %v in batch mode, %v with calls (the server answers 10%% wrongly)", got, want)
	}
	if half, got := *syncSum.Cost["model"]/2, *sum.Cost["model"]; math.Abs(got-half) > 1e-12 {
		t.Errorf("batch mode cost $%.9f, half of the calls' $%.9f is $%.9f", got, *syncSum.Cost["model"], half)
	}
}

// killTwiceMidBatch kills proctor run with -9 twice, each time a little
// after it submitted a batch to srv.
func killTwiceMidBatch(t *testing.T, w *workspace, srv *fake) {
	t.Helper()
	for kill := 1; kill <= 2; kill++ {
		before := srv.Stats().Batches
		p := w.start(w.runArgs()...)
		waitFor(t, 20*time.Second, "a batch submitted", func() bool { return srv.Stats().Batches > before })
		time.Sleep(time.Duration(kill) * 200 * time.Millisecond)
		p.signal(syscall.SIGKILL)
		if r := p.wait(); r.Code != 128+9 {
			t.Fatalf("kill %d: %s", kill, r)
		}
	}
}

// TestRestartCancelsBatchesInFlight: --restart cancels the batches a killed
// run left in flight (their answers would be paid for and never read), then
// starts over.
func TestRestartCancelsBatchesInFlight(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{BatchDelay: time.Hour})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 20))
	w.writeEval("restarted", batchEval(srv.OpenAIURL(), "    batch: {maxRequests: 10, pollInterval: 100ms}\n"))
	p := w.start(w.runArgs()...)
	waitFor(t, 20*time.Second, "both batches submitted", func() bool { return srv.Stats().Batches == 2 })
	p.signal(syscall.SIGKILL)
	p.wait()

	// Answered at once from now on: the restarted run's batches end.
	w.writeEval("restarted", batchEval(srv.OpenAIURL(), "    batch: {maxRequests: 20, pollInterval: 100ms}\n"))
	srv.SetBatchDelay(0)
	r := w.run("--restart")
	if r.Code != 0 || strings.Count(r.Stderr, "--restart: cancelling batch batch_") != 2 || strings.Count(r.Stderr, " ended (cancelled)") != 2 {
		t.Fatalf("want both batches cancelled:\n%s", r)
	}
	if st := srv.Stats(); st.BatchesCancelled != 2 || st.DuplicateBatchRequests != 0 || st.Batches != 3 {
		t.Errorf("server %+v", st)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", 20)
}
