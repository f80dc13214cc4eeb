package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/shard"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// The shared-endpoint goals (`make bench`), with the runners' and the
// manager's production timings, against the fake server's own sliding-minute
// limit.

// modelArrivals records when each model's requests reach the server (by the model
// identifier in the request), in front of the fake server.
type modelArrivals struct {
	next http.Handler
	mu   sync.Mutex
	at   map[string][]time.Time
}

func (a *modelArrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &req)
	a.mu.Lock()
	a.at[req.Model] = append(a.at[req.Model], time.Now())
	a.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	a.next.ServeHTTP(w, r)
}

func (a *modelArrivals) of(model string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at[model])
}

// countingServer is the fake server behind modelArrivals.
func countingServer(b *testing.B, cfg fakellm.Config) (*fakellm.Server, *modelArrivals, string) {
	srv := fakellm.New(cfg)
	a := &modelArrivals{next: srv, at: map[string][]time.Time{}}
	hs := httptest.NewServer(a)
	b.Cleanup(hs.Close)
	return srv, a, hs.URL + "/v1"
}

// production runs the manager (for every namespace given) and the runners
// with their default timings; it returns the first namespace's kubelet.
func production(b *testing.B, namespaces ...string) *kubelet {
	startManagerWith(b, strings.Join(namespaces, ","), func(o *controllers.Options) {
		*o = controllers.Options{ShardRetries: 3}
	})
	var first *kubelet
	for _, ns := range namespaces {
		k := startKubeletWith(b, ns, func(o *shard.Options) {
			o.FlushEvery, o.BudgetEvery, o.FenceAfter, o.FirstGrantEvery = 0, 0, 0, 0
		})
		if first == nil {
			first = k
		}
	}
	return first
}

// endpointEvaluation is an Evaluation whose one model calls through endpoint
// with weight, as model identifier "fake-NAME".
func endpointEvaluation(name, ns, endpoint string, weight int32, samples, shards int) *v1alpha1.Evaluation {
	ev := testutil.MakeEvaluation(name, ns).InlineDataset("d", samples).EndpointModel("m", endpoint, weight).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(int32((samples+shards-1)/shards)).Parallelism(int32(shards)).Concurrency(4).
		Retry(100, "100ms", "2s").Obj()
	ev.Spec.Models[0].Model = "fake-" + name
	return ev
}

