package pacer

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

var epoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// fixed resolves every caller to one bucket, for one ServiceAccount.
type fixed struct {
	mu sync.Mutex
	b  Bucket
	sa string
}

func (f *fixed) Resolve(_ context.Context, ns, ev, caller string) (Bucket, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if caller == "nobody" {
		return Bucket{}, "", ErrUnknown
	}
	return f.b, f.sa, nil
}

func (f *fixed) set(b Bucket) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.b = b
}

const runner = "system:serviceaccount:team:ev-runner"

// conforming counts the calls at times a provider's bucket of capacity c
// refilled continuously at limit a minute would refuse.
func refused(times []time.Time, limit, c float64) int {
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	level, bad := c, 0
	for i, t := range times {
		if i > 0 {
			level = math.Min(c, level+limit/60*t.Sub(times[i-1]).Seconds())
		}
		if level < 1-1e-9 {
			bad++
			continue
		}
		level--
	}
	return bad
}

// TestPacerSpacesShardsTogether: shards that each keep to their share of 120
// rpm, paced on their own, send at the same moments now and then (what a
// provider enforcing 120 rpm as 2 a second refuses); asking the pacer first,
// every call fits a bucket of 2 refilled at 2 a second.
func TestPacerSpacesShardsTogether(t *testing.T) {
	const limit, shards, each = 120, 3, 60
	run := func(paced bool) []time.Time {
		clock := clockwork.NewFakeClockAt(epoch)
		s := &Server{Resolver: &fixed{b: Bucket{Key: "k", Limits: ratelimit.Limits{RequestsPerMinute: limit}, Burst: time.Second}, sa: "ev-runner"},
			Clock: clock, Log: testr.New(t)}
		s.init()
		clock.Advance(DefaultHorizon) // past a new leader's wait
		var times []time.Time
		own := make([]*ratelimit.Limiter, shards)
		next := make([]time.Time, shards)
		for i := range own {
			own[i] = ratelimit.New(ratelimit.Limits{RequestsPerMinute: limit / shards}, ratelimit.DefaultSlack, clock)
			// Pods that started within a tenth of a second.
			next[i] = clock.Now().Add(time.Duration(i) * 50 * time.Millisecond)
		}
		// An event loop over the shards: each reserves its own turn, then
		// (paced) asks the pacer, and sends.
		for range shards * each {
			i := 0
			for j := range next {
				if next[j].Before(next[i]) {
					i = j
				}
			}
			if d := next[i].Sub(clock.Now()); d > 0 {
				clock.Advance(d)
			}
			r := own[i].Reserve(ratelimit.Cost{Requests: 1})
			at := r.At()
			if paced {
				if d := at.Sub(clock.Now()); d > 0 {
					clock.Advance(d)
				}
				resp := s.Reserve(s.Resolver.(*fixed).b, runner, ratelimit.Cost{Requests: 1})
				for resp.RetryNanos > 0 {
					clock.Advance(time.Duration(resp.RetryNanos))
					resp = s.Reserve(s.Resolver.(*fixed).b, runner, ratelimit.Cost{Requests: 1})
				}
				at = clock.Now().Add(time.Duration(resp.WaitNanos))
			}
			times = append(times, at)
			next[i] = at.Add(time.Millisecond)
		}
		return times
	}
	if bad := refused(run(false), limit, 2); bad == 0 {
		t.Fatalf("unpaced, the shards' calls all fit the provider's bucket: the test shows nothing")
	} else {
		t.Logf("unpaced: %d of %d calls refused", bad, shards*each)
	}
	times := run(true)
	if bad := refused(times, limit, 2); bad > 0 {
		t.Errorf("paced: a bucket of 2 refilled at 2/s refuses %d of %d calls", bad, len(times))
	}
	// And the limit is used: 180 calls at 2/s take about 90 s, not much more.
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	if span := times[len(times)-1].Sub(times[0]); span > 95*time.Second {
		t.Errorf("paced: 180 calls took %v, want about 90 s", span)
	}
}

