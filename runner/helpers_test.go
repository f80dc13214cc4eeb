package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/retry"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
)

// fakeProvider answers with fn and records what it saw.
type fakeProvider struct {
	fn       func(ctx context.Context, req *provider.Request, call int64) (*provider.Response, error)
	calls    atomic.Int64
	inflight atomic.Int64
	peak     atomic.Int64
}

func (p *fakeProvider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	n := p.calls.Add(1)
	cur := p.inflight.Add(1)
	defer p.inflight.Add(-1)
	for {
		old := p.peak.Load()
		if cur <= old || p.peak.CompareAndSwap(old, cur) {
			break
		}
	}
	return p.fn(ctx, req, n)
}

// echo answers with the prompt.
func echo(_ context.Context, req *provider.Request, _ int64) (*provider.Response, error) {
	return &provider.Response{Text: req.Prompt, Usage: provider.Usage{InputTokens: 10, OutputTokens: 2}}, nil
}

// timedEcho is a fakeProvider that answers with the prompt and records when
// each call came (times).
func timedEcho() (*fakeProvider, func() []time.Time) { return timed(echo) }

// timed is a fakeProvider that answers as fn does and records when each call
// came (times).
func timed(fn func(context.Context, *provider.Request, int64) (*provider.Response, error)) (*fakeProvider, func() []time.Time) {
	var mu sync.Mutex
	var times []time.Time
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return fn(ctx, req, n)
	}}
	return p, func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(times)
	}
}

// memSink keeps records in memory.
type memSink struct {
	mu      sync.Mutex
	done    map[string]bool
	recs    map[string]*results.Record
	puts    int
	failPut error
}

func newMemSink() *memSink {
	return &memSink{done: map[string]bool{}, recs: map[string]*results.Record{}}
}

func sinkKey(model, dataset string, i int) string { return fmt.Sprintf("%s/%s/%d", model, dataset, i) }

func (s *memSink) Done(model, dataset string, i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[sinkKey(model, dataset, i)]
}

func (s *memSink) Put(model, dataset string, i int, rec *results.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPut != nil {
		return s.failPut
	}
	k := sinkKey(model, dataset, i)
	if old := s.recs[k]; old != nil && len(old.JudgePending) == 0 {
		return fmt.Errorf("sample %s stored twice", k)
	}
	s.recs[k] = rec
	s.done[k] = true
	s.puts++
	return nil
}

func (s *memSink) get(model, dataset string, i int) *results.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recs[sinkKey(model, dataset, i)]
}

func (s *memSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// planBuilder builds test plans fluently: testPlan().Model(...).Dataset(...).Obj().
type planBuilder struct{ p *Plan }

func testPlan(t testing.TB) *planBuilder {
	t.Helper()
	prompt, err := NewPrompt("", "{{ .Input }}")
	if err != nil {
		t.Fatal(err)
	}
	return &planBuilder{p: &Plan{
		Prompt:  prompt,
		Retry:   retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: 10 * time.Millisecond},
		Timeout: 5 * time.Second,
	}}
}

func (b *planBuilder) Model(name string, p provider.Provider, concurrency int) *planBuilder {
	b.p.Models = append(b.p.Models, &Model{Name: name, Provider: p, Concurrency: concurrency, Fingerprint: "fp-" + name})
	return b
}

func (b *planBuilder) Limits(l ratelimit.Limits) *planBuilder {
	b.p.Models[len(b.p.Models)-1].Limits = l
	return b
}

// Endpoint makes the last model call through a shared endpoint with limits l.
func (b *planBuilder) Endpoint(name string, l ratelimit.Limits) *planBuilder {
	b.p.Models[len(b.p.Models)-1].Endpoint = name
	if b.p.Endpoints == nil {
		b.p.Endpoints = map[string]ratelimit.Limits{}
	}
	b.p.Endpoints[name] = l
	return b
}

func (b *planBuilder) JudgeOnly() *planBuilder {
	b.p.Models[len(b.p.Models)-1].JudgeOnly = true
	return b
}

// Dataset adds an inline dataset of n samples {id: sN, input: "qN", expected: "qN"}.
func (b *planBuilder) Dataset(name string, n int) *planBuilder {
	items := make([]json.RawMessage, n)
	for i := range n {
		items[i] = json.RawMessage(fmt.Sprintf(`{"id":"s%d","input":"q%d","expected":"q%d"}`, i, i, i))
	}
	return b.Items(name, items...)
}

// Items adds an inline dataset of the given JSON records.
func (b *planBuilder) Items(name string, items ...json.RawMessage) *planBuilder {
	b.p.Datasets = append(b.p.Datasets, &Dataset{
		Name: name, Fingerprint: "fp-" + name, Total: len(items),
		Open: func() (dataset.Reader, io.Closer, error) {
			return dataset.Inline(items, dataset.Mapping{}), io.NopCloser(nil), nil
		},
	})
	return b
}

func (b *planBuilder) Scorer(cfg score.Config, judgeModel string) *planBuilder {
	b.p.Scorers = append(b.p.Scorers, Scorer{Config: cfg, JudgeModel: judgeModel})
	return b
}

func (b *planBuilder) Retry(p retry.Policy) *planBuilder { b.p.Retry = p; return b }

func (b *planBuilder) Timeout(d time.Duration) *planBuilder { b.p.Timeout = d; return b }

func (b *planBuilder) Obj() *Plan { return b.p }

// run runs every task of plan into sink and fails the test on error.
func run(t *testing.T, plan *Plan, sink Sink, opts Options) *Engine {
	t.Helper()
	e, err := New(plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Run(ctx, plan.Tasks(), sink); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return e
}

// ids lists the sample ids stored for a model and dataset, by position.
func ids(s *memSink, model, dataset string, n int) []string {
	var out []string
	for i := range n {
		if r := s.get(model, dataset, i); r != nil {
			out = append(out, r.ID)
		}
	}
	sort.Strings(out)
	return out
}

// Price gives the last model prices in dollars per million tokens.
func (b *planBuilder) Price(t testing.TB, input, output string) *planBuilder {
	t.Helper()
	p, err := spend.NewPrice(spend.PerMillion{Input: input, Output: output})
	if err != nil {
		t.Fatal(err)
	}
	b.p.Models[len(b.p.Models)-1].Price = p
	return b
}

func (b *planBuilder) MaxTokens(n int) *planBuilder {
	b.p.Models[len(b.p.Models)-1].MaxTokens = n
	return b
}
