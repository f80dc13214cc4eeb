package fakellm_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// retryAfter returns a 429's retry headers, failing the test if they are malformed.
func retryAfter(t *testing.T, r result) (secs, ms int) {
	t.Helper()
	var err error
	if secs, err = strconv.Atoi(r.header.Get("Retry-After")); err != nil {
		t.Fatalf("retry-after %q: %v", r.header.Get("Retry-After"), err)
	}
	if ms, err = strconv.Atoi(r.header.Get("Retry-After-Ms")); err != nil {
		t.Fatalf("retry-after-ms %q: %v", r.header.Get("Retry-After-Ms"), err)
	}
	return secs, ms
}

func TestWindowLimit(t *testing.T) {
	t.Parallel()
	for _, api := range []struct {
		name, path, errType string
		body                any
	}{
		{"openai", openAIPath, "requests", openAIText("hi")},
		{"anthropic", anthropicPath, "rate_limit_error", anthropicText("hi")},
	} {
		t.Run(api.name, func(t *testing.T) {
			t.Parallel()
			// 5 requests take a few milliseconds: far inside the window.
			const window = 500 * time.Millisecond
			s, url := start(t, fakellm.Config{LimitMode: fakellm.LimitWindow, RequestsPerMinute: 5, Window: window})
			for i := range 5 {
				if r := post(t, url+api.path, api.body); r.status != http.StatusOK {
					t.Fatalf("request %d: status %d", i+1, r.status)
				}
			}
			r := post(t, url+api.path, api.body)
			if r.status != http.StatusTooManyRequests || errorType(r) != api.errType {
				t.Fatalf("6th request: status %d, error type %q; want 429 %q", r.status, errorType(r), api.errType)
			}
			secs, ms := retryAfter(t, r)
			if secs != 1 || ms <= 0 || ms > int(window/time.Millisecond) {
				t.Fatalf("retry-after %d s, %d ms; want 1 s and (0, 500] ms", secs, ms)
			}
			// The wait is exact: the first request leaves the window then.
			time.Sleep(time.Duration(ms) * time.Millisecond)
			if r := post(t, url+api.path, api.body); r.status != http.StatusOK {
				t.Fatalf("after the advertised wait: status %d (%v)", r.status, r.body)
			}
			st := s.Stats()
			if st.Requests != 7 || st.Succeeded != 6 || st.RateLimited != 1 || st.MaxRequestsInWindow != 6 {
				t.Errorf("stats %+v: want 7 requests, 6 succeeded, 1 rate limited, 6 at most in a window", st)
			}
		})
	}
}

func TestBucketLimit(t *testing.T) {
	t.Parallel()
	// One request per 500ms, bursts of 2.
	s, url := start(t, fakellm.Config{LimitMode: fakellm.LimitBucket, RequestsPerMinute: 2, Window: time.Second, Burst: 2})
	for i := range 2 {
		if r := post(t, url+openAIPath, openAIText("hi")); r.status != http.StatusOK {
			t.Fatalf("burst request %d: status %d", i+1, r.status)
		}
	}
	r := post(t, url+openAIPath, openAIText("hi"))
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("request past the burst: status %d", r.status)
	}
	secs, ms := retryAfter(t, r)
	if secs != 1 || ms <= 0 || ms > 500 {
		t.Fatalf("retry-after %d s, %d ms; want 1 s and (0, 500] ms", secs, ms)
	}
	time.Sleep(time.Duration(ms) * time.Millisecond)
	if r := post(t, url+openAIPath, openAIText("hi")); r.status != http.StatusOK {
		t.Fatalf("after the advertised wait: status %d", r.status)
	}
	if r := post(t, url+openAIPath, openAIText("hi")); r.status != http.StatusTooManyRequests {
		t.Fatalf("right after the refill was spent: status %d", r.status)
	}
	if st := s.Stats(); st.Succeeded != 3 || st.RateLimited != 2 {
		t.Errorf("stats %+v", st)
	}
}

