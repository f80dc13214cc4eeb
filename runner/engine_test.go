package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/score"
)

func TestEveryModelRunsEverySampleOnce(t *testing.T) {
	a := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // finish out of order
		return echo(ctx, req, n)
	}}
	b := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("a", a, 7).Model("b", b, 3).Dataset("d1", 57).Dataset("d2", 13).
		Scorer(score.Config{Type: score.TypeExactMatch}, "").Obj()
	sink := newMemSink()
	run(t, plan, sink, Options{})

	if got, want := sink.count(), 2*(57+13); got != want {
		t.Fatalf("%d records, want %d", got, want)
	}
	for _, m := range []string{"a", "b"} {
		for _, d := range []struct {
			name string
			n    int
		}{{"d1", 57}, {"d2", 13}} {
			for i := range d.n {
				r := sink.get(m, d.name, i)
				want := &results.Record{ID: fmt.Sprintf("s%d", i), Model: m, Dataset: d.name, Output: fmt.Sprintf("q%d", i),
					Scores: map[string]float64{"exact_match": 1}, Attempts: 1, InputTokens: 10, OutputTokens: 2,
					Expected: json.RawMessage(fmt.Sprintf(`"q%d"`, i)),
					Input:    []provider.Message{{Role: provider.RoleUser, Content: fmt.Sprintf("q%d", i)}}}
				if diff := cmp.Diff(want, r, cmpIgnoreLatency); diff != "" {
					t.Fatalf("%s/%s[%d] (-want +got):\n%s", m, d.name, i, diff)
				}
			}
		}
	}
	if a.calls.Load() != 70 || b.calls.Load() != 70 {
		t.Errorf("calls = %d, %d; want 70 each", a.calls.Load(), b.calls.Load())
	}
}

var cmpIgnoreLatency = cmp.FilterPath(func(p cmp.Path) bool {
	s := p.Last().String()
	return s == ".LatencyMillis" || s == ".StartedAt" || s == ".EndedAt" // times: TestRecordsSayWhenAndWhatWasExpected
}, cmp.Ignore())

func TestConcurrencyIsASlidingWindow(t *testing.T) {
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		time.Sleep(2 * time.Millisecond)
		return echo(ctx, req, n)
	}}
	plan := testPlan(t).Model("m", p, 5).Dataset("d", 100).Obj()
	run(t, plan, newMemSink(), Options{})
	if peak := p.peak.Load(); peak != 5 {
		t.Errorf("peak in flight = %d, want exactly 5 (the window stays full)", peak)
	}
}

func TestFailingSampleDoesNotStopOthers(t *testing.T) {
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		switch req.Prompt {
		case "q3":
			return nil, &provider.HTTPError{StatusCode: 400, Message: "bad request"}
		case "q5":
			return nil, &provider.HTTPError{StatusCode: 503, Message: "busy"}
		}
		return echo(ctx, req, n)
	}}
	plan := testPlan(t).Model("m", p, 4).Dataset("d", 10).Scorer(score.Config{Type: score.TypeExactMatch}, "").Obj()
	sink := newMemSink()
	run(t, plan, sink, Options{})
	for i := range 10 {
		r := sink.get("m", "d", i)
		switch i {
		case 3:
			if r.Attempts != 1 || !strings.Contains(r.Error, "HTTP 400") || !maps.Equal(r.Scores, map[string]float64{"exact_match": 0}) {
				t.Errorf("400 sample: attempts %d, error %q, scores %v; want 1 attempt, the 400, exact_match 0 (as the summary counts it)", r.Attempts, r.Error, r.Scores)
			}
		case 5:
			if r.Attempts != 3 || !strings.Contains(r.Error, "gave up after 3 attempts") {
				t.Errorf("503 sample: attempts %d, error %q; want 3 attempts then give up", r.Attempts, r.Error)
			}
		default:
			if r.Error != "" || r.Scores["exact_match"] != 1 {
				t.Errorf("sample %d: error %q, scores %v", i, r.Error, r.Scores)
			}
		}
	}
}

