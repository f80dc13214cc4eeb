package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
)

// fakeBatcher is a provider with a batch API: a batch ends after polls
// looks; its requests are answered as echo does, but those fail() names.
type fakeBatcher struct {
	mu      sync.Mutex
	batches map[string]*fakeBatch
	order   []string
	polls   int // looks before a batch ends; -1: never
	fail    func(customID string) bool
	// submitted counts requests submitted; duplicates, those submitted while
	// an earlier submission of their custom id was pending or answered.
	submitted, duplicates int
	state                 map[string]string
	calls                 int // synchronous calls
	cancelled             []string
	// answer, when set, answers a request's prompt (else it is echoed).
	answer func(prompt string) string
}

type fakeBatch struct {
	id, key string
	ids     []string
	prompts []string
	looks   int
	ended   bool
	cancel  bool
	created time.Time
}

func newFakeBatcher(polls int) *fakeBatcher {
	return &fakeBatcher{batches: map[string]*fakeBatch{}, polls: polls, state: map[string]string{}}
}

func (f *fakeBatcher) Complete(_ context.Context, req *provider.Request) (*provider.Response, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return &provider.Response{Text: f.reply(req.Prompt), Usage: provider.Usage{InputTokens: 10, OutputTokens: 2}}, nil
}

func (f *fakeBatcher) reply(prompt string) string {
	if f.answer != nil {
		return f.answer(prompt)
	}
	return prompt
}

func (f *fakeBatcher) BatchLimits() (int, int) { return 1000, 1 << 20 }

func (f *fakeBatcher) EncodeBatchRequest(customID string, req *provider.Request) ([]byte, error) {
	return json.Marshal(map[string]string{"custom_id": customID, "prompt": req.Prompt})
}

func (f *fakeBatcher) SubmitBatch(_ context.Context, key string, entries [][]byte) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := &fakeBatch{id: fmt.Sprintf("batch_%d", len(f.order)+1), key: key, created: time.Now()}
	for _, e := range entries {
		var m map[string]string
		if err := json.Unmarshal(e, &m); err != nil {
			return "", err
		}
		b.ids, b.prompts = append(b.ids, m["custom_id"]), append(b.prompts, m["prompt"])
		if st := f.state[m["custom_id"]]; st == "pending" || st == "ok" {
			f.duplicates++
		}
		f.state[m["custom_id"]] = "pending"
	}
	f.submitted += len(entries)
	f.batches[b.id] = b
	f.order = append(f.order, b.id)
	return b.id, nil
}

func (f *fakeBatcher) FindBatch(_ context.Context, key string, since time.Time, n int, known func(string) bool) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range f.order {
		if b := f.batches[id]; b.key == key && len(b.ids) == n && !b.created.Before(since.Add(-time.Second)) && !known(id) {
			return id, nil
		}
	}
	return "", nil
}

func (f *fakeBatcher) Batch(_ context.Context, id string) (provider.BatchState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batches[id]
	if b == nil {
		return provider.BatchState{}, &provider.HTTPError{StatusCode: 404, Message: "no such batch"}
	}
	b.looks++
	if (f.polls >= 0 && b.looks > f.polls) || b.cancel {
		b.ended = true
	}
	return provider.BatchState{ID: id, Ended: b.ended, Total: len(b.ids), Status: map[bool]string{true: "ended", false: "in_progress"}[b.ended]}, nil
}

func (f *fakeBatcher) BatchResults(_ context.Context, id string, fn func(provider.BatchResult) error) error {
	f.mu.Lock()
	b := f.batches[id]
	var out []provider.BatchResult
	// Answered in reverse: not the submission's order.
	for i := len(b.ids) - 1; i >= 0; i-- {
		cid := b.ids[i]
		switch {
		case b.cancel:
			out = append(out, provider.BatchResult{CustomID: cid, Canceled: true, Err: errors.New("canceled")})
			f.state[cid] = "failed"
		case f.fail != nil && f.fail(cid):
			out = append(out, provider.BatchResult{CustomID: cid, Err: &provider.HTTPError{StatusCode: 500, Message: "injected"}})
			f.state[cid] = "failed"
		default:
			out = append(out, provider.BatchResult{CustomID: cid, Response: &provider.Response{Text: f.reply(b.prompts[i]), Usage: provider.Usage{InputTokens: 10, OutputTokens: 2}}})
			f.state[cid] = "ok"
		}
	}
	f.mu.Unlock()
	for _, r := range out {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeBatcher) CancelBatch(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches[id].cancel = true
	f.cancelled = append(f.cancelled, id)
	return nil
}

// batchSink is a memSink that keeps batches, and can fail the n-th PutBatch.
type batchSink struct {
	*memSink
	bmu     sync.Mutex
	batches []results.BatchRecord
	puts    int
	failPut int // the PutBatch (1-based) that fails; 0: none
}

func newBatchSink() *batchSink { return &batchSink{memSink: newMemSink()} }

func (s *batchSink) Batches(model string) ([]results.BatchRecord, error) {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	var order []string
	latest := map[string]results.BatchRecord{}
	for _, b := range s.batches {
		if model != "" && b.Model != model {
			continue
		}
		if _, ok := latest[b.Key]; !ok {
			order = append(order, b.Key)
		}
		latest[b.Key] = b
	}
	var out []results.BatchRecord
	for _, k := range order {
		out = append(out, latest[k])
	}
	return out, nil
}

func (s *batchSink) PutBatch(b results.BatchRecord) error {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	s.puts++
	if s.puts == s.failPut {
		return errors.New("disk full")
	}
	s.batches = append(s.batches, b)
	return nil
}

// Awaiting implements AwaitingLog.
func (s *batchSink) Awaiting(model, dataset string) map[int]*results.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]*results.Record{}
	for k, r := range s.recs {
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(k, model+"/"+dataset+"/"), "%d", &i); err == nil && strings.HasPrefix(k, model+"/"+dataset+"/") && len(r.JudgePending) > 0 {
			out[i] = r
		}
	}
	return out
}

