package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// arrivals records when the fake server received each call.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) add() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = append(a.at, time.Now())
}

// since returns the arrivals after t.
func (a *arrivals) since(t time.Time) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Time
	for _, x := range a.at {
		if x.After(t) {
			out = append(out, x)
		}
	}
	return out
}

// countedLLM is a fake server answering after latency, with the arrivals of
// the calls.
func countedLLM(t *testing.T, latency time.Duration) (*arrivals, string) {
	t.Helper()
	calls, _, url := countedServer(t, fakellm.Config{Latency: latency})
	return calls, url
}

// countedServer is a fake server of cfg (its Responder the default), with
// the arrivals of the calls it answered.
func countedServer(t *testing.T, cfg fakellm.Config) (*arrivals, *fakellm.Server, string) {
	t.Helper()
	calls := &arrivals{}
	cfg.Responder = func(req fakellm.Request) fakellm.Reply {
		calls.add()
		return fakellm.DefaultReply(req)
	}
	srv, url := fakeLLM(t, cfg)
	return calls, srv, url
}

// setRateLimit sets the first model's rateLimit to rpm requests a minute (0:
// none) and returns when.
func setRateLimit(t *testing.T, ns, name string, rpm int64) time.Time {
	t.Helper()
	ev := getEvaluation(t, ns, name)
	patch := client.MergeFrom(ev.DeepCopy())
	ev.Spec.Models[0].RateLimit = nil
	if rpm > 0 {
		ev.Spec.Models[0].RateLimit = &v1alpha1.RateLimit{RequestsPerMinute: rpm}
	}
	if err := k8sClient.Patch(context.Background(), ev, patch); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// TestRateLimitEditAppliesWithinSeconds: a rateLimit edited mid-run applies
// within seconds both ways. Raised, the calls queued at the old pace do not keep
// their turns (it took as long as the queue, 45 s in the report); lowered, calls
// go on at the new pace instead of stopping until the last minute's calls fit
// under the new limit (about 47 s).
func TestRateLimitEditAppliesWithinSeconds(t *testing.T) {
	ns := newNamespace(t)
	calls, url := countedLLM(t, 0)
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("paced", ns).InlineDataset("d", 400).OpenAIModel("m", url).RateLimit(20).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(400).Concurrency(16).Obj())
	eventually(t, 30*time.Second, "calls at the first limit", func() (bool, string) {
		n := len(calls.since(time.Time{}))
		return n >= 3, fmt.Sprintf("%d calls", n)
	})
	time.Sleep(2 * time.Second) // let callers queue at 20 per minute

	raised := setRateLimit(t, ns, "paced", 1200)
	eventually(t, 40*time.Second, "20 calls after raising to 1200/min", func() (bool, string) {
		n := len(calls.since(raised))
		return n >= 20, fmt.Sprintf("%d calls since the raise", n)
	})
	tookRaise := calls.since(raised)[19].Sub(raised)
	t.Logf("raised 20 → 1200/min: the 20th call after the edit came %v after it", tookRaise)
	if tookRaise > 5*time.Second {
		t.Errorf("the raise took %v to apply, want a few seconds", tookRaise)
	}

	time.Sleep(3 * time.Second) // a few seconds at 1200 per minute
	lowered := setRateLimit(t, ns, "paced", 60)
	time.Sleep(12 * time.Second)
	after := calls.since(lowered)
	prev, longest := lowered, time.Duration(0)
	for _, at := range after {
		longest = max(longest, at.Sub(prev))
		prev = at
	}
	longest = max(longest, time.Since(prev))
	t.Logf("lowered 1200 → 60/min: %d calls in the 12 s after, longest pause %v", len(after), longest)
	// The new pace is a call a second; the edit takes a reconcile and a
	// watch to reach the pod (longest pause 1.5 s on an idle machine, 3.1 s
	// with the other integration tests running under -race on 2 cores). A
	// lowered limit that stalled its queued callers would pause them for
	// their number of seconds (16 in flight).
	if longest > 5*time.Second {
		t.Errorf("calls paused %v after lowering the limit, want the new pace (1 s)", longest)
	}
	// From a second after the edit on, the new pace: about one call a second.
	if n := len(calls.since(lowered.Add(2 * time.Second))); n > 12 {
		t.Errorf("%d calls in the 10 s from 2 s after lowering to 60/min", n)
	}
	suspend := getEvaluation(t, ns, "paced")
	_ = k8sClient.Delete(context.Background(), suspend)
}

