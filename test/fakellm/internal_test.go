package fakellm

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCountTokensMatchesRegexp(t *testing.T) {
	re := regexp.MustCompile(tokenPattern)
	check := func(s string) {
		t.Helper()
		if got, want := CountTokens(s), len(re.FindAllStringIndex(s, -1)); got != want {
			t.Errorf("CountTokens(%q) = %d, regexp finds %d", s, got, want)
		}
	}
	for _, s := range []string{"", "   ", "hello", "Hello, world!", "a1b2 c3", "x=1+2", "日本語 text", "\v\t\n\f\r ", "é", "\xff\xfe ok", "ends with é"} {
		check(s)
	}
	// Random strings over an alphabet that has every kind of character.
	alphabet := []string{"a", "Z", "7", " ", "\t", "\n", "\v", "\r", "\f", ".", "_", "-", "é", "日", "\u00a0", "\u2028", "\xff", "\xc3", "🙂"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range r.IntN(30) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		check(b.String())
	}
}

// Limiter tests run on a nanosecond clock of their own: t is in ns, W is 1000.
func TestLimiterWindow(t *testing.T) {
	type step struct {
		at, tokens int64
		want       decision
	}
	ok := decision{ok: true}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{{
		name: "requests",
		cfg:  Config{LimitMode: LimitWindow, RequestsPerMinute: 3},
		steps: []step{
			{0, 1, ok}, {100, 1, ok}, {200, 1, ok},
			{500, 1, decision{wait: 500, limit: limitRequests}}, // the request at 0 leaves at 1000
			{999, 1, decision{wait: 1, limit: limitRequests}},
			{1000, 1, ok},
			{1000, 1, decision{wait: 100, limit: limitRequests}}, // now the one at 100
			{1100, 1, ok},
		},
	}, {
		name: "tokens",
		cfg:  Config{LimitMode: LimitWindow, InputTokensPerMinute: 100},
		steps: []step{
			{0, 60, ok},
			{10, 50, decision{wait: 990, limit: limitTokens}}, // needs the 60 at 0 gone
			{10, 40, ok}, // the refused request used nothing
			{20, 1, decision{wait: 980, limit: limitTokens}},
			{20, 101, decision{limit: limitTokens, never: true}},
			{1000, 50, ok}, // 60 left, 40 + 50 fits
			{1001, 20, decision{wait: 9, limit: limitTokens}}, // 40 + 50 + 20: the 40 at 10 must go
		},
	}, {
		name: "longest wait wins",
		cfg:  Config{LimitMode: LimitWindow, RequestsPerMinute: 2, InputTokensPerMinute: 100},
		steps: []step{
			{0, 10, ok}, {300, 80, ok},
			{400, 50, decision{wait: 900, limit: limitTokens}}, // requests free at 1000, tokens at 1300
			{1000, 5, ok},
			{1000, 20, decision{wait: 300, limit: limitRequests}}, // a tie names the request limit
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLimiter(tt.cfg, 1000, 0)
			for i, s := range tt.steps {
				if got := verdict(l.admit(s.at, s.tokens, 0)); got != s.want {
					t.Errorf("step %d (t=%d, %d tokens): got %+v, want %+v", i, s.at, s.tokens, got, s.want)
				}
			}
		})
	}
}

// verdict is a decision without the state the headers report.
func verdict(d decision) decision {
	d.state = limitState{}
	return d
}

func TestLimiterBucket(t *testing.T) {
	// 10 requests and 1000 tokens per 1000ns: one request per 100ns, one token
	// per ns; buckets of 2 requests and the whole token limit.
	l := newLimiter(Config{LimitMode: LimitBucket, RequestsPerMinute: 10, InputTokensPerMinute: 1000, Burst: 2, BurstWindow: 1000}, 1000, 0)
	steps := []struct {
		at, tokens int64
		want       decision
	}{
		{0, 100, decision{ok: true}},
		{0, 100, decision{ok: true}},
		{0, 100, decision{wait: 100, limit: limitRequests}},
		{100, 100, decision{ok: true}},
		{150, 1000, decision{wait: 150, limit: limitTokens}}, // 850 tokens by now; requests need only 50ns
		{300, 1000, decision{ok: true}},
		{300, 1001, decision{limit: limitTokens, never: true}},
	}
	for i, s := range steps {
		if got := verdict(l.admit(s.at, s.tokens, 0)); got != s.want {
			t.Errorf("step %d (t=%d, %d tokens): got %+v, want %+v", i, s.at, s.tokens, got, s.want)
		}
	}
}

