package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/score"
)

// sharedKeyServer answers 429 to a fraction of calls the way a server shared
// with another team does: refusals come in bursts the client cannot predict.
// Every refused call is followed by an accepted one after refusals 429s.
func flakyQuota(refusals int64, retryAfter time.Duration) *fakeProvider {
	var count atomic.Int64
	return &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if c := count.Add(1); c%(refusals+1) != 0 {
			return nil, &provider.HTTPError{StatusCode: 429, Code: "rate_limit_exceeded", Message: "Rate limit reached", RetryAfter: retryAfter}
		}
		return echo(ctx, req, n)
	}}
}

// TestThrottlingNeverChangesAScore: two teams on one key make the server refuse
// far more calls than retry.maxAttempts; every sample must still end correct.
func TestThrottlingNeverChangesAScore(t *testing.T) {
	cases := []struct {
		name       string
		limits     ratelimit.Limits
		retryAfter time.Duration
	}{
		{"declared limit, retry-after", ratelimit.Limits{RequestsPerMinute: 600000}, 2 * time.Millisecond},
		{"declared limit, no retry-after", ratelimit.Limits{RequestsPerMinute: 600000}, 0},
		{"no declared limit, retry-after", ratelimit.Limits{}, 2 * time.Millisecond},
		{"no declared limit, no retry-after", ratelimit.Limits{}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := flakyQuota(5, tc.retryAfter) // 5 of every 6 calls refused
			plan := testPlan(t).Model("m", p, 4).Limits(tc.limits).Dataset("d", 30).
				Scorer(score.Config{Type: score.TypeExactMatch}, "").
				Retry(retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxThrottleWait: time.Minute}).Obj()
			sink := newMemSink()
			run(t, plan, sink, Options{ThrottleCooldown: time.Nanosecond})
			for i := range 30 {
				r := sink.get("m", "d", i)
				if r == nil || r.Error != "" || r.Scores["exact_match"] != 1 {
					t.Fatalf("sample %d: %+v; want it correct despite the 429s", i, r)
				}
			}
			if c := p.calls.Load(); c < 150 {
				t.Fatalf("%d calls for 30 samples: the server refused too few to test anything", c)
			}
		})
	}
}

// logLines captures an engine's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) sink() Options {
	return Options{Log: funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})}
}

func (l *logLines) find(s string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestThrottledModelIsReported: a throttled model is visible (Throttle, logs)
// while it is, and no longer once a call succeeds.
func TestThrottledModelIsReported(t *testing.T) {
	release := make(chan struct{})
	var refused atomic.Int64
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		select {
		case <-release:
			return echo(ctx, req, n)
		default:
			refused.Add(1)
			return nil, &provider.HTTPError{StatusCode: 429, RetryAfter: 5 * time.Millisecond}
		}
	}}
	plan := testPlan(t).Model("m", p, 2).Dataset("d", 4).Obj()
	plan.Retry.MaxThrottleWait = time.Minute
	var logs logLines
	opts := logs.sink()
	e, err := New(plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background(), plan.Tasks(), sink) }()
	// The engine counts a refusal after the provider returns it: wait for the
	// engine's count, not the provider's.
	deadline := time.Now().Add(10 * time.Second)
	for e.Throttle("m").Refusals < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := e.Throttle("m")
	if !st.Throttled() || st.Refusals < 3 || st.Until.IsZero() {
		t.Errorf("Throttle while refused = %+v; want throttled, with refusals and a retry-after end", st)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := e.Throttle("m"); st.Throttled() {
		t.Errorf("Throttle after successes = %+v; want not throttled", st)
	}
	if l := logs.find("Model is throttled"); !strings.Contains(l, `"model"="m"`) || !strings.Contains(l, `"retryAfter"="5ms"`) {
		t.Errorf("log of the throttling = %q; want the model and its retry-after", l)
	}
	if l := logs.find("Model is no longer throttled"); !strings.Contains(l, `"throttledFor"`) {
		t.Errorf("log of the recovery = %q; want how long it lasted", l)
	}
}

// TestQuotaThatNeverRecoversEndsTheModel: a model answering only 429 gives up
// after retry.maxThrottleWait with an error naming the model and the setting;
// its samples get no record (they run again on resume), and other models finish.
func TestQuotaThatNeverRecoversEndsTheModel(t *testing.T) {
	cases := []struct {
		name       string
		retryAfter time.Duration
		wantIn     []string
		maxTime    time.Duration
	}{
		{"no retry-after", 0, []string{"model dead answered only 429 (rate limited) for", "retry.maxThrottleWait (300ms)"}, 5 * time.Second},
		// A retry-after past the ceiling is given up on at once, not slept through.
		{"retry-after of an hour", time.Hour, []string{"model dead asked to wait 1h0m0s (retry-after)", "retry.maxThrottleWait (300ms)"}, 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dead := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
				return nil, &provider.HTTPError{StatusCode: 429, Code: "rate_limit_exceeded", Message: "quota exhausted", RetryAfter: tc.retryAfter}
			}}
			alive := &fakeProvider{fn: echo}
			plan := testPlan(t).Model("dead", dead, 3).Model("alive", alive, 3).Dataset("d", 20).
				Retry(retry.Policy{MaxAttempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxThrottleWait: 300 * time.Millisecond}).Obj()
			e, err := New(plan, Options{})
			if err != nil {
				t.Fatal(err)
			}
			sink := newMemSink()
			start := time.Now()
			err = e.Run(context.Background(), plan.Tasks(), sink)
			took := time.Since(start)
			var out *ThrottledOutError
			if !errors.As(err, &out) {
				t.Fatalf("Run = %v; want a ThrottledOutError", err)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), "quota exhausted") {
				t.Errorf("error %q does not say what the server answered", err)
			}
			if took > tc.maxTime {
				t.Errorf("gave up after %v, want within %v", took, tc.maxTime)
			}
			for i := range 20 {
				if r := sink.get("dead", "d", i); r != nil {
					t.Errorf("throttled-out model has a record for sample %d: %+v; want none (it runs again on resume)", i, r)
				}
				if r := sink.get("alive", "d", i); r == nil || r.Error != "" {
					t.Errorf("other model's sample %d: %+v; want it done", i, r)
				}
			}
			if c := dead.calls.Load(); tc.retryAfter > 0 && c > 3 {
				t.Errorf("%d calls to a model that asked for an hour; want no call after the first refusals", c)
			}
		})
	}
}