// BenchmarkSharedEndpoint: three Evaluations in two namespaces, three shards
// each, share one account limited to the server's 600 rpm: each namespace has
// its own ModelEndpoint (its own key), both naming one ModelQuota of 600 rpm
// with equal namespace weights; one namespace runs one Evaluation, the other
// two of weight 1 each, so their parts are 2:1:1. Goals: at most 0.1% of
// requests answered 429; while all three run, the achieved rpm >= 0.9 of the
// limit and each Evaluation's part of it within ±10% of its weight's.
func BenchmarkSharedEndpoint(b *testing.B) {
	const rpm = 600
	nsA, nsB := newNamespace(b), newNamespace(b)
	srv, arr, url := countingServer(b, fakellm.Config{Latency: 200 * time.Millisecond, RequestsPerMinute: rpm})
	production(b, nsA, nsB)
	quota := &v1alpha1.ModelQuota{ObjectMeta: metav1.ObjectMeta{Name: "account-" + nsA},
		Spec: v1alpha1.ModelQuotaSpec{Limits: v1alpha1.EndpointLimits{RequestsPerMinute: rpm}}}
	create(b, quota)
	b.Cleanup(func() { _ = k8sClient.Delete(context.Background(), quota) })
	for _, ns := range []string{nsA, nsB} {
		ep := testutil.MakeEndpoint("shared", ns, url).Obj()
		ep.Spec.QuotaRef = &v1alpha1.QuotaReference{Name: quota.Name}
		create(b, ep)
	}
	evals := []struct {
		name, ns string
		weight   float64 // its part of the whole
		samples  int
	}{{"heavy", nsA, 2, 840}, {"light-a", nsB, 1, 420}, {"light-b", nsB, 1, 420}}
	for _, e := range evals {
		create(b, endpointEvaluation(e.name, e.ns, "shared", 1, e.samples, 3))
	}
	for _, e := range evals {
		waitPhase(b, e.ns, e.name, v1alpha1.PhaseSucceeded, 10*time.Minute)
	}
	// The interval when all three ran: from the last one's first request to
	// the first one's last.
	var from, to time.Time
	for _, e := range evals {
		at := arr.of("fake-" + e.name)
		if at[0].After(from) {
			from = at[0]
		}
		if last := at[len(at)-1]; to.IsZero() || last.Before(to) {
			to = last
		}
	}
	counts := map[string]int{}
	total := 0
	for _, e := range evals {
		for _, t := range arr.of("fake-" + e.name) {
			if !t.Before(from) && !t.After(to) {
				counts[e.name]++
				total++
			}
		}
	}
	span := to.Sub(from)
	achieved := float64(total) / span.Minutes() / rpm
	st := srv.Stats()
	refused := float64(st.RateLimited) / float64(st.Requests)
	b.ReportMetric(achieved, "rpm/limit")
	b.ReportMetric(refused*100, "%429")
	b.Logf("%d requests, %d answered 429 (%.3f%%); all three ran for %v: %.0f rpm, %.3f of the limit %d",
		st.Requests, st.RateLimited, refused*100, span.Round(time.Second), float64(total)/span.Minutes(), achieved, rpm)
	if refused > 0.001 || achieved < 0.9 {
		b.Errorf("goal: at most 0.1%% 429s and achieved >= 0.9 of the limit; got %.3f%% and %.3f", refused*100, achieved)
	}
	for _, e := range evals {
		want := e.weight / 4
		got := float64(counts[e.name]) / float64(total)
		b.ReportMetric(got/want, e.name+"-share/weight")
		b.Logf("%s (weight %g): %.3f of the calls, %.3f of its weight's part", e.name, e.weight, got, got/want)
		if got/want < 0.9 || got/want > 1.1 {
			b.Errorf("goal: %s's part within ±10%% of its weight's; got %.3f", e.name, got/want)
		}
	}
}

// BenchmarkFirstPacedCall: while another Evaluation takes the whole of a
// shared endpoint's limit, new Evaluations start one after another: from a
// new one's runner pod starting to its first call reaching the server. Goal:
// median < 2s.
func BenchmarkFirstPacedCall(b *testing.B) {
	const rpm = 600
	ns := newNamespace(b)
	_, arr, url := countingServer(b, fakellm.Config{Latency: 50 * time.Millisecond, RequestsPerMinute: rpm})
	k := production(b, ns)
	var mu sync.Mutex
	started := map[string]time.Time{}
	k.mu.Lock()
	k.onStart = func(model string, index, attempt int) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := started[model]; !ok {
			started[model] = time.Now()
		}
	}
	k.mu.Unlock()
	create(b, testutil.MakeEndpoint("shared", ns, url).RequestsPerMinute(rpm).Obj())
	create(b, endpointEvaluation("background", ns, "shared", 1, 5000, 2))
	eventually(b, time.Minute, "the background Evaluation calling", func() (bool, string) {
		return len(arr.of("fake-background")) > 20, ""
	})
	var lat []time.Duration
	for i := range max(b.N, 7) {
		name := fmt.Sprintf("new-%d", i)
		ev := endpointEvaluation(name, ns, "shared", 1, 10, 1)
		ev.Spec.Models[0].Name = name // the kubelet reports starts by model name
		create(b, ev)
		waitPhase(b, ns, name, v1alpha1.PhaseSucceeded, 2*time.Minute)
		mu.Lock()
		start := started[name]
		mu.Unlock()
		lat = append(lat, arr.of("fake-" + name)[0].Sub(start))
	}
	slices.Sort(lat)
	p50 := lat[len(lat)/2]
	b.ReportMetric(float64(p50.Milliseconds()), "first-call-p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "first-call-max-ms")
	b.Logf("pod start to first paced call over %d Evaluations: p50 %v, max %v (goal: median < 2s); all %v", len(lat), p50, lat[len(lat)-1], lat)
	if p50 >= 2*time.Second {
		b.Errorf("goal: median < 2s; got %v", p50)
	}
}

