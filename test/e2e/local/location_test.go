package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// committed is the set of samples of pair m/d the location's latest commit
// holds.
func committed(t *testing.T, st *objstore.Store, model, dataset string) map[int]bool {
	t.Helper()
	ctx := context.Background()
	m, err := objects.Latest(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	done := map[int]bool{}
	if m == nil || m.Pair(model, dataset) == nil {
		return done
	}
	if err := objects.ReadPair(ctx, st, m.Pair(model, dataset), func(l results.Line) error {
		done[l.Index] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return done
}

// machine is a workspace of its own (another HOME, so another working copy)
// for the same evaluation, reaching the store.
func machine(t *testing.T, weed *testutil.Seaweed, srv *fake, n, concurrency int) *workspace {
	w := newWorkspace(t)
	slowEval(w, srv, n, concurrency)
	for k, v := range weed.Environment() {
		w.env[k] = v
	}
	return w
}

// TestResultsLocation runs proctor against a real S3-compatible server: a
// run writing to a location killed with -9 resumes on another machine with
// exactly the calls for the samples the location did not hold; proctor
// results, compare and score read the location; two runs of one location
// cannot both write it.
func TestResultsLocation(t *testing.T) {
	t.Parallel()
	weed := testutil.StartSeaweed(t)
	weed.Bucket(t, "results", "")
	const n, concurrency = 200, 4
	const loc = "s3://results/evals/slow"
	st := weed.Store(t, loc)
	// 5 s for the whole run: it is killed well before it ends, however
	// slowly the test polls the location.
	srv := newFake(t, fakellm.Config{Latency: 100 * time.Millisecond})

	first := machine(t, weed, srv, n, concurrency)
	p := first.start("run", "-f", first.evalFile(), "-o", loc, "--progress", "plain", "--sync-interval", "300ms")
	waitFor(t, 30*time.Second, "samples committed to the location", func() bool {
		return len(committed(t, st, "gpt", "qs")) >= 20 || p.exited()
	})
	if p.exited() {
		t.Fatalf("proctor finished before it could be killed\n%s", p.wait())
	}
	p.signal(syscall.SIGKILL)
	if r := p.wait(); r.Code != 128+int(syscall.SIGKILL) {
		t.Fatalf("want death by SIGKILL\n%s", r)
	}
	firstCalls := settledRequests(srv)
	// A commit the killed run had sent may still land: read the location
	// once it has not changed for a while, as the next machine will see it.
	done := committed(t, st, "gpt", "qs")
	for since := time.Now(); time.Since(since) < 500*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if now := committed(t, st, "gpt", "qs"); len(now) != len(done) {
			done, since = now, time.Now()
		}
	}
	if len(done) == 0 || len(done) >= n {
		t.Fatalf("after the kill the location holds %d samples, want some but not all", len(done))
	}
	// What the killed run recorded after its last commit is lost to other
	// machines: at most an interval's worth, plus those in flight.
	if lost := firstCalls - int64(len(done)); lost < 0 {
		t.Errorf("the location holds %d samples but the killed run made only %d calls", len(done), firstCalls)
	}

	second := machine(t, weed, srv, n, concurrency)
	res := second.proctor("run", "-f", second.evalFile(), "-o", loc, "--progress", "plain")
	if res.Code != 0 || !strings.Contains(res.Stderr, "Results: "+loc) {
		t.Fatalf("the run resumed on another machine: want exit 0 and the location named\n%s", res)
	}
	if calls := srv.Stats().Requests - firstCalls; calls != int64(n-len(done)) {
		t.Errorf("the resumed run made %d calls, want %d: one per sample the location did not hold", calls, n-len(done))
	}
	if got := committed(t, st, "gpt", "qs"); len(got) != n {
		t.Errorf("the location holds %d samples after the resumed run, want %d", len(got), n)
	}

	// proctor results exports the location, on a machine that ran nothing.
	third := machine(t, weed, srv, n, concurrency)
	if r := third.proctor("results", loc, "-o", third.out); r.Code != 0 {
		t.Fatalf("proctor results %s\n%s", loc, r)
	}
	recs, _ := readRecords(t, third.out)
	expectIDs(t, recs, "q", n)
	for _, r := range recs {
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("%s: want a correct answer, got %+v", r.ID, r)
		}
	}
	if s := readSummary(t, third.out).Results; len(s) != 1 || s[0].Completed != n {
		t.Errorf("exported summary: %+v, want %d completed", s, n)
	}
	if r := third.proctor("compare", loc, third.out); r.Code != 0 || !strings.Contains(r.Stdout, "exact_match") {
		t.Errorf("proctor compare of the location with its export\n%s", r)
	}

	// proctor score on a third machine scores the location's answers again
	// without calling the model.
	before := srv.Stats().Requests
	if r := third.proctor("score", "-f", third.evalFile(), "-o", loc, "--all", "--progress", "plain"); r.Code != 0 {
		t.Fatalf("proctor score -o %s --all\n%s", loc, r)
	}
	if calls := srv.Stats().Requests - before; calls != 0 {
		t.Errorf("proctor score made %d model calls, want none", calls)
	}
	if got := committed(t, st, "gpt", "qs"); len(got) != n {
		t.Errorf("the location holds %d samples after scoring again, want %d", len(got), n)
	}
}

// TestTwoRunsOfOneLocation starts two runs of one location at once: one
// writes it, the other is stopped, saying why.
func TestTwoRunsOfOneLocation(t *testing.T) {
	t.Parallel()
	weed := testutil.StartSeaweed(t)
	weed.Bucket(t, "results", "")
	const loc = "s3://results/evals/race"
	srv := newFake(t, fakellm.Config{Latency: 50 * time.Millisecond})
	a, b := machine(t, weed, srv, 200, 4), machine(t, weed, srv, 200, 4)
	args := func(w *workspace) []string {
		return []string{"run", "-f", w.evalFile(), "-o", loc, "--progress", "plain", "--sync-interval", "200ms"}
	}
	pa, pb := a.start(args(a)...), b.start(args(b)...)
	ra, rb := pa.wait(), pb.wait()
	if (ra.Code == 0) == (rb.Code == 0) {
		t.Fatalf("two runs of one location: want one to succeed and one to be stopped\n--- a:\n%s\n--- b:\n%s", ra, rb)
	}
	stopped := ra
	if ra.Code == 0 {
		stopped = rb
	}
	if !strings.Contains(stopped.Stderr, "two runs cannot write to one location") {
		t.Errorf("the stopped run does not say why\n%s", stopped)
	}
	if got := committed(t, weed.Store(t, loc), "gpt", "qs"); len(got) != 200 {
		t.Errorf("the location holds %d samples, want the 200 of the run that finished", len(got))
	}
}

// TestResultsLocationRefusedClearly: a location that cannot be used is
// refused before any model is called, naming it.
func TestResultsLocationRefusedClearly(t *testing.T) {
	t.Parallel()
	weed := testutil.StartSeaweed(t)
	weed.Bucket(t, "results", "")
	srv := newFake(t, fakellm.Config{})
	for _, tc := range []struct {
		name, loc string
		env       map[string]string
		code      int
		want      string
	}{
		{"not a location", "s3://", nil, 2, "is not an object store location"},
		{"dot segment", "s3://results/a/../b", nil, 2, `".." segment`},
		{"wrong secret", "s3://results/evals/x", map[string]string{"AWS_SECRET_ACCESS_KEY": "wrong"}, 1, "reading the results location"},
		{"no such bucket", "s3://missing-bucket/x", nil, 1, "missing-bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := machine(t, weed, srv, 5, 1)
			for k, v := range tc.env {
				w.env[k] = v
			}
			before := srv.Stats().Requests
			r := w.proctor("run", "-f", w.evalFile(), "-o", tc.loc, "--progress", "plain")
			if r.Code != tc.code || !strings.Contains(r.Stderr, tc.want) {
				t.Errorf("want exit %d and %q\n%s", tc.code, tc.want, r)
			}
			if strings.Contains(r.Stderr+r.Stdout, weed.SecretKey) {
				t.Errorf("the output holds the secret key\n%s", r)
			}
			if calls := srv.Stats().Requests - before; calls != 0 {
				t.Errorf("%d model calls, want none", calls)
			}
		})
	}
}