func TestRetriesTransientFailures(t *testing.T) {
	cases := []struct {
		name         string
		failures     []error
		wantAttempts int
		wantErr      string
	}{
		{"an unknown error is final", []error{errors.New("x"), errors.New("x")}, 1, "x"},
		{"503 then ok", []error{&provider.HTTPError{StatusCode: 503}}, 2, ""},
		{"408 then ok", []error{&provider.HTTPError{StatusCode: 408}}, 2, ""},
		{"dropped twice then ok", []error{errUnexpectedEOF(), errUnexpectedEOF()}, 3, ""},
		{"500 three times", []error{&provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 500}}, 3, "gave up after 3 attempts"},
		{"401 is final", []error{&provider.HTTPError{StatusCode: 401}}, 1, "HTTP 401"},
		// A 429 says "later", not "wrong": it never uses up a sample's attempts.
		{"429s with a declared limit do not count", []error{&provider.HTTPError{StatusCode: 429}, &provider.HTTPError{StatusCode: 429}, &provider.HTTPError{StatusCode: 429}}, 4, ""},
		{"429s and 500s: only the 500s count", []error{&provider.HTTPError{StatusCode: 429}, &provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 429}, &provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 429}, &provider.HTTPError{StatusCode: 500}}, 6, "gave up after 6 attempts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
				if int(n) <= len(tc.failures) {
					return nil, tc.failures[n-1]
				}
				return echo(ctx, req, n)
			}}
			plan := testPlan(t).Model("m", p, 1).Limits(ratelimit.Limits{RequestsPerMinute: 60000}).Dataset("d", 1).Obj()
			sink := newMemSink()
			run(t, plan, sink, Options{ThrottleCooldown: time.Nanosecond})
			r := sink.get("m", "d", 0)
			if r.Attempts != tc.wantAttempts || !strings.Contains(r.Error, tc.wantErr) || (tc.wantErr == "") != (r.Error == "") {
				t.Errorf("attempts %d, error %q; want %d attempts, error containing %q", r.Attempts, r.Error, tc.wantAttempts, tc.wantErr)
			}
		})
	}
}

func errUnexpectedEOF() error { return fmt.Errorf("reading the answer: %w", io.ErrUnexpectedEOF) }

func TestRetryAfterIsHonoured(t *testing.T) {
	p, calls := timed(func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if n == 1 {
			return nil, &provider.HTTPError{StatusCode: 503, RetryAfter: 150 * time.Millisecond}
		}
		return echo(ctx, req, n)
	})
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 1).Obj()
	run(t, plan, newMemSink(), Options{})
	times := calls()
	if len(times) != 2 || times[1].Sub(times[0]) < 150*time.Millisecond {
		t.Errorf("second attempt after %v, want >= 150ms (retry-after)", times[1].Sub(times[0]))
	}
}

func TestTimeoutPerAttempt(t *testing.T) {
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if req.Prompt == "q1" {
			<-ctx.Done()
			return nil, fmt.Errorf("call: %w", ctx.Err())
		}
		return echo(ctx, req, n)
	}}
	plan := testPlan(t).Model("m", p, 2).Dataset("d", 3).Timeout(30 * time.Millisecond).Obj()
	sink := newMemSink()
	start := time.Now()
	run(t, plan, sink, Options{})
	r := sink.get("m", "d", 1)
	if !strings.Contains(r.Error, "timed out after 30ms") || r.Attempts != 3 {
		t.Errorf("slow sample: error %q after %d attempts; want a timeout, retried 3 times", r.Error, r.Attempts)
	}
	if sink.get("m", "d", 0).Error != "" || sink.get("m", "d", 2).Error != "" {
		t.Error("a slow sample made others fail")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("run took %v", d)
	}
}

// overloadedServer is a provider that refuses (429) any call beyond limit in flight,
// the way a server does when a client exceeds what it accepts.
func overloadedServer(limit int64, retryAfter time.Duration) *fakeProvider {
	var inflight atomic.Int64
	return &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if inflight.Add(1) > limit {
			inflight.Add(-1)
			return nil, &provider.HTTPError{StatusCode: 429, RetryAfter: retryAfter}
		}
		defer inflight.Add(-1)
		time.Sleep(3 * time.Millisecond)
		return echo(ctx, req, n)
	}}
}

func TestUndeclaredLimitAdaptsInsteadOfFailing(t *testing.T) {
	p := overloadedServer(2, 5*time.Millisecond)
	plan := testPlan(t).Model("m", p, 16).Dataset("d", 200).Obj()
	sink := newMemSink()
	e := run(t, plan, sink, Options{ThrottleCooldown: time.Millisecond})
	for i := range 200 {
		if r := sink.get("m", "d", i); r.Error != "" {
			t.Fatalf("sample %d failed: %s", i, r.Error)
		}
	}
	if p.calls.Load() <= 200 {
		t.Fatalf("the server never refused a call; the test does not test adaptation")
	}
	if lim := e.models["m"].window.Limit(); lim >= 16 {
		t.Errorf("window still %d after 429s, want it shrunk", lim)
	}
}

