package local_test

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestTwoTeamsOnOneKeyKeepTheirScores is the trial of issue 8: two runs, each
// declaring the server's whole limit, share it. The server must refuse some of
// their calls (else the test proves nothing), and yet no sample may end in an
// error: a 429 means "later", never "wrong".
func TestTwoTeamsOnOneKeyKeepTheirScores(t *testing.T) {
	t.Parallel()
	const n, rpm = 30, 600
	srv := newFake(t, fakellm.Config{RequestsPerMinute: rpm, LimitMode: fakellm.LimitBucket, Burst: 3})
	teams := []*workspace{newWorkspace(t), newWorkspace(t)}
	for i, w := range teams {
		w.write("qs.jsonl", arithmeticJSONL(fmt.Sprintf("t%d-", i), n))
		w.writeEval(fmt.Sprintf("team%d", i), fmt.Sprintf(`  concurrency: 4
  retry: {maxAttempts: 2, initialBackoff: 50ms, maxBackoff: 200ms}
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %s
    rateLimit: {requestsPerMinute: %d}
  scoring:
  - type: exact_match
`, srv.OpenAIURL(), rpm))
	}
	res := make([]result, len(teams))
	var wg sync.WaitGroup
	for i, w := range teams {
		wg.Go(func() { res[i] = w.run() })
	}
	wg.Wait()
	if st := srv.Stats(); st.RateLimited < 5 {
		t.Fatalf("the server refused only %d calls (stats %+v): the teams did not contend, the test proves nothing", st.RateLimited, st)
	}
	for i, w := range teams {
		if res[i].Code != 0 {
			t.Errorf("team %d: want exit 0\n%s", i, res[i])
			continue
		}
		recs, _ := readRecords(t, w.out)
		expectIDs(t, recs, fmt.Sprintf("t%d-", i), n)
		for _, r := range recs {
			if r.Error != "" || r.Scores["exact_match"] != 1 {
				t.Errorf("team %d, %s: %+v; want a correct answer despite the shared limit", i, r.ID, r)
			}
		}
	}
}

// TestQuotaThatNeverRecovers: a server whose quota is gone for an hour makes
// the run end at once with exit 1 and a reason naming retry.maxThrottleWait,
// keeping what was done, and leaving the rest for a resumed run.
func TestQuotaThatNeverRecovers(t *testing.T) {
	t.Parallel()
	// Two requests an hour, the bucket holding the whole hour's: the third is
	// answered 429 with retry-after ~30m.
	srv := newFake(t, fakellm.Config{RequestsPerMinute: 2, Window: time.Hour, BurstWindow: time.Hour})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 6))
	w.writeEval("quota", quotaEval(srv.OpenAIURL(), 1))
	r := w.run()
	if r.Code != 1 {
		t.Fatalf("want exit 1\n%s", r)
	}
	if r.Elapsed > 30*time.Second {
		t.Errorf("gave up after %v; a retry-after past maxThrottleWait must end the run at once", r.Elapsed)
	}
	for _, want := range []string{"model gpt asked to wait", "(retry-after)", "retry.maxThrottleWait (5m0s)", "run again when the Evaluation is resumed"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, r)
		}
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 2 {
		t.Fatalf("%d records, want the 2 the quota allowed (and none for the rest)", len(recs))
	}
	for _, rec := range recs {
		if rec.Error != "" {
			t.Errorf("%s: %q; want no error record", rec.ID, rec.Error)
		}
	}
}

// TestAcceptedCallsAreKeptWhenTheQuotaEnds: the quota gives out while calls
// it accepted are being answered: they finish and are recorded, every answer
// the server gave (and billed) is in the results (0 of 40 were, the server
// having served 2).
func TestAcceptedCallsAreKeptWhenTheQuotaEnds(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{RequestsPerMinute: 2, Window: time.Hour, BurstWindow: time.Hour, Latency: time.Second})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 40))
	w.writeEval("quota", quotaEval(srv.OpenAIURL(), 4))
	r := w.run()
	if r.Code != 1 || !strings.Contains(r.Stderr, "retry.maxThrottleWait") {
		t.Fatalf("want exit 1, the quota given up on\n%s", r)
	}
	recs, _ := readRecords(t, w.out)
	st := srv.Stats()
	if st.Succeeded != 2 || int64(len(recs)) != st.Succeeded {
		t.Fatalf("%d records; the server answered %d calls (%d refused): every answer given must be recorded", len(recs), st.Succeeded, st.RateLimited)
	}
	for _, rec := range recs {
		if rec.Error != "" || rec.Scores["exact_match"] != 1 {
			t.Errorf("%s: %q %v; want the answer, scored", rec.ID, rec.Error, rec.Scores)
		}
	}
}