// TestPacerOverHTTP: clients reach the pacer over HTTP; an unknown caller, a
// stranger's ServiceAccount and an unreachable pacer all leave the call to
// the pod's own pace, counted; settlements come back.
func TestPacerOverHTTP(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	res := &fixed{b: Bucket{Key: "k", Limits: ratelimit.Limits{RequestsPerMinute: 60, InputTokensPerMinute: 600}}, sa: "ev-runner"}
	// Both places within the horizon: the clients wait on the real clock.
	s := &Server{Resolver: res, Clock: clock, Log: testr.New(t), BusyHorizon: DefaultHorizon}
	s.init()
	clock.Advance(DefaultHorizon)
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	newClient := func(user string) *Client {
		c := NewClient(ClientOptions{URL: hs.URL, Namespace: "team", Evaluation: "ev", Log: testr.New(t),
			HTTP: &http.Client{Transport: userTransport(user)}})
		t.Cleanup(c.Close)
		return c
	}
	ctx := context.Background()
	c := newClient(runner)
	p1, err := c.Pace(ctx, "m", ratelimit.Cost{Requests: 1, InputTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.Pace(ctx, "m", ratelimit.Cost{Requests: 1, InputTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if c.Paced() != 2 || c.Unpaced() != 0 {
		t.Fatalf("paced %d, unpaced %d; want 2 and 0", c.Paced(), c.Unpaced())
	}
	// 60 rpm: one a second, the second call's place a second after the first's.
	if d := p2.(*place).at.Sub(p1.(*place).at); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("the second call's place is %v after the first's, want about 1s", d)
	}
	p1.Settle(ratelimit.Cost{Requests: 1, InputTokens: 7})
	p2.Cancel()
	c.Close()
	s.mu.Lock()
	left := len(s.places)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d places left after settling and cancelling both", left)
	}

	// A stranger may not take the Evaluation's places.
	stranger := newClient("system:serviceaccount:other:intruder")
	if _, err := stranger.Pace(ctx, "m", ratelimit.Cost{Requests: 1}); err != nil || stranger.Unpaced() != 1 || stranger.Paced() != 0 {
		t.Errorf("a stranger's call: err %v, paced %d, unpaced %d; want refused (unpaced)", err, stranger.Paced(), stranger.Unpaced())
	}
	// Nor may anyone pace an unknown caller.
	if _, err := newClient(runner).Pace(ctx, "nobody", ratelimit.Cost{Requests: 1}); err != nil {
		t.Error(err)
	}
	// A key with no limit places nothing.
	res.set(Bucket{Key: "free"})
	c2 := newClient(runner)
	if p, err := c2.Pace(ctx, "m", ratelimit.Cost{Requests: 1}); err != nil || c2.Paced() != 0 || c2.Unpaced() != 0 {
		t.Errorf("an unlimited key: %T %v, paced %d, unpaced %d; want a free call", p, err, c2.Paced(), c2.Unpaced())
	}

	// A pacer that does not answer: the pod paces on its own, and asks again
	// only after the backoff.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	c3 := NewClient(ClientOptions{URL: dead, Namespace: "team", Evaluation: "ev", Log: testr.New(t), Clock: clock})
	defer c3.Close()
	for range 3 {
		if _, err := c3.Pace(ctx, "m", ratelimit.Cost{Requests: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if c3.Unpaced() != 3 {
		t.Errorf("unpaced %d with the pacer down, want 3", c3.Unpaced())
	}
}

// userTransport sends requests as user (the test server trusts X-Remote-User).
type userTransport string

func (u userTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Remote-User", string(u))
	return http.DefaultTransport.RoundTrip(r)
}

// TestPacerNewLeaderWaits: a new leader gives no place for its horizon (its
// predecessor's places may still be due), then starts the key's bucket empty;
// a call further ahead than the horizon is told to ask again, taking nothing.
func TestPacerNewLeaderWaits(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	b := Bucket{Key: "k", Limits: ratelimit.Limits{RequestsPerMinute: 120}, Burst: time.Second}
	s := &Server{Resolver: &fixed{b: b, sa: "ev-runner"}, Clock: clock, Log: testr.New(t), BusyHorizon: DefaultHorizon}
	s.init()
	if r := s.Reserve(b, runner, ratelimit.Cost{Requests: 1}); r.ID != "" || time.Duration(r.RetryNanos) != DefaultHorizon {
		t.Fatalf("a new leader's first answer %+v; want ask again in %v", r, DefaultHorizon)
	}
	clock.Advance(DefaultHorizon)
	r := s.Reserve(b, runner, ratelimit.Cost{Requests: 1})
	if r.ID == "" || r.WaitNanos <= 0 {
		t.Errorf("the first place after the wait: %+v; want one after the emptied bucket refilled a call", r)
	}
	// 120 rpm: a call every half second, the sixth over 3 s ahead.
	places := 1
	for r.ID != "" {
		if time.Duration(r.WaitNanos) > DefaultHorizon {
			t.Fatalf("a place %v ahead, beyond the horizon", time.Duration(r.WaitNanos))
		}
		if r = s.Reserve(b, runner, ratelimit.Cost{Requests: 1}); r.ID != "" {
			places++
		}
	}
	if places != 5 || r.RetryNanos <= 0 {
		t.Errorf("%d places, then %+v; want 5 within the horizon, then ask again later", places, r)
	}
	// Asking again took nothing: the next one is no further.
	if r2 := s.Reserve(b, runner, ratelimit.Cost{Requests: 1}); r2.RetryNanos != r.RetryNanos {
		t.Errorf("asked again at once: retry in %v, before %v", time.Duration(r2.RetryNanos), time.Duration(r.RetryNanos))
	}
}

// TestPacerLimitEditAppliesAtOnce: the bucket follows the resources.
func TestPacerLimitEditAppliesAtOnce(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	res := &fixed{b: Bucket{Key: "k", Limits: ratelimit.Limits{RequestsPerMinute: 6}}, sa: "ev-runner"}
	s := &Server{Resolver: res, Clock: clock, Log: testr.New(t), Horizon: time.Minute, BusyHorizon: time.Minute}
	s.init()
	clock.Advance(2 * time.Minute)
	first := s.Reserve(res.b, runner, ratelimit.Cost{Requests: 1})
	slow := s.Reserve(res.b, runner, ratelimit.Cost{Requests: 1})
	if d := time.Duration(slow.WaitNanos - first.WaitNanos); d < 9*time.Second {
		t.Fatalf("at 6 rpm the second call waits %v after the first, want 10s", d)
	}
	res.set(Bucket{Key: "k", Limits: ratelimit.Limits{RequestsPerMinute: 600}})
	fast := s.Reserve(res.b, runner, ratelimit.Cost{Requests: 1})
	if d := time.Duration(fast.WaitNanos); d > 11*time.Second {
		t.Errorf("after raising the limit to 600 rpm, a call waits %v", d)
	}
}

func TestClientGivesUpWithItsContext(t *testing.T) {
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, cluster.PaceResponse{RetryNanos: int64(time.Hour)})
	}))
	// As the pacer serves: HTTP/2 without TLS, which the client speaks.
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetHTTP1(true)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	defer hs.Close()
	c := NewClient(ClientOptions{URL: hs.URL, Log: testr.New(t)})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Pace(ctx, "m", ratelimit.Cost{Requests: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Pace while told to wait an hour: %v; want the context's deadline", err)
	}
}

// TestPacerSpacesTokensToo: the same for an input-token limit, with calls of
// every size, some larger than the provider's bucket holds (a second of
// 6,000 a minute: 100 tokens), which it accepts when full and then owes.
func TestPacerSpacesTokensToo(t *testing.T) {
	const limit, shards, each = 6000, 3, 40
	sizes := []int64{30, 160, 45, 90, 20, 120, 60}
	run := func(paced bool) (times []time.Time, costs []int64) {
		clock := clockwork.NewFakeClockAt(epoch)
		b := Bucket{Key: "k", Limits: ratelimit.Limits{InputTokensPerMinute: limit}, Burst: time.Second}
		s := &Server{Resolver: &fixed{b: b, sa: "ev-runner"}, Clock: clock, Log: testr.New(t)}
		s.init()
		clock.Advance(DefaultHorizon + ratelimit.Period)
		own := make([]*ratelimit.Limiter, shards)
		next := make([]time.Time, shards)
		n := make([]int, shards)
		for i := range own {
			own[i] = ratelimit.New(ratelimit.Limits{InputTokensPerMinute: limit / shards}, ratelimit.DefaultSlack, clock)
			next[i] = clock.Now().Add(time.Duration(i) * 30 * time.Millisecond)
		}
		for range shards * each {
			i := 0
			for j := range next {
				if next[j].Before(next[i]) {
					i = j
				}
			}
			if d := next[i].Sub(clock.Now()); d > 0 {
				clock.Advance(d)
			}
			cost := ratelimit.Cost{Requests: 1, InputTokens: sizes[(i*7+n[i])%len(sizes)]}
			n[i]++
			at := own[i].Reserve(cost).At()
			if paced {
				if d := at.Sub(clock.Now()); d > 0 {
					clock.Advance(d)
				}
				resp := s.Reserve(b, runner, cost)
				for resp.RetryNanos > 0 {
					clock.Advance(time.Duration(resp.RetryNanos))
					resp = s.Reserve(b, runner, cost)
				}
				at = clock.Now().Add(time.Duration(resp.WaitNanos))
			}
			times, costs = append(times, at), append(costs, cost.InputTokens)
			next[i] = at.Add(time.Millisecond)
		}
		return times, costs
	}
	// A provider's bucket of 100 tokens refilled at 100 a second.
	refusedTokens := func(times []time.Time, costs []int64) int {
		idx := make([]int, len(times))
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return times[idx[a]].Before(times[idx[b]]) })
		const c = limit / 60.0
		level, bad := c, 0
		for k, i := range idx {
			if k > 0 {
				level = math.Min(c, level+limit/60.0*times[i].Sub(times[idx[k-1]]).Seconds())
			}
			if level < math.Min(float64(costs[i]), c)-1e-9 {
				bad++
				continue
			}
			level -= float64(costs[i])
		}
		return bad
	}
	if bad := refusedTokens(run(false)); bad == 0 {
		t.Fatal("unpaced, every call fits the provider's bucket: the test shows nothing")
	} else {
		t.Logf("unpaced: %d of %d calls refused", bad, shards*each)
	}
	if bad := refusedTokens(run(true)); bad > 0 {
		t.Errorf("paced: the provider's token bucket refuses %d of %d calls", bad, shards*each)
	}
}