// TestAcceptedCallsOutliveTheModelsEnd: when a quota that never recovers
// ends a model, the calls its provider had already accepted finish and are
// recorded (they are paid for); only those refused leave no record.
func TestAcceptedCallsOutliveTheModelsEnd(t *testing.T) {
	accepted := make(chan struct{})
	var acceptedOnce sync.Once
	p := &fakeProvider{}
	p.fn = func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if n <= 2 {
			// Accepted: the answer takes a while, and a cancelled request
			// is lost, as over HTTP.
			acceptedOnce.Do(func() { close(accepted) })
			select {
			case <-time.After(300 * time.Millisecond):
				return echo(ctx, req, n)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		<-accepted
		return nil, &provider.HTTPError{StatusCode: 429, Code: "rate_limit_exceeded", Message: "quota exhausted", RetryAfter: time.Hour}
	}
	plan := testPlan(t).Model("m", p, 4).Dataset("d", 40).
		Retry(retry.Policy{MaxAttempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxThrottleWait: 100 * time.Millisecond}).Obj()
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	err = e.Run(context.Background(), plan.Tasks(), sink)
	var out *ThrottledOutError
	if !errors.As(err, &out) {
		t.Fatalf("Run = %v; want a ThrottledOutError", err)
	}
	var recorded []string
	for i := range 40 {
		if r := sink.get("m", "d", i); r != nil {
			if r.Error != "" || r.Output == "" {
				t.Errorf("sample %d: %+v; want the accepted call's answer", i, r)
			}
			recorded = append(recorded, r.ID)
		}
	}
	if len(recorded) != 2 {
		t.Errorf("%d records (%v) after %d calls, 2 of them accepted; want the 2 accepted calls recorded", len(recorded), recorded, p.calls.Load())
	}
}

// TestThrottledJudgeStopsTheSamplesItScores: a judge whose quota never
// recovers leaves the judged samples without a record instead of an error.
func TestThrottledJudgeStopsTheSamplesItScores(t *testing.T) {
	judge := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		return nil, &provider.HTTPError{StatusCode: 429, RetryAfter: time.Hour}
	}}
	plan := testPlan(t).Model("m", &fakeProvider{fn: echo}, 2).Model("judge", judge, 1).JudgeOnly().Dataset("d", 5).
		Scorer(score.Config{Type: score.TypeJudge, Name: "judge"}, "judge").
		Retry(retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: time.Millisecond, MaxThrottleWait: time.Minute}).Obj()
	tasks := []Task{{Model: "m", Dataset: "d", Start: 0, End: 5}}
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	err = e.Run(context.Background(), tasks, sink)
	if !isThrottledOut(err) || !strings.Contains(err.Error(), "model judge") {
		t.Fatalf("Run = %v; want the judge throttled out", err)
	}
	if n := sink.count(); n != 0 {
		t.Errorf("%d records; want none (judged samples run again on resume)", n)
	}
}

// TestStopDoesNotWaitForWaitingSamples: on Stop, samples only waiting for the
// rate limiter, a retry-after or a backoff stop at once and leave no record.
func TestStopDoesNotWaitForWaitingSamples(t *testing.T) {
	cases := []struct {
		name   string
		limits ratelimit.Limits
		fail   func(n int64) error
	}{
		// 1 request a minute: the second sample waits a minute for the limiter.
		{"rate limiter", ratelimit.Limits{RequestsPerMinute: 1}, func(int64) error { return nil }},
		{"retry-after", ratelimit.Limits{}, func(n int64) error {
			if n > 1 {
				return &provider.HTTPError{StatusCode: 429, RetryAfter: time.Hour}
			}
			return nil
		}},
		{"backoff", ratelimit.Limits{}, func(n int64) error {
			if n > 1 {
				return &provider.HTTPError{StatusCode: 503}
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first := make(chan struct{})
			p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
				if err := tc.fail(n); err != nil {
					return nil, err
				}
				close(first)
				return echo(ctx, req, n)
			}}
			plan := testPlan(t).Model("m", p, 2).Limits(tc.limits).Dataset("d", 5).
				Retry(retry.Policy{MaxAttempts: 5, Initial: time.Hour, Max: time.Hour, MaxThrottleWait: 2 * time.Hour}).Obj()
			e, err := New(plan, Options{})
			if err != nil {
				t.Fatal(err)
			}
			sink := newMemSink()
			done := make(chan error, 1)
			go func() { done <- e.Run(context.Background(), plan.Tasks(), sink) }()
			<-first
			time.Sleep(20 * time.Millisecond) // let the next sample start waiting
			e.Stop()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run still waiting 5s after Stop with nothing in flight")
			}
			// Two samples start at once and either may be the one that gets through.
			if got := ids(sink, "m", "d", 5); len(got) != 1 {
				t.Errorf("records after Stop: %v; want only the first answered sample (waiting samples run again next time)", got)
			}
		})
	}
}