// By default, as providers document: each bucket holds a sixtieth of its
// limit (a second of a per-minute one), at least one request; a request
// costing more than its bucket holds goes when it is full and leaves it in
// debt; output tokens are charged max_tokens up front and given back as the
// answer did not use them.
func TestLimiterBucketByDefault(t *testing.T) {
	ok := decision{ok: true}
	type step struct {
		at, in, out int64
		want        decision
	}
	check := func(t *testing.T, l *limiter, steps []step) {
		t.Helper()
		for i, s := range steps {
			if got := verdict(l.admit(s.at, s.in, s.out)); got != s.want {
				t.Errorf("step %d (t=%d, %d in, %d out): got %+v, want %+v", i, s.at, s.in, s.out, got, s.want)
			}
		}
	}
	const window = 60000 // a minute of 60000ns: a "second" is 1000ns
	t.Run("requests", func(t *testing.T) {
		// 120 a minute: a bucket of 2, one more every 500ns.
		l := newLimiter(Config{RequestsPerMinute: 120}, window, 0)
		check(t, l, []step{
			{0, 1, 1, ok}, {0, 1, 1, ok},
			{0, 1, 1, decision{wait: 500, limit: limitRequests}},
			{500, 1, 1, ok},
		})
		// The headers see a bucket of the whole limit: 3 taken, 1 back.
		if got, want := l.state(500).dims[0], (dimState{limit: 120, remaining: 118, reset: 1000}); got != want {
			t.Errorf("state %+v, want %+v", got, want)
		}
	})
	t.Run("input tokens", func(t *testing.T) {
		// 600 a minute: a bucket of 10, one more every 100ns; 25 is more than
		// it holds: accepted when it is full, and it leaves it 15 in debt.
		l := newLimiter(Config{InputTokensPerMinute: 600}, window, 0)
		check(t, l, []step{
			{0, 3, 1, ok},
			{0, 25, 1, decision{wait: 300, limit: limitTokens}},
			{300, 25, 1, ok},
			{400, 1, 1, decision{wait: 1500, limit: limitTokens}},
			{1900, 1, 1, ok},
			{1900, 601, 1, decision{limit: limitTokens, never: true}},
		})
	})
	t.Run("output tokens", func(t *testing.T) {
		// 1200 a minute: a bucket of 20, max_tokens charged up front.
		l := newLimiter(Config{OutputTokensPerMinute: 1200}, window, 0)
		check(t, l, []step{
			{0, 1, 5, ok}, {0, 1, 5, ok}, {0, 1, 5, ok}, {0, 1, 5, ok},
			{0, 1, 5, decision{wait: 250, limit: limitOutputTokens}},
			{0, 1, 1201, decision{limit: limitOutputTokens, never: true}},
		})
		// Three answers of no tokens give 15 back.
		for range 3 {
			l.settle(0, 5, 0)
		}
		check(t, l, []step{{0, 1, 20, decision{wait: 250, limit: limitOutputTokens}}})
		if got, want := l.state(0).dims[2], (dimState{limit: 1200, remaining: 1195, reset: 250}); got != want {
			t.Errorf("state %+v, want %+v", got, want)
		}
	})
}

