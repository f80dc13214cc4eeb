package fakellm_test

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/test/fakellm"
)

func TestInjectedFailures(t *testing.T) {
	tests := []struct {
		name, path string
		body       any
		want       map[int]string // allowed status -> error type
	}{
		{"openai", openAIPath, openAIText("hi"), map[int]string{500: "server_error", 502: "server_error", 503: "server_error"}},
		{"anthropic", anthropicPath, anthropicText("hi"), map[int]string{500: "api_error", 502: "api_error", 503: "api_error", 529: "overloaded_error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const n = 40
			run := func() []int {
				s, url := start(t, fakellm.Config{FailureRate: 1, Seed: 42})
				var statuses []int
				for range n {
					r := post(t, url+tt.path, tt.body)
					if typ, ok := tt.want[r.status]; !ok || errorType(r) != typ {
						t.Fatalf("status %d, error type %q; want one of %v", r.status, errorType(r), tt.want)
					}
					statuses = append(statuses, r.status)
				}
				if st := s.Stats(); st.Failed != n || st.Succeeded != 0 || st.Requests != n {
					t.Errorf("stats %+v", st)
				}
				return statuses
			}
			first := run()
			for code := range tt.want {
				if !slices.Contains(first, code) {
					t.Errorf("status %d never chosen in %d failures: %v", code, n, first)
				}
			}
			if diff := cmp.Diff(first, run()); diff != "" {
				t.Errorf("same seed, different failures (-first +second):\n%s", diff)
			}
		})
	}
}

func TestDrops(t *testing.T) {
	s, url := start(t, fakellm.Config{DropRate: 1})
	for _, req := range []struct {
		path string
		body any
	}{{openAIPath, openAIText("hi")}, {anthropicPath, anthropicText("hi")}} {
		resp, err := send(http.DefaultClient, url+req.path, req.body)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: got status %d, want a connection error", req.path, resp.StatusCode)
		}
	}
	if st := s.Stats(); st.Dropped != 2 || st.Requests != 2 || st.MaxRequestsInWindow != 2 {
		t.Errorf("stats %+v", st)
	}

	// A partial drop rate picks the same requests on every run with the seed.
	run := func() []int {
		_, url := start(t, fakellm.Config{DropRate: 0.5, Seed: 7})
		var dropped []int
		for i := range 20 {
			resp, err := send(http.DefaultClient, url+openAIPath, openAIText("hi"))
			if err != nil {
				dropped = append(dropped, i)
				continue
			}
			resp.Body.Close()
		}
		return dropped
	}
	first := run()
	if len(first) == 0 || len(first) == 20 {
		t.Errorf("drop rate 0.5 dropped %d of 20", len(first))
	}
	if diff := cmp.Diff(first, run()); diff != "" {
		t.Errorf("same seed, different drops (-first +second):\n%s", diff)
	}
}

// Under concurrency with every fault on, the counters add up and the limit holds.
func TestConcurrentCounters(t *testing.T) {
	t.Parallel()
	const workers, each, rpm = 8, 40, 100
	s, url := start(t, fakellm.Config{LimitMode: fakellm.LimitWindow, RequestsPerMinute: rpm, FailureRate: 0.2, DropRate: 0.1, Seed: 1})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	var transportErrors atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				body := any(openAIText("2+2"))
				path := openAIPath
				if w%2 == 1 {
					body, path = anthropicText("2+2"), anthropicPath
				}
				resp, err := send(client, url+path, body)
				if err != nil {
					transportErrors.Add(1)
					continue
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	const total = workers * each
	if st.Requests != total || st.Dropped != transportErrors.Load() ||
		st.Succeeded+st.Failed != rpm || st.Dropped+st.Succeeded+st.Failed+st.RateLimited != total ||
		st.MaxRequestsInWindow != total || st.Failed == 0 || st.Dropped == 0 {
		t.Errorf("stats %+v (transport errors %d)", st, transportErrors.Load())
	}
}