func batchPlan(t *testing.T, p provider.Provider, n int, cfg BatchConfig) *Plan {
	t.Helper()
	plan := testPlan(t).Model("m", p, 4).Price(t, "2", "8").Dataset("d", n).Obj()
	plan.Models[0].Batch = testBatchConfig(cfg)
	return plan
}

// testBatchConfig is cfg with the tests' defaults: a fast poll, 2 batches in
// flight, failed requests in a new batch.
func testBatchConfig(cfg BatchConfig) *BatchConfig {
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Millisecond
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 2
	}
	if cfg.Retry == "" {
		cfg.Retry = "batch"
	}
	return &cfg
}

func runBatch(t *testing.T, plan *Plan, sink Sink, opts Options) error {
	t.Helper()
	e, err := New(plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.Run(ctx, plan.Tasks(), sink)
}

func TestBatchRunsEverySampleOnce(t *testing.T) {
	f := newFakeBatcher(2)
	sink := newBatchSink()
	plan := batchPlan(t, f, 250, BatchConfig{MaxRequests: 100})
	if err := runBatch(t, plan, sink, Options{}); err != nil {
		t.Fatal(err)
	}
	if len(f.order) != 3 || f.submitted != 250 || f.duplicates != 0 || f.calls != 0 {
		t.Errorf("%d batches, %d requests submitted (%d twice), %d calls", len(f.order), f.submitted, f.duplicates, f.calls)
	}
	for i := range 250 {
		r := sink.get("m", "d", i)
		if r == nil || r.Output != fmt.Sprintf("q%d", i) || r.Batch == "" || r.Attempts != 1 || r.Error != "" {
			t.Fatalf("sample %d: %+v", i, r)
		}
		// Batch price: half of 10 × $2 + 2 × $8 per million.
		if got := dollars(r.Cost); got != spend.Amount(18_000_000).String() {
			t.Fatalf("sample %d costs %s", i, got)
		}
	}
	recs, _ := sink.Batches("m")
	if len(recs) != 3 || slices.ContainsFunc(recs, func(b results.BatchRecord) bool { return b.State != results.BatchDone || b.ID == "" }) {
		t.Errorf("batch records %+v", recs)
	}
}

func TestBatchFailures(t *testing.T) {
	odd := func(id string) bool {
		_, idx, attempt, _, _ := parseBatchCustomID(id)
		return idx%2 == 1 && attempt == 0
	}
	tests := []struct {
		retry     string
		wantCalls int
		wantErrs  int
		wantAtt   int
	}{
		{retry: "batch", wantAtt: 2},
		{retry: "sync", wantCalls: 10, wantAtt: 2},
		{retry: "none", wantErrs: 10, wantAtt: 1},
	}
	for _, tt := range tests {
		t.Run(tt.retry, func(t *testing.T) {
			f := newFakeBatcher(0)
			f.fail = odd
			sink := newBatchSink()
			if err := runBatch(t, batchPlan(t, f, 20, BatchConfig{Retry: tt.retry}), sink, Options{}); err != nil {
				t.Fatal(err)
			}
			errs := 0
			for i := range 20 {
				r := sink.get("m", "d", i)
				if r == nil {
					t.Fatalf("sample %d has no record", i)
				}
				if r.Error != "" {
					errs++
					if !strings.Contains(r.Error, "injected") || r.ErrorKind != results.ErrorKindCall {
						t.Errorf("sample %d: %q", i, r.Error)
					}
				}
				if i%2 == 1 && r.Attempts != tt.wantAtt {
					t.Errorf("sample %d: %d attempts, want %d", i, r.Attempts, tt.wantAtt)
				}
			}
			if errs != tt.wantErrs || f.calls != tt.wantCalls || f.duplicates != 0 {
				t.Errorf("%d errors, %d calls, %d duplicates; want %d, %d, 0", errs, f.calls, f.duplicates, tt.wantErrs, tt.wantCalls)
			}
		})
	}
}

// TestBatchTakenUpAfterAStop: a run stopped while its batches are in flight
// leaves them to the next, which follows them instead of submitting again.
func TestBatchTakenUpAfterAStop(t *testing.T) {
	f := newFakeBatcher(-1) // never ends, until told to
	sink := newBatchSink()
	plan := batchPlan(t, f, 50, BatchConfig{MaxRequests: 20, MaxInFlight: 4})
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background(), plan.Tasks(), sink) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		n := f.submitted
		f.mu.Unlock()
		if n == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not submitted")
		}
	}
	e.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sink.count() != 0 {
		t.Fatalf("%d records before the batches ended", sink.count())
	}
	f.mu.Lock()
	f.polls = 0
	f.mu.Unlock()
	if err := runBatch(t, plan, sink, Options{}); err != nil {
		t.Fatal(err)
	}
	if sink.count() != 50 || f.submitted != 50 || f.duplicates != 0 || len(f.order) != 3 {
		t.Errorf("%d records, %d submitted (%d twice) in %d batches", sink.count(), f.submitted, f.duplicates, len(f.order))
	}
}