// TestSigtermWhileOnlyWaitingStopsAtOnce: when every sample is only waiting
// (for the rate limiter here), SIGTERM ends the run at once instead of after
// the grace period, and the waiting samples run next time.
func TestSigtermWhileOnlyWaitingStopsAtOnce(t *testing.T) {
	t.Parallel()
	const grace = 30 * time.Second
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 4))
	// 2 requests a minute: the first goes at once, the next waits ~30s.
	w.writeEval("paced", fmt.Sprintf(`  concurrency: 4
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %s
    rateLimit: {requestsPerMinute: 2}
`, srv.OpenAIURL()))
	p := w.start(w.runArgs("--grace-period", grace.String())...)
	waitFor(t, 20*time.Second, "the first answer", func() bool { return srv.Stats().Requests >= 1 || p.exited() })
	time.Sleep(200 * time.Millisecond) // let the first record land and the rest queue
	sent := time.Now()
	p.signal(syscall.SIGTERM)
	res := p.wait()
	if took := time.Since(sent); took > 5*time.Second {
		t.Errorf("proctor took %v to exit after SIGTERM with nothing in flight; want at once, not the %v grace period", took, grace)
	}
	if res.Code != 143 {
		t.Fatalf("want exit 143\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 1 || recs[0].Error != "" {
		t.Errorf("records after SIGTERM: %+v; want the one answered sample", recs)
	}
}

// TestConcurrencyBeyondOpenFiles: samples in flight that need more files than
// the process may open (ulimit -n 1024) never become model errors: a process
// whose hard limit allows more raises its soft one and runs every sample
// right; one that may not is refused before any call, saying how much
// concurrency fits.
func TestConcurrencyBeyondOpenFiles(t *testing.T) {
	t.Parallel()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("prlimit (util-linux) is needed to lower the open-file limit")
	}
	const n = 3000
	srv := newFake(t, fakellm.Config{})
	spec := fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %s
  scoring:
  - type: exact_match
`, srv.OpenAIURL())

	raised := newWorkspace(t)
	raised.wrap = []string{prlimit, "--nofile=1024:8192", "--"}
	raised.write("qs.jsonl", arithmeticJSONL("q", n))
	raised.writeEval("many", spec)
	if r := raised.run("--concurrency", strconv.Itoa(n)); r.Code != 0 {
		t.Fatalf("with a limit it may raise:\n%s", r)
	}
	recs, _ := readRecords(t, raised.out)
	expectIDs(t, recs, "q", n)
	for _, rec := range recs {
		if rec.Error != "" || rec.Scores["exact_match"] != 1 {
			t.Fatalf("%s: %q %v", rec.ID, rec.Error, rec.Scores)
		}
	}

	refused := newWorkspace(t)
	refused.unprivileged()
	refused.wrap = []string{prlimit, "--nofile=1024:1024", "--"}
	refused.write("qs.jsonl", arithmeticJSONL("q", n))
	refused.writeEval("many", spec)
	before := srv.Stats().Requests
	r := refused.run("--concurrency", strconv.Itoa(n))
	if r.Code != 2 || !strings.Contains(r.Stderr, "may open 1024 (ulimit -n): lower concurrency to at most 448") {
		t.Fatalf("with a limit it may not raise: want exit 2 saying what fits\n%s", r)
	}
	if got := srv.Stats().Requests - before; got != 0 {
		t.Errorf("%d calls before the refusal", got)
	}
}

// quotaEval is an Evaluation of model gpt at url on qs.jsonl, with
// concurrency samples in flight, giving up on a quota after 5 minutes.
func quotaEval(url string, concurrency int) string {
	return fmt.Sprintf(`  concurrency: %d
  retry: {maxThrottleWait: 5m}
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %s
  scoring:
  - type: exact_match
`, concurrency, url)
}