// TestRateLimitAddedMidRunApplies: a rateLimit added to a model that had
// none, mid-run, paces its calls within seconds, whether the pod runs its
// shards as one stream (the way an unlimited run's workers go; here a worker
// of 8 shards of 8, so that the window crosses a shard's end: one begun after
// the edit waits for its grant, and shares the limit with the one before
// while that one's last minute of calls counts) or a shard at a time. Each
// pod had taken the set of limited models at its start, and went on unpaced
// (548 calls in the 7 s, at 60 a minute).
func TestRateLimitAddedMidRunApplies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		latency time.Duration
		ev      func(ns, url string) *v1alpha1.Evaluation
	}{
		{"a stream of shards", 250 * time.Millisecond, func(ns, url string) *v1alpha1.Evaluation {
			return testutil.MakeEvaluation("free", ns).InlineDataset("d", 64).OpenAIModel("m", url).
				Scorer(v1alpha1.ScorerExactMatch).ShardSize(8).Parallelism(1).Concurrency(1).Obj()
		}},
		{"a shard a worker", 100 * time.Millisecond, func(ns, url string) *v1alpha1.Evaluation {
			return testutil.MakeEvaluation("free", ns).InlineDataset("d", 2000).OpenAIModel("m", url).
				Scorer(v1alpha1.ScorerExactMatch).ShardSize(1000).Concurrency(4).Obj()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			calls, url := countedLLM(t, tc.latency)
			startManager(t, ns)
			startKubelet(t, ns)
			create(t, tc.ev(ns, url))
			eventually(t, 30*time.Second, "unlimited calls", func() (bool, string) {
				n := len(calls.since(time.Time{}))
				return n >= 2, fmt.Sprintf("%d calls", n)
			})
			added := setRateLimit(t, ns, "free", 60)
			time.Sleep(10 * time.Second)
			// The edit takes a reconcile, a division and a watch to reach
			// the pods; from 3 s after it, a call a second (unlimited: 28
			// and 280), or less after a shard's end (see above).
			n := len(calls.since(added.Add(3 * time.Second)))
			t.Logf("%d calls in the 7 s from 3 s after adding 60/min (%d in all)", n, len(calls.since(time.Time{})))
			if n > 10 {
				t.Errorf("%d calls in the 7 s from 3 s after adding a rateLimit of 60/min, want about 7", n)
			}
			if n < 3 {
				t.Errorf("%d calls in the 7 s from 3 s after adding a rateLimit of 60/min, want about 7: the model stopped", n)
			}
			_ = k8sClient.Delete(context.Background(), getEvaluation(t, ns, "free"))
		})
	}
}

// TestRateLimitAddedMidRunIsPaced: a rateLimit added mid-run is paced by the
// pacer too, so that the shards' calls together fit the provider's per-second
// bucket. The server enforces 120 rpm as a bucket of 2 refilled at 2 a second
// from the start: unlimited, the run draws 429s (waited out); once the limit
// of 120 rpm applies, its three shards send no call the bucket refuses. Each
// at its share of the minute alone, unpaced, about a quarter of their calls
// were refused (TestShardsShareAPerSecondBucket).
func TestRateLimitAddedMidRunIsPaced(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 50 * time.Millisecond, RequestsPerMinute: 120})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("free", ns).InlineDataset("d", 600).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(200).Parallelism(3).Concurrency(4).Obj())
	eventually(t, 30*time.Second, "unlimited calls refused by the bucket", func() (bool, string) {
		st := srv.Stats()
		return st.Succeeded >= 4 && st.RateLimited > 0, fmt.Sprintf("%+v", st)
	})
	setRateLimit(t, ns, "free", 120)
	// The edit reaches the pods within a few seconds; a refused call's
	// retry-after may still hold a pod's calls a second after that.
	time.Sleep(4 * time.Second)
	before := srv.Stats()
	time.Sleep(8 * time.Second)
	after := srv.Stats()
	answered, refused := after.Succeeded-before.Succeeded, after.RateLimited-before.RateLimited
	t.Logf("in the 8 s from 4 s after adding 120/min: %d answered, %d refused (before: %+v)", answered, refused, before)
	if refused != 0 {
		t.Errorf("%d calls refused by the server's bucket in the 8 s from 4 s after adding 120/min: the shards' calls were not paced together", refused)
	}
	if answered < 12 {
		t.Errorf("%d calls answered in the 8 s from 4 s after adding 120/min, want about 16", answered)
	}
	_ = k8sClient.Delete(context.Background(), getEvaluation(t, ns, "free"))
}