// TestGatedRunToALocation: the gate's verdict is in the summary the
// location commits, as in a directory's summary.json.
func TestGatedRunToALocation(t *testing.T) {
	t.Parallel()
	weed := testutil.StartSeaweed(t)
	weed.Bucket(t, "results", "")
	const loc = "s3://results/evals/gated"
	srv := newFake(t, fakellm.Config{})
	w := machine(t, weed, srv, 10, 2)
	w.writeEval("gated", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
  gate:
    rules:
    - {metric: exact_match, min: 0.5}
`, srv.OpenAIURL()))
	if r := w.proctor("run", "-f", w.evalFile(), "-o", loc, "--progress", "plain"); r.Code != 0 {
		t.Fatalf("a gated run to %s\n%s", loc, r)
	}
	other := machine(t, weed, srv, 10, 2)
	if r := other.proctor("results", loc, "-o", other.out); r.Code != 0 {
		t.Fatalf("proctor results %s\n%s", loc, r)
	}
	b, err := os.ReadFile(filepath.Join(other.out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Gate *struct{ Passed bool } `json:"gate"`
	}
	if err := json.Unmarshal(b, &sum); err != nil || sum.Gate == nil || !sum.Gate.Passed {
		t.Errorf("the location's summary has no passed gate (%v):\n%s", err, b)
	}
}
