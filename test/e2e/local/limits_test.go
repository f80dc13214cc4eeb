package local_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestDeclaredRateLimitIsHonoured checks that a model whose manifest declares the
// server's limit never meets a 429. A per-minute limit is only observable in a
// short test if the server enforces it over short periods, so the server is a
// token bucket refilled at N per minute (N/60 per second) that holds only three
// requests: a client that bursts, as ten concurrent samples would, is refused at
// once; one that paces its requests evenly, as the declared limit should make
// proctor do, never is.
func TestDeclaredRateLimitIsHonoured(t *testing.T) {
	t.Parallel()
	const n, rpm = 40, 600
	cfg := fakellm.Config{RequestsPerMinute: rpm, LimitMode: fakellm.LimitBucket, Burst: 3}

	// First show that this server does push back on a burst.
	probe := newFake(t, cfg)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			body := []byte(`{"model":"fake-model","messages":[{"role":"user","content":"1 + 1"}]}`)
			resp, err := http.Post(probe.OpenAIURL()+"/chat/completions", "application/json", bytes.NewReader(body))
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if st := probe.Stats(); st.RateLimited == 0 {
		t.Fatalf("the probe server accepted a burst of 8 (stats %+v): the test would prove nothing", st)
	}

	srv := newFake(t, cfg)
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	w.writeEval("limited", fmt.Sprintf(`  concurrency: 10
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

	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	st := srv.Stats()
	if st.RateLimited != 0 {
		t.Errorf("server answered %d requests with 429 although the manifest declares its limit (stats %+v)", st.RateLimited, st)
	}
	if st.Requests != n {
		t.Errorf("server received %d requests, want exactly %d", st.Requests, n)
	}
	// Pacing at about rpm/60.5 per second: n requests take at least (n-1) intervals.
	if least := time.Duration(float64(n-1) * 60 / rpm * 0.9 * float64(time.Second)); res.Elapsed < least {
		t.Errorf("the run took %v; %d requests paced at %d/min take at least ~%v", res.Elapsed, n, rpm, least)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", n)
	for _, r := range recs {
		if r.Error != "" || r.Attempts != 1 {
			t.Errorf("%s: want one clean attempt, got %+v", r.ID, r)
		}
	}
}

// TestUndeclaredRateLimitAdapts checks that a model declaring no limit backs off
// when the server pushes back (429 with a short retry-after) instead of failing
// samples.
func TestUndeclaredRateLimitAdapts(t *testing.T) {
	t.Parallel()
	const n = 16 // twice the server's limit per window
	srv := newFake(t, fakellm.Config{RequestsPerMinute: 8, Window: 2 * time.Second})
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	w.writeEval("adaptive", fmt.Sprintf(`  concurrency: 10
  retry: {maxAttempts: 2, initialBackoff: 50ms, maxBackoff: 500ms}
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: claude, provider: anthropic, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
`, srv.AnthropicURL()))

	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	expectIDs(t, recs, "q", n)
	attempts := 0
	for _, r := range recs {
		attempts += r.Attempts
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("%s: want a correct answer despite 429s, got %+v", r.ID, r)
		}
	}
	st := srv.Stats()
	if int64(attempts) != st.Requests {
		t.Errorf("attempts in records sum to %d, but the server received %d requests", attempts, st.Requests)
	}
	if st.RateLimited == 0 {
		t.Errorf("the server never answered 429 (stats %+v): the test exercised nothing", st)
	}
	if st.Succeeded != n {
		t.Errorf("server succeeded %d times, want %d", st.Succeeded, n)
	}
	if s := readSummary(t, w.out).Results[0]; s.Errored != 0 || s.Completed != n {
		t.Errorf("summary: %+v, want %d completed and none errored", s, n)
	}
	t.Logf("%d samples in %v; server stats %+v", n, res.Elapsed.Round(time.Millisecond), st)
}