// A client that always waits exactly the advertised time is always accepted, in
// both modes, with rates that do not divide the window evenly.
func TestLimiterAdvertisedWaitSuffices(t *testing.T) {
	for _, mode := range []string{LimitWindow, LimitBucket} {
		t.Run(mode, func(t *testing.T) {
			window := int64(time.Minute)
			l := newLimiter(Config{LimitMode: mode, RequestsPerMinute: 7, InputTokensPerMinute: 1013}, window, 0)
			r := rand.New(rand.NewPCG(3, 4))
			now, accepted := int64(0), 0
			for range 3000 {
				tokens := int64(1 + r.IntN(300))
				d := l.admit(now, tokens, 0)
				if !d.ok {
					if d.never || d.wait <= 0 || d.wait > window {
						t.Fatalf("t=%d: bad decision %+v", now, d)
					}
					now += d.wait
					if d2 := l.admit(now, tokens, 0); !d2.ok {
						t.Fatalf("t=%d: refused again after the advertised wait: %+v", now, d2)
					}
				}
				accepted++
				now += int64(r.IntN(int(time.Second)))
			}
			if accepted != 3000 {
				t.Errorf("accepted %d", accepted)
			}
		})
	}
}

func TestTracker(t *testing.T) {
	tr := tracker{window: 100}
	var now int64
	clock := func() int64 { return now }
	for _, at := range []int64{0, 10, 50, 100, 105, 109, 300} {
		now = at
		tr.arrive(clock)
		tr.addTokens(clock, at)
	}
	// The busiest window is (9, 109]: 10, 50, 100, 105 and 109.
	reqs, toks := tr.maxima()
	if reqs != 5 || toks != 10+50+100+105+109 {
		t.Errorf("maxima = %d requests, %d tokens; want 5, 374", reqs, toks)
	}
	tr.reset()
	if reqs, toks := tr.maxima(); reqs != 0 || toks != 0 {
		t.Errorf("after reset: %d, %d", reqs, toks)
	}
}

func TestDequeCompacts(t *testing.T) {
	var d deque[int64]
	var want []int64
	for i := range int64(10000) {
		d.push(i)
		want = append(want, i)
		if i%3 != 0 {
			d.popFront()
			want = want[1:]
		}
	}
	var got []int64
	for i := range d.len() {
		got = append(got, d.at(i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("contents (-want +got):\n%s", diff)
	}
	if cap(d.buf) > 4*len(want) {
		t.Errorf("buffer of %d for %d live entries: popped slots are not reclaimed", cap(d.buf), len(want))
	}
}

// The server's window tracking and limiter share one clock; with a fake one, the
// 429's retry-after-ms is exactly the time until the oldest request leaves.
func TestServerRetryAfterExact(t *testing.T) {
	s := New(Config{LimitMode: LimitWindow, RequestsPerMinute: 2, Window: time.Second})
	var now int64
	s.clock = func() int64 { return now }
	do := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		s.ServeHTTP(w, r)
		return w
	}
	now = int64(100 * time.Millisecond)
	do()
	now = int64(300 * time.Millisecond)
	do()
	now = int64(876543210) // 876.54321ms: the first leaves at 1100ms
	w := do()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || w.Header().Get("Retry-After-Ms") != "224" {
		t.Errorf("status %d, retry-after %q, retry-after-ms %q; want 429, 1, 224 (223.45679ms rounded up)",
			w.Code, w.Header().Get("Retry-After"), w.Header().Get("Retry-After-Ms"))
	}
	now = int64(1100 * time.Millisecond)
	if w := do(); w.Code != http.StatusOK {
		t.Errorf("at the advertised time: status %d", w.Code)
	}
}

// BenchmarkServeHTTP measures the handler alone (no network), unlimited and with
// a limit, in parallel, to keep the hot path free of contention and waste.
func BenchmarkServeHTTP(b *testing.B) {
	body := `{"model":"m","messages":[{"role":"system","content":"Answer briefly."},{"role":"user","content":"What is 12 * 34?"}]}`
	for _, bc := range []struct {
		name string
		cfg  Config
	}{{"unlimited", Config{}}, {"limited", Config{RequestsPerMinute: 1 << 30}}} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(bc.cfg)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					w := httptest.NewRecorder()
					s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
					if w.Code != http.StatusOK {
						b.Fatalf("status %d", w.Code)
					}
				}
			})
		})
	}
}