// TestBatchFoundAfterACrash: a run that submitted a batch but could not
// record its id (killed in between) finds it at the provider by its key.
func TestBatchFoundAfterACrash(t *testing.T) {
	f := newFakeBatcher(0)
	sink := newBatchSink()
	sink.failPut = 2 // the record of the first batch's id
	plan := batchPlan(t, f, 10, BatchConfig{})
	if err := runBatch(t, plan, sink, Options{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("first run: %v", err)
	}
	if f.submitted != 10 || sink.count() != 0 {
		t.Fatalf("first run submitted %d, recorded %d", f.submitted, sink.count())
	}
	if err := runBatch(t, plan, sink, Options{}); err != nil {
		t.Fatal(err)
	}
	if sink.count() != 10 || f.submitted != 10 || f.duplicates != 0 {
		t.Errorf("%d records, %d submitted, %d twice", sink.count(), f.submitted, f.duplicates)
	}
}

func TestBatchDeadlineFallsBackToCalls(t *testing.T) {
	f := newFakeBatcher(-1)
	sink := newBatchSink()
	if err := runBatch(t, batchPlan(t, f, 12, BatchConfig{Deadline: 20 * time.Millisecond}), sink, Options{}); err != nil {
		t.Fatal(err)
	}
	if len(f.cancelled) != 1 || f.calls != 12 || sink.count() != 12 {
		t.Errorf("cancelled %v, %d calls, %d records", f.cancelled, f.calls, sink.count())
	}
	if r := sink.get("m", "d", 3); r.Error != "" || r.Batch != "" || r.Attempts != 2 {
		t.Errorf("a sample called after its batch's deadline: %+v", r)
	}
}

func TestBatchBudget(t *testing.T) {
	f := newFakeBatcher(0)
	sink := newBatchSink()
	plan := batchPlan(t, f, 100, BatchConfig{MaxRequests: 10, MaxInFlight: 1})
	plan.Models[0].MaxTokens = 4
	// A request costs 18,000,000 picodollars at the batch price; its worst
	// case a little more. Room for about 40.
	ledger := spend.NewLedger(spend.Limit{Cost: 40 * 18_000_000})
	err := runBatch(t, plan, sink, Options{Ledger: ledger})
	if !IsBudgetExceeded(err) {
		t.Fatalf("Run: %v", err)
	}
	st := ledger.State()
	if st.Spent.Cost > st.Limit.Cost || sink.count() < 20 || sink.count() > 40 || f.submitted != sink.count() {
		t.Errorf("spent %s of %s; %d records, %d submitted", st.Spent.Cost, st.Limit.Cost, sink.count(), f.submitted)
	}
}

// TestBatchWaitsForAnAllowance: a shard's waiting ledger holds batches back
// until its allowance is raised, saying what it needs meanwhile.
func TestBatchWaitsForAnAllowance(t *testing.T) {
	f := newFakeBatcher(0)
	sink := newBatchSink()
	plan := batchPlan(t, f, 30, BatchConfig{MaxRequests: 10, MaxInFlight: 1})
	plan.Models[0].MaxTokens = 4
	ledger := spend.NewWaitingLedger(spend.Limit{Cost: 1})
	done := make(chan error, 1)
	go func() { done <- runBatch(t, plan, sink, Options{Ledger: ledger}) }()
	for deadline := time.Now().Add(5 * time.Second); !ledger.State().Waiting; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the batch does not wait for an allowance")
		}
	}
	if st := ledger.State(); st.Needed.Cost == 0 || f.submitted != 0 {
		t.Errorf("waiting: %+v, %d submitted", st, f.submitted)
	}
	ledger.SetLimit(spend.Limit{Cost: spend.Dollar})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sink.count() != 30 {
		t.Errorf("%d records", sink.count())
	}
}