func TestDeclaredLimitIsNotExceeded(t *testing.T) {
	p, calls := timedEcho()
	// 1200/min paces one call every ~50ms: 20 calls take about a second.
	plan := testPlan(t).Model("m", p, 10).Limits(ratelimit.Limits{RequestsPerMinute: 1200}).Dataset("d", 21).Obj()
	run(t, plan, newMemSink(), Options{})
	times := calls()
	if d := times[len(times)-1].Sub(times[0]); d < 950*time.Millisecond {
		t.Errorf("21 calls at 1200/min took %v, want about 1s", d)
	}
}

// TestLimitersGoOnFromEngineToEngine: an engine given the limiters of the
// one before (a runner pod's worker, shard after shard) paces its calls
// after that engine's: its first call waits its turn after the last one,
// where a new limiter's full bucket would send it at once.
func TestLimitersGoOnFromEngineToEngine(t *testing.T) {
	p, calls := timedEcho()
	// 300/min: a call every 200 ms.
	plan := testPlan(t).Model("m", p, 4).Limits(ratelimit.Limits{RequestsPerMinute: 300}).Dataset("d", 3).Obj()
	first := run(t, plan, newMemSink(), Options{})
	second := run(t, plan, newMemSink(), Options{Limiters: first.Limiters()})
	if first.models["m"].limiter != second.models["m"].limiter {
		t.Fatal("the second engine made a limiter of its own")
	}
	times := calls()
	if len(times) != 6 {
		t.Fatalf("%d calls, want 6", len(times))
	}
	if gap := times[3].Sub(times[2]); gap < 180*time.Millisecond {
		t.Errorf("the second engine's first call came %v after the first engine's last, want its turn at 300/min (200ms)", gap)
	}
}

func TestStopDrainsInFlightSamples(t *testing.T) {
	started := make(chan struct{}, 100)
	release := make(chan struct{})
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		started <- struct{}{}
		<-release
		return echo(ctx, req, n)
	}}
	plan := testPlan(t).Model("m", p, 4).Dataset("d", 50).Obj()
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	done := make(chan error)
	go func() { done <- e.Run(context.Background(), plan.Tasks(), sink) }()
	for range 4 {
		<-started
	}
	e.Stop()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := sink.count(); n != 4 {
		t.Errorf("%d records after Stop with 4 in flight, want 4 (in flight finish, no new ones start)", n)
	}
}

func TestCancelLeavesNoRecordForCutOffSamples(t *testing.T) {
	started := make(chan struct{}, 100)
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if req.Prompt == "q0" {
			return echo(ctx, req, n)
		}
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	plan := testPlan(t).Model("m", p, 3).Dataset("d", 10).Obj()
	e, _ := New(plan, Options{})
	sink := newMemSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx, plan.Tasks(), sink) }()
	for range 3 {
		<-started
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := ids(sink, "m", "d", 10); !cmp.Equal(got, []string{"s0"}) {
		t.Errorf("records after cancel: %v, want only s0 (cut-off samples must run again)", got)
	}
}

func TestResumeSkipsDoneSamples(t *testing.T) {
	p := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", p, 4).Dataset("d", 20).Obj()
	sink := newMemSink()
	for i := 0; i < 20; i += 3 {
		sink.done[sinkKey("m", "d", i)] = true
	}
	run(t, plan, sink, Options{})
	if got := p.calls.Load(); got != 13 {
		t.Errorf("%d calls, want 13 (7 of 20 were done)", got)
	}
}

func TestTaskSlices(t *testing.T) {
	p := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", p, 2).Dataset("d", 30).Obj()
	e, _ := New(plan, Options{})
	sink := newMemSink()
	if err := e.Run(context.Background(), []Task{{Model: "m", Dataset: "d", Start: 10, End: 20}}, sink); err != nil {
		t.Fatal(err)
	}
	want := []string{"s10", "s11", "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s19"}
	if diff := cmp.Diff(want, ids(sink, "m", "d", 30)); diff != "" {
		t.Errorf("slice [10,20) ran (-want +got):\n%s", diff)
	}
}