// TestRateLimitKeptAcrossAWorkersShards: a rate-limited run whose workers
// take many shards in turn runs at its limit, against a server enforcing it
// as a per-second bucket. A shard that ended kept its share for a minute,
// shrinking (the server still counts its calls), and its worker's next shard
// got only what was left: with shards of a few seconds, 0.51 of the limit.
// The next shard's calls come after the ended one's, so it takes over that
// shard's share instead.
func TestRateLimitKeptAcrossAWorkersShards(t *testing.T) {
	ns := newNamespace(t)
	const rpm, samples = 600, 400
	calls, srv, url := countedServer(t, fakellm.Config{Latency: 50 * time.Millisecond, RequestsPerMinute: rpm})
	startManager(t, ns)
	startKubelet(t, ns)
	// 16 shards of 25, 8 for each of the 2 workers: at the limit, a shard
	// lasts 5 s.
	create(t, testutil.MakeEvaluation("lim", ns).InlineDataset("d", samples).OpenAIModel("m", url).RateLimit(rpm).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(25).Parallelism(2).Concurrency(4).Obj())
	waitPhase(t, ns, "lim", v1alpha1.PhaseSucceeded, 3*time.Minute)
	at := calls.since(time.Time{})
	if len(at) != samples {
		t.Fatalf("%d calls answered, want one a sample (%d); server: %+v", len(at), samples, srv.Stats())
	}
	// From the first call to the last, against the limit's pace.
	took := at[len(at)-1].Sub(at[0])
	pace := float64(len(at)-1) / took.Minutes()
	t.Logf("%d calls in %v: %.0f a minute, %.2f of the limit; server: %+v", len(at), took.Round(time.Millisecond), pace, pace/rpm, srv.Stats())
	// 0.99 measured; each of a worker's 7 changes of shard waits a moment for
	// the controller's grant, longer on a busy machine.
	if pace < 0.8*rpm {
		t.Errorf("the calls went at %.0f a minute, %.2f of the rateLimit of %d: the workers' shards waited for shares their earlier shards kept", pace, pace/rpm, rpm)
	}
	if st := srv.Stats(); st.RateLimited != 0 {
		t.Errorf("%d calls refused by the server's bucket of %d a minute", st.RateLimited, rpm)
	}
}

// TestRateLimitRemovedMidRunLifts: a model's rateLimit removed mid-run no
// longer paces its calls. The controller stopped dividing the budget once no
// model had a limit, so the pods kept their last shares (6 calls in the 7 s,
// at the removed 60 a minute).
func TestRateLimitRemovedMidRunLifts(t *testing.T) {
	ns := newNamespace(t)
	calls, url := countedLLM(t, 100*time.Millisecond)
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("lim", ns).InlineDataset("d", 2000).OpenAIModel("m", url).RateLimit(60).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(1000).Concurrency(4).Obj())
	eventually(t, 30*time.Second, "calls at the limit", func() (bool, string) {
		n := len(calls.since(time.Time{}))
		return n >= 3, fmt.Sprintf("%d calls", n)
	})
	removed := setRateLimit(t, ns, "lim", 0)
	time.Sleep(10 * time.Second)
	// Unlimited, the two pods' 8 calls in flight of 100 ms each: about 80 a
	// second, far beyond the removed limit's one.
	n := len(calls.since(removed.Add(3 * time.Second)))
	t.Logf("%d calls in the 7 s from 3 s after removing 60/min (%d in all)", n, len(calls.since(time.Time{})))
	if n < 50 {
		t.Errorf("%d calls in the 7 s from 3 s after removing the rateLimit of 60/min, want the model unlimited", n)
	}
	_ = k8sClient.Delete(context.Background(), getEvaluation(t, ns, "lim"))
}