// BenchmarkAgentSharedEndpoint: an agent Evaluation whose agent makes three
// model calls per sample through its proxy, and another Evaluation, share one
// endpoint limited to the server's 600 rpm, with equal weights. Goals, as for
// models: at most 0.1% of requests answered 429; while both run, the achieved
// rpm >= 0.9 of the limit and each one's part within ±10% of half; and every
// agent call the server answered is counted in the agents' records.
func BenchmarkAgentSharedEndpoint(b *testing.B) {
	const rpm = 600
	ns := newNamespace(b)
	srv, arr, url := countingServer(b, fakellm.Config{Latency: 200 * time.Millisecond, RequestsPerMinute: rpm})
	agent := buildFakeAgent(b)
	production(b, ns)
	create(b, testutil.MakeEndpoint("shared", ns, url).RequestsPerMinute(rpm).Obj())
	agents := testutil.MakeEvaluation("agents", ns).InlineDataset("d", 200).
		AgentModel("bot", []string{agent, "-calls", "3", "-model", "fake-agents", "{{ .Prompt }}"}, "shared").
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(67).Parallelism(3).Concurrency(4).Retry(100, "100ms", "2s").Obj()
	create(b, agents)
	create(b, endpointEvaluation("plain", ns, "shared", 1, 600, 3))
	for _, name := range []string{"agents", "plain"} {
		waitPhase(b, ns, name, v1alpha1.PhaseSucceeded, 10*time.Minute)
	}
	from, to := arr.of("fake-agents")[0], arr.of("fake-plain")[0]
	if to.After(from) {
		from = to
	}
	to = arr.of("fake-agents")[len(arr.of("fake-agents"))-1]
	if last := arr.of("fake-plain")[len(arr.of("fake-plain"))-1]; last.Before(to) {
		to = last
	}
	counts := map[string]int{}
	total := 0
	for _, m := range []string{"fake-agents", "fake-plain"} {
		for _, t := range arr.of(m) {
			if !t.Before(from) && !t.After(to) {
				counts[m]++
				total++
			}
		}
	}
	span := to.Sub(from)
	achieved := float64(total) / span.Minutes() / rpm
	st := srv.Stats()
	refused := float64(st.RateLimited) / float64(st.Requests)
	var recorded int64
	for _, rec := range readResults(b, ns, "agents") {
		recorded += rec.AgentCalls
	}
	b.ReportMetric(achieved, "rpm/limit")
	b.ReportMetric(refused*100, "%429")
	b.Logf("%d requests, %d answered 429 (%.3f%%); both ran for %v: %.0f rpm, %.3f of the limit %d; agents' records count %d calls, the server answered %d",
		st.Requests, st.RateLimited, refused*100, span.Round(time.Second), float64(total)/span.Minutes(), achieved, rpm, recorded, len(arr.of("fake-agents")))
	if refused > 0.001 || achieved < 0.9 {
		b.Errorf("goal: at most 0.1%% 429s and achieved >= 0.9 of the limit; got %.3f%% and %.3f", refused*100, achieved)
	}
	if recorded != 600 || len(arr.of("fake-agents")) < 600 {
		b.Errorf("goal: every agent call counted; the records count %d, want 600 (the server got %d)", recorded, len(arr.of("fake-agents")))
	}
	for _, m := range []string{"fake-agents", "fake-plain"} {
		got := float64(counts[m]) / float64(total) / 0.5
		b.ReportMetric(got, m+"-share/weight")
		b.Logf("%s: %.3f of its weight's part", m, got)
		if got < 0.9 || got > 1.1 {
			b.Errorf("goal: %s's part within ±10%% of its weight's; got %.3f", m, got)
		}
	}
}