func TestJudgeCallsItsModel(t *testing.T) {
	subject := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if req.Prompt == "q1" {
			return &provider.Response{Text: "wrong"}, nil
		}
		return echo(ctx, req, n)
	}}
	judge := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		// Grade like the fake server: compare the two labelled lines.
		var exp, sub string
		for _, l := range strings.Split(req.Prompt, "\n") {
			if v, ok := strings.CutPrefix(l, "[Expected answer]:"); ok {
				exp = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "[Submitted answer]:"); ok {
				sub = strings.TrimSpace(v)
			}
		}
		if exp == sub {
			return &provider.Response{Text: "Same.\nVERDICT: CORRECT"}, nil
		}
		return &provider.Response{Text: "VERDICT: INCORRECT"}, nil
	}}
	plan := testPlan(t).Model("subject", subject, 2).Model("judge", judge, 1).JudgeOnly().Dataset("d", 3).
		Scorer(score.Config{Type: score.TypeJudge, Name: "graded"}, "judge").Obj()
	sink := newMemSink()
	run(t, plan, sink, Options{})
	got := []float64{sink.get("subject", "d", 0).Scores["graded"], sink.get("subject", "d", 1).Scores["graded"], sink.get("subject", "d", 2).Scores["graded"]}
	if diff := cmp.Diff([]float64{1, 0, 1}, got); diff != "" {
		t.Errorf("judge scores (-want +got):\n%s", diff)
	}
	if sink.get("judge", "d", 0) != nil {
		t.Error("the judge-only model was evaluated itself")
	}
	if judge.calls.Load() != 3 {
		t.Errorf("judge called %d times, want 3", judge.calls.Load())
	}
}

func TestCacheAnswersRepeatedRequests(t *testing.T) {
	c, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", p, 3).Dataset("d", 10).Obj()
	plan.Cache = c
	first := newMemSink()
	run(t, plan, first, Options{})
	second := newMemSink()
	run(t, plan, second, Options{})
	if got := p.calls.Load(); got != 10 {
		t.Errorf("%d calls over two runs, want 10 (the second from the cache)", got)
	}
	for i := range 10 {
		a, b := first.get("m", "d", i), second.get("m", "d", i)
		if b.Attempts != 0 || a.Output != b.Output || a.InputTokens != b.InputTokens {
			t.Errorf("sample %d: cached record %+v differs from %+v", i, b, a)
		}
	}
	// A different model fingerprint must not hit the cache.
	plan.Models[0].Fingerprint = "other"
	run(t, plan, newMemSink(), Options{})
	if got := p.calls.Load(); got != 20 {
		t.Errorf("%d calls after changing the model, want 20", got)
	}
}

func TestSecretsAreScrubbed(t *testing.T) {
	const secret = "sk-test-1234567890"
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if req.Prompt == "q0" {
			return &provider.Response{Text: "my key is " + secret}, nil
		}
		return nil, &provider.HTTPError{StatusCode: 401, Message: "bad key " + secret}
	}}
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 2).Obj()
	plan.Secrets = []string{secret}
	sink := newMemSink()
	run(t, plan, sink, Options{})
	for i := range 2 {
		r := sink.get("m", "d", i)
		if strings.Contains(r.Output+r.Error, secret) {
			t.Errorf("record %d leaks the secret: %+v", i, r)
		}
	}
}

func TestSinkFailureStopsTheRun(t *testing.T) {
	p := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", p, 2).Dataset("d", 100).Obj()
	sink := newMemSink()
	sink.failPut = errors.New("disk full")
	e, _ := New(plan, Options{})
	err := e.Run(context.Background(), plan.Tasks(), sink)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Run = %v, want the sink's error", err)
	}
	if p.calls.Load() > 10 {
		t.Errorf("%d calls after the sink failed, want the run to stop promptly", p.calls.Load())
	}
}

func TestPerSampleErrors(t *testing.T) {
	p := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", p, 1).Items("d",
		[]byte(`{"id":"ok","input":"a","expected":"a"}`),
		[]byte(`{"id":"noexp","input":"b"}`),
		[]byte(`[1,2]`),
	).Scorer(score.Config{Type: score.TypeExactMatch}, "").Obj()
	var err error
	if plan.Prompt, err = NewPrompt("", "{{ .Sample.input }}"); err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	run(t, plan, sink, Options{})
	want := []struct{ id, err string }{{"ok", ""}, {"noexp", "scorer exact_match: sample has no expected value"}, {"3", "item 3: not a JSON object"}}
	for i, w := range want {
		r := sink.get("m", "d", i)
		if r.ID != w.id || !strings.Contains(r.Error, w.err) || (w.err == "") != (r.Error == "") {
			t.Errorf("sample %d: id %q error %q; want id %q error containing %q", i, r.ID, r.Error, w.id, w.err)
		}
	}
	if p.calls.Load() != 2 {
		t.Errorf("%d calls, want 2 (the unreadable item is never sent)", p.calls.Load())
	}
}