// TestPacerPlacesANewcomerNext: a caller that keeps a key busy is placed no
// further ahead than the busy horizon, so the first call of a caller the key
// has not seen for a while goes next instead of behind a queue as long as
// the horizon; with one horizon for every caller, it waits behind them all.
func TestPacerPlacesANewcomerNext(t *testing.T) {
	b := Bucket{Key: "k", Limits: ratelimit.Limits{RequestsPerMinute: 120}, Burst: time.Second}
	const busy, newcomer = "system:serviceaccount:team-a:suite-runner", "system:serviceaccount:team-b:suite-runner"
	// firstWait fills the key with busy's calls, as its pods would (each
	// asking again when told), then returns how far ahead newcomer's first
	// call is placed.
	firstWait := func(s *Server, clock *clockwork.FakeClock) time.Duration {
		s.init()
		clock.Advance(s.Horizon + ratelimit.Period)
		for range 40 {
			if r := s.Reserve(b, busy, ratelimit.Cost{Requests: 1}); r.ID == "" {
				clock.Advance(50 * time.Millisecond)
			}
		}
		r := s.Reserve(b, newcomer, ratelimit.Cost{Requests: 1})
		if r.ID == "" {
			t.Fatalf("the newcomer's first call: %+v; want a place", r)
		}
		return time.Duration(r.WaitNanos)
	}

	clock := clockwork.NewFakeClockAt(epoch)
	s := &Server{Resolver: &fixed{b: b, sa: "suite-runner"}, Clock: clock, Log: testr.New(t)}
	wait := firstWait(s, clock)
	// At most the busy horizon's queue, then one place of 120 rpm.
	if most := DefaultBusyHorizon + 500*time.Millisecond + 10*time.Millisecond; wait > most {
		t.Errorf("the newcomer's first call placed %v ahead, want at most %v", wait, most)
	}
	// Its next call, at once, is a busy caller's: told to ask again.
	if r := s.Reserve(b, newcomer, ratelimit.Cost{Requests: 1}); r.ID != "" {
		t.Errorf("the newcomer's second call at once: %+v; want ask again (it is busy now)", r)
	}
	// A horizon without a place makes it new again.
	clock.Advance(DefaultHorizon)
	if r := s.Reserve(b, newcomer, ratelimit.Cost{Requests: 1}); r.ID == "" {
		t.Errorf("after %v without a place: %+v; want a place", DefaultHorizon, r)
	}

	// One horizon for every caller: the newcomer waits behind the queue.
	clock = clockwork.NewFakeClockAt(epoch)
	same := &Server{Resolver: &fixed{b: b, sa: "suite-runner"}, Clock: clock, Log: testr.New(t), BusyHorizon: DefaultHorizon}
	if w := firstWait(same, clock); w < DefaultHorizon-500*time.Millisecond {
		t.Errorf("with one horizon, the newcomer waited %v: the test shows nothing", w)
	} else {
		t.Logf("the newcomer's first call waits %v, %v with one horizon for every caller", wait, w)
	}
}