// The limiter's decisions are served in order: the refused ones with the
// limit that refused them and how much later they would have been accepted,
// which tells a call sent a moment early from two sent together.
func TestLimitDecisions(t *testing.T) {
	t.Parallel()
	// One request a second, a bucket of one.
	s, url := start(t, fakellm.Config{RequestsPerMinute: 60})
	for range 2 {
		post(t, url+openAIPath, openAIText("hi"))
	}
	resp, err := http.Get(url + "/stats/limits")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []fakellm.LimitDecision
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].OK || got[1].OK || got[1].Limit != "requests" || got[1].At < got[0].At {
		t.Fatalf("decisions %+v: want one accepted, then one refused by the requests limit", got)
	}
	// Sent right after the first, the second lacked nearly the whole second.
	if w := time.Duration(got[1].WaitNanos); w < 900*time.Millisecond || w > time.Second {
		t.Errorf("the refused request would have been accepted %v later, want (0.9s, 1s]", w)
	}
	s.Reset()
	if d := s.Decisions(); len(d) != 0 {
		t.Errorf("after Reset: %+v", d)
	}
}

// textOf returns an OpenAI request with exactly n input tokens (n >= 6) that the
// default rules answer with "ok".
func textOf(n int) map[string]any {
	return openAIText("REPLY: ok\n" + strings.Repeat("w ", n-6)) // 3 + (n-6) + 3 per message
}

func TestInputTokenLimit(t *testing.T) {
	t.Parallel()
	s, url := start(t, fakellm.Config{LimitMode: fakellm.LimitWindow, InputTokensPerMinute: 30})
	r := post(t, url+openAIPath, textOf(20))
	if r.status != http.StatusOK || r.body["usage"].(map[string]any)["prompt_tokens"] != 20.0 {
		t.Fatalf("first request: status %d, body %v", r.status, r.body)
	}
	r = post(t, url+openAIPath, textOf(20))
	if r.status != http.StatusTooManyRequests || errorType(r) != "tokens" {
		t.Fatalf("20 more tokens: status %d, error type %q; want 429 tokens", r.status, errorType(r))
	}
	if secs, ms := retryAfter(t, r); secs != 60 || ms <= 50_000 || ms > 60_000 {
		t.Errorf("retry-after %d s, %d ms; want 60 s and about a minute", secs, ms)
	}
	// The rejected request consumed nothing: 20 + 6 fits in 30.
	if r := post(t, url+openAIPath, textOf(6)); r.status != http.StatusOK {
		t.Errorf("6 more tokens: status %d", r.status)
	}
	// A request over the whole limit can never pass, so no retry is advised.
	r = post(t, url+openAIPath, textOf(31))
	if r.status != http.StatusTooManyRequests || errorType(r) != "tokens" || r.header.Get("Retry-After") != "" || r.header.Get("Retry-After-Ms") != "" {
		t.Errorf("oversized request: status %d, type %q, headers %v", r.status, errorType(r), r.header)
	}
	st := s.Stats()
	want := fakellm.Stats{Requests: 4, Succeeded: 2, RateLimited: 2, InputTokens: 26, OutputTokens: 2,
		MaxRequestsInWindow: 4, MaxInputTokensInWindow: 20 + 20 + 6 + 31, MaxInFlight: 1}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

func TestOmitRetryAfter(t *testing.T) {
	tests := []struct {
		name         string
		cfg          fakellm.Config
		secs, millis bool
	}{
		{"both", fakellm.Config{}, true, true},
		{"no millis", fakellm.Config{OmitRetryAfterMillis: true}, true, false},
		{"none", fakellm.Config{OmitRetryAfter: true}, false, false},
		{"none wins", fakellm.Config{OmitRetryAfter: true, OmitRetryAfterMillis: true}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.RequestsPerMinute = 1
			_, url := start(t, tt.cfg)
			post(t, url+anthropicPath, anthropicText("hi"))
			r := post(t, url+anthropicPath, anthropicText("hi"))
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("status %d", r.status)
			}
			if secs, millis := r.header.Get("Retry-After") != "", r.header.Get("Retry-After-Ms") != ""; secs != tt.secs || millis != tt.millis {
				t.Errorf("retry-after present %v, retry-after-ms present %v; want %v, %v", secs, millis, tt.secs, tt.millis)
			}
		})
	}
}