func TestMissingTemplateFieldIsASampleError(t *testing.T) {
	p := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", p, 1).Items("d",
		[]byte(`{"id":"a","question":"x"}`),
		[]byte(`{"id":"b"}`),
	).Obj()
	plan.Prompt, _ = NewPrompt("", "{{ .Sample.question }}")
	sink := newMemSink()
	run(t, plan, sink, Options{})
	if r := sink.get("m", "d", 1); !strings.Contains(r.Error, `map has no entry for key "question"`) {
		t.Errorf("sample without the field: error %q", r.Error)
	}
	if r := sink.get("m", "d", 0); r.Error != "" || r.Output != "x" {
		t.Errorf("sample with the field: %+v", r)
	}
}

func TestSetLimitsTakesEffect(t *testing.T) {
	p := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 1).Obj()
	e, _ := New(plan, Options{})
	if err := e.SetLimits("m", ratelimit.Limits{RequestsPerMinute: 5}); err != nil {
		t.Fatal(err)
	}
	if got := e.models["m"].limiter.Limits(); got.RequestsPerMinute != 5 {
		t.Errorf("limits = %+v", got)
	}
	if err := e.SetLimits("nope", ratelimit.Limits{}); err == nil {
		t.Error("SetLimits on an unknown model succeeded")
	}
}

func TestRetryScheduleOnInjectedClock(t *testing.T) {
	// With the jitter pinned at 0.5 and a fake clock, the sleeps between attempts
	// are exactly half of Initial·2^(n-1), capped at Max, or the server's
	// retry-after when longer.
	cases := []struct {
		name    string
		errs    []error
		wantGap []time.Duration
	}{
		{
			name:    "exponential with full jitter",
			errs:    []error{&provider.HTTPError{StatusCode: 503}, &provider.HTTPError{StatusCode: 502}, &provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 504}},
			wantGap: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second},
		},
		{
			name:    "capped at maxBackoff",
			errs:    []error{&provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 500}, &provider.HTTPError{StatusCode: 500}},
			wantGap: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second},
		},
		{
			name:    "retry-after wins when longer",
			errs:    []error{&provider.HTTPError{StatusCode: 503, RetryAfter: 7 * time.Second}, &provider.HTTPError{StatusCode: 503, RetryAfter: 100 * time.Millisecond}},
			wantGap: []time.Duration{7 * time.Second, time.Second},
		},
		{
			name:    "429 waits as asked, for the whole model",
			errs:    []error{&provider.HTTPError{StatusCode: 429, RetryAfter: 3 * time.Second}},
			wantGap: []time.Duration{3 * time.Second},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			var mu sync.Mutex
			var at []time.Time
			p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
				mu.Lock()
				at = append(at, clock.Now())
				mu.Unlock()
				if int(n) <= len(tc.errs) {
					return nil, tc.errs[n-1]
				}
				return echo(ctx, req, n)
			}}
			plan := testPlan(t).Model("m", p, 1).Dataset("d", 1).
				Retry(retry.Policy{MaxAttempts: 10, Initial: time.Second, Max: 8 * time.Second}).Obj()
			e, err := New(plan, Options{Clock: clock, Rand: func() float64 { return 0.5 }})
			if err != nil {
				t.Fatal(err)
			}
			sink := newMemSink()
			done := make(chan error)
			go func() { done <- e.Run(context.Background(), plan.Tasks(), sink) }()
			// Each sleep is one timer on the fake clock. Stop 1ms short of the
			// expected deadline: no call may happen; the last millisecond brings it.
			for i, gap := range tc.wantGap {
				if err := clock.BlockUntilContext(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
				before := p.calls.Load()
				clock.Advance(gap - time.Millisecond)
				time.Sleep(20 * time.Millisecond)
				if p.calls.Load() != before {
					t.Fatalf("retry %d came before its %v backoff", i+1, gap)
				}
				clock.Advance(time.Millisecond)
				deadline := time.Now().Add(5 * time.Second)
				for p.calls.Load() == before {
					if time.Now().After(deadline) {
						t.Fatalf("retry %d did not come after its %v backoff", i+1, gap)
					}
					time.Sleep(time.Millisecond)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var gaps []time.Duration
			mu.Lock()
			for i := 1; i < len(at); i++ {
				gaps = append(gaps, at[i].Sub(at[i-1]))
			}
			mu.Unlock()
			if diff := cmp.Diff(tc.wantGap, gaps); diff != "" {
				t.Errorf("gaps between attempts (-want +got):\n%s", diff)
			}
			if r := sink.get("m", "d", 0); r.Error != "" || r.Attempts != len(tc.errs)+1 {
				t.Errorf("record: attempts %d, error %q; want %d attempts and success", r.Attempts, r.Error, len(tc.errs)+1)
			}
		})
	}
}