// TestThrottledRunSaysSoAndLosesNothing: a server answering 429 for a while
// (another team on the key) makes the Evaluation say which model is rate
// limited (REASON RateLimited, condition RateLimited) while it lasts; every
// sample still ends right, and the condition clears.
func TestThrottledRunSaysSoAndLosesNothing(t *testing.T) {
	ns := newNamespace(t)
	var mu sync.Mutex
	var refusals int
	throttledUntil := time.Now().Add(time.Hour) // until the status shows it
	_, url := fakeLLM(t, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		mu.Lock()
		defer mu.Unlock()
		if time.Now().Before(throttledUntil) {
			refusals++
			return fakellm.Reply{Status: 429}
		}
		return fakellm.DefaultReply(req)
	}})
	startManager(t, ns)
	startKubelet(t, ns)
	// maxAttempts 1: were a 429 an attempt, every sample would fail at once.
	create(t, testutil.MakeEvaluation("throttled", ns).InlineDataset("d", 6).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(6).Concurrency(3).Retry(1, "50ms", "300ms").Obj())
	eventually(t, 30*time.Second, "the status to say the model is rate limited", func() (bool, string) {
		ev := getEvaluation(t, ns, "throttled")
		c := meta.FindStatusCondition(ev.Status.Conditions, "RateLimited")
		ok := c != nil && c.Status == metav1.ConditionTrue && ev.Status.Reason == "RateLimited" &&
			strings.Contains(ev.Status.Message, "model m since")
		return ok, fmt.Sprintf("reason %q, message %q, condition %+v", ev.Status.Reason, ev.Status.Message, c)
	})
	mu.Lock()
	throttledUntil = time.Time{}
	n := refusals
	mu.Unlock()
	if n < 3 {
		t.Fatalf("the server refused %d calls; the test proves nothing", n)
	}
	ev := waitPhase(t, ns, "throttled", v1alpha1.PhaseSucceeded, time.Minute)
	if ev.Status.Progress == nil || ev.Status.Progress.Completed != 6 || ev.Status.Progress.Errored != 0 || ev.Status.Score != "1.0000" {
		t.Errorf("progress %+v, score %q; want 6 done, none errored, 1.0000", ev.Status.Progress, ev.Status.Score)
	}
	if c := meta.FindStatusCondition(ev.Status.Conditions, "RateLimited"); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("RateLimited after the run = %+v; want False", c)
	}
}

// TestShardsShareAPerSecondBucket: one Evaluation's shards share a 120 rpm
// limit, which the provider enforces as a bucket of 2 refilled at 2 a second
// (Anthropic: 60 RPM may be enforced as 1 request per second). Each shard
// keeps to its share of the minute; together, asking the pacer, they never
// overflow the bucket (unpaced, about a quarter of their calls were refused),
// and they use the limit.
func TestShardsShareAPerSecondBucket(t *testing.T) {
	ns := newNamespace(t)
	const rpm, samples = 120, 60
	arr, srv, url := countedServer(t, fakellm.Config{Latency: 50 * time.Millisecond, RequestsPerMinute: rpm}) // arr: the calls the server accepted
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("paced", ns).InlineDataset("d", samples).OpenAIModel("m", url).RateLimit(rpm).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(samples/3).Parallelism(3).Concurrency(4).Obj())
	waitPhase(t, ns, "paced", v1alpha1.PhaseSucceeded, 120*time.Second)
	checkRecords(t, ns, "paced", []string{"m"}, sampleIDs("d", samples))
	st := srv.Stats()
	if st.RateLimited != 0 || st.Succeeded != samples {
		t.Errorf("server stats %+v: want %d answered and none refused by its bucket", st, samples)
	}
	at := arr.since(time.Time{})
	if len(at) < 2 {
		t.Fatalf("%d calls seen", len(at))
	}
	span := at[len(at)-1].Sub(at[0])
	ideal := time.Duration(len(at)-1) * time.Minute / rpm
	t.Logf("%d calls in %v (%.3f of the limit)", len(at), span, ideal.Seconds()/span.Seconds())
	if span > ideal*10/9 {
		t.Errorf("%d calls took %v: under 0.9 of the limit (%v at the limit)", len(at), span, ideal)
	}
}