// MaxRequestsInWindow counts arrivals, including the ones turned away, and Reset
// clears both the counters and the limiter.
func TestMaxInWindowAndReset(t *testing.T) {
	s, url := start(t, fakellm.Config{LimitMode: fakellm.LimitWindow, RequestsPerMinute: 2})
	for range 5 {
		post(t, url+openAIPath, textOf(10))
	}
	want := fakellm.Stats{Requests: 5, Succeeded: 2, RateLimited: 3, InputTokens: 20, OutputTokens: 2,
		MaxRequestsInWindow: 5, MaxInputTokensInWindow: 50, MaxInFlight: 1}
	if st := s.Stats(); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}

	s.Reset()
	if st := s.Stats(); st != (fakellm.Stats{}) {
		t.Errorf("after Reset: %+v", st)
	}
	if r := post(t, url+openAIPath, textOf(10)); r.status != http.StatusOK {
		t.Errorf("after Reset the limiter still refuses: %d", r.status)
	}
	if st := s.Stats(); st.MaxRequestsInWindow != 1 || st.Requests != 1 {
		t.Errorf("after Reset and one request: %+v", st)
	}

	// Tracking is on without limits too.
	s2, url2 := start(t, fakellm.Config{})
	for range 3 {
		post(t, url2+openAIPath, textOf(7))
	}
	if st := s2.Stats(); st.MaxRequestsInWindow != 3 || st.MaxInputTokensInWindow != 21 {
		t.Errorf("unlimited server: %+v", st)
	}
}

// Both APIs' answers carry the rate limits' state as each provider documents
// its headers: a bucket of the whole limit, what remains of it and when it is
// full again (OpenAI: a duration; Anthropic: a time on the server's clock).
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	const offset = -90 * time.Second // the server's clock is behind
	_, url := start(t, fakellm.Config{RequestsPerMinute: 120, InputTokensPerMinute: 60000, OutputTokensPerMinute: 60000, ClockOffset: offset})

	r := post(t, url+openAIPath, openAIText("hi"))
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	h := r.header
	if h.Get("X-Ratelimit-Limit-Requests") != "120" || h.Get("X-Ratelimit-Remaining-Requests") != "119" ||
		h.Get("X-Ratelimit-Limit-Tokens") != "60000" || h.Get("X-Ratelimit-Remaining-Tokens") == "" {
		t.Errorf("OpenAI headers %v", h)
	}
	if d, err := time.ParseDuration(h.Get("X-Ratelimit-Reset-Requests")); err != nil || d <= 0 || d > 500*time.Millisecond {
		t.Errorf("x-ratelimit-reset-requests %q: want a duration within the half second one request takes", h.Get("X-Ratelimit-Reset-Requests"))
	}

	before := time.Now()
	r = post(t, url+anthropicPath, anthropicText("hi"))
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %v", r.status, r.body)
	}
	h = r.header
	if h.Get("Anthropic-Ratelimit-Requests-Limit") != "120" || h.Get("Anthropic-Ratelimit-Requests-Remaining") != "118" ||
		h.Get("Anthropic-Ratelimit-Input-Tokens-Limit") != "60000" || h.Get("Anthropic-Ratelimit-Output-Tokens-Limit") != "60000" {
		t.Errorf("Anthropic headers %v", h)
	}
	reset, err := time.Parse(time.RFC3339, h.Get("Anthropic-Ratelimit-Requests-Reset"))
	if err != nil {
		t.Fatalf("anthropic-ratelimit-requests-reset: %v", err)
	}
	// Whole seconds on the server's clock, 90 s behind ours, a second ahead of it at most.
	if lo, hi := before.Add(offset).Add(-time.Second), time.Now().Add(offset).Add(2*time.Second); reset.Before(lo) || reset.After(hi) {
		t.Errorf("reset %v, want between %v and %v", reset, lo, hi)
	}
	// A refusal carries them too.
	r = post(t, url+anthropicPath, anthropicText("hi"))
	if r.status != http.StatusTooManyRequests || r.header.Get("Anthropic-Ratelimit-Requests-Remaining") == "" {
		t.Errorf("third request at once: status %d, headers %v; want 429 with the state", r.status, r.header)
	}
}