// TestRecordsSayWhenAndWhatWasExpected: a record carries its sample's
// expected answer, and when its work began and ended, by the engine's clock,
// to the millisecond.
func TestRecordsSayWhenAndWhatWasExpected(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 28, 1, 2, 3, 456789, time.UTC))
	start := clock.Now()
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		clock.Advance(1500 * time.Millisecond) // the call takes 1.5 s
		return echo(ctx, req, n)
	}}
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 1).Scorer(score.Config{Type: score.TypeExactMatch}, "").Obj()
	sink := newMemSink()
	run(t, plan, sink, Options{Clock: clock})
	rec := sink.get("m", "d", 0)
	wantStart := start.Truncate(time.Millisecond)
	wantEnd := start.Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	if rec.StartedAt == nil || !rec.StartedAt.Equal(wantStart) || rec.EndedAt == nil || !rec.EndedAt.Equal(wantEnd) {
		t.Errorf("started %v, ended %v; want %v and %v", rec.StartedAt, rec.EndedAt, wantStart, wantEnd)
	}
	if string(rec.Expected) != `"q0"` {
		t.Errorf("expected %s, want the sample's \"q0\"", rec.Expected)
	}
	b, _ := json.Marshal(rec)
	if !strings.Contains(string(b), `"startedAt":"2026-11-28T01:02:03Z"`) || !strings.Contains(string(b), `"endedAt":"2026-11-28T01:02:04.5Z"`) {
		t.Errorf("the record's JSON: %s", b)
	}
}

// TestBeginTaskWhileTheTaskBeforeIsInFlight: a task begins as soon as the
// task before has handed out its last sample, with that sample still in
// flight (its slot's neighbour takes the next task's first sample); a task
// that cannot begin stops the model's dispatch there, and what is in
// flight finishes.
func TestBeginTaskWhileTheTaskBeforeIsInFlight(t *testing.T) {
	release := make(chan struct{})
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if req.Prompt == "q0" {
			<-release // the first task's first sample waits for the second task's
		}
		if req.Prompt == "q2" {
			close(release)
		}
		return echo(ctx, req, n)
	}}
	plan := testPlan(t).Model("m", p, 2).Dataset("d", 6).Obj()
	refused := errors.New("the third task's shard is not to be had")
	var mu sync.Mutex
	var begun []int
	e, err := New(plan, Options{BeginTask: func(_ context.Context, task Task) error {
		mu.Lock()
		defer mu.Unlock()
		begun = append(begun, task.Start)
		if task.Start == 4 {
			return refused
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	tasks := []Task{{Model: "m", Dataset: "d", Start: 0, End: 2}, {Model: "m", Dataset: "d", Start: 2, End: 4}, {Model: "m", Dataset: "d", Start: 4, End: 6}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Run(ctx, tasks, sink); !errors.Is(err, refused) {
		t.Fatalf("Run = %v, want the refusal to begin the third task", err)
	}
	if diff := cmp.Diff([]int{0, 2, 4}, begun); diff != "" {
		t.Errorf("tasks begun, by start (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"s0", "s1", "s2", "s3"}, ids(sink, "m", "d", 6)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestNoTaskBeginsOnceStopping: Stop ends the dispatch before the next
// task begins (a draining pod opens no further shard).
func TestNoTaskBeginsOnceStopping(t *testing.T) {
	var e *Engine
	p := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 4).Obj()
	var begun atomic.Int64
	e, err := New(plan, Options{BeginTask: func(context.Context, Task) error {
		if begun.Add(1) == 1 {
			e.Stop()
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	tasks := []Task{{Model: "m", Dataset: "d", Start: 0, End: 2}, {Model: "m", Dataset: "d", Start: 2, End: 4}}
	if err := e.Run(context.Background(), tasks, newMemSink()); err != nil {
		t.Fatal(err)
	}
	if n := begun.Load(); n != 1 {
		t.Errorf("%d tasks begun, want 1: the second begins after Stop", n)
	}
}
