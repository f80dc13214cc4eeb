package runner

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/anthropic"
	"github.com/proctor-dev/proctor/runner/provider/openai"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// These batch tests run Proctor's own clients against the fake server, whose
// batches behave as the providers document them (its clock is not ours,
// cancellations take a while, custom ids are the only tie between a result
// and its request), rather than against a fake batcher sharing the engine's
// assumptions.

// batchServer is a fake server whose answers name the model asked, so that a
// record holding another model's answer shows.
func batchServer(t *testing.T, cfg fakellm.Config) (*fakellm.Server, string) {
	t.Helper()
	cfg.Responder = func(req fakellm.Request) fakellm.Reply {
		return fakellm.Reply{Text: req.Model + ":" + req.Messages[len(req.Messages)-1].Content}
	}
	srv := fakellm.New(cfg)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

// lostAnswer is a batcher whose submissions the provider makes, and whose
// answers are lost on the way back (a dropped connection, or the process
// killed right then): the run is stopped then too, when kill is set.
type lostAnswer struct {
	provider.Provider
	provider.Batcher
	mu   sync.Mutex
	lose int // answers still to lose
	kill context.CancelFunc
}

func (l *lostAnswer) SubmitBatch(ctx context.Context, key string, entries [][]byte) (string, error) {
	id, err := l.Batcher.SubmitBatch(ctx, key, entries)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || l.lose == 0 {
		return id, err
	}
	l.lose--
	if l.kill != nil && l.lose == 0 {
		l.kill()
	}
	return "", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

func newOpenAIBatcher(t *testing.T, url, model string) *openai.Provider {
	t.Helper()
	p, err := openai.New(openai.Config{BaseURL: url + "/v1", Model: model})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newAnthropicBatcher(t *testing.T, url, model string) *anthropic.Provider {
	t.Helper()
	p, err := anthropic.New(anthropic.Config{BaseURL: url, Model: model, Params: provider.Params{MaxTokens: 16}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runUntil runs plan into sink until it ends or kill is called.
func runUntil(ctx context.Context, t *testing.T, plan *Plan, sink Sink) error {
	t.Helper()
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return e.Run(ctx, plan.Tasks(), sink)
}

// TestBatchFoundAgainDespiteTheProvidersClock: OpenAI's creation times are
// its own clock's, in whole seconds, two seconds behind ours here. A batch
// the provider made, whose answer was lost, is found by the key in its
// metadata, within the run and after a kill, and never submitted again.
func TestBatchFoundAgainDespiteTheProvidersClock(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(map[bool]string{false: "the answer lost", true: "killed before the answer"}[kill], func(t *testing.T) {
			srv, url := batchServer(t, fakellm.Config{ClockOffset: -2 * time.Second, BatchDelay: 20 * time.Millisecond})
			p := newOpenAIBatcher(t, url, "fake-a")
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			lost := &lostAnswer{Provider: p, Batcher: p, lose: 1}
			if kill {
				lost.kill = stop
			}
			sink := newBatchSink()
			plan := batchPlan(t, lost, 10, BatchConfig{})
			_ = runUntil(ctx, t, plan, sink)
			if kill {
				// The next run: the intent is in the log, the batch at the provider.
				if err := runUntil(context.Background(), t, batchPlan(t, p, 10, BatchConfig{}), sink); err != nil {
					t.Fatal(err)
				}
			}
			st := srv.Stats()
			if st.Batches != 1 || st.DuplicateBatchRequests != 0 {
				t.Errorf("%d batches, %d requests submitted twice; want the one batch, found again", st.Batches, st.DuplicateBatchRequests)
			}
			for i := range 10 {
				if r := sink.get("m", "d", i); r == nil || r.Output != fmt.Sprintf("fake-a:q%d", i) {
					t.Errorf("sample %d: %+v", i, r)
				}
			}
		})
	}
}

// TestBatchOfAnotherRunIsRefused: Anthropic's batches keep no tag, so a batch
// whose creation answer was lost is looked for by its size and time. Another
// run's batch of the same size, made just before, is what that finds: its
// results name other requests in their custom ids and are refused, loudly,
// and the samples are submitted again; no record holds another model's
// answer.
func TestBatchOfAnotherRunIsRefused(t *testing.T) {
	_, url := batchServer(t, fakellm.Config{BatchDelay: 20 * time.Millisecond})
	ours, theirs := newAnthropicBatcher(t, url, "fake-ours"), newAnthropicBatcher(t, url, "fake-theirs")
	// Another run's batch: the same samples, asked of another model.
	var entries [][]byte
	for i := range 10 {
		e, err := theirs.EncodeBatchRequest(batchCustomID(0, i, 0, "0123456789ab"), &provider.Request{
			Messages: []provider.Message{{Role: provider.RoleUser, Content: fmt.Sprintf("q%d", i)}}})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	if _, err := theirs.SubmitBatch(context.Background(), "", entries); err != nil {
		t.Fatal(err)
	}
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	sink := newBatchSink()
	_ = runUntil(ctx, t, batchPlan(t, &lostAnswer{Provider: ours, Batcher: ours, lose: 1, kill: kill}, 10, BatchConfig{}), sink)
	if err := runUntil(context.Background(), t, batchPlan(t, ours, 10, BatchConfig{}), sink); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if r := sink.get("m", "d", i); r == nil || r.Output != fmt.Sprintf("fake-ours:q%d", i) {
			t.Errorf("sample %d: %+v; want our model's answer", i, r)
		}
	}
}

// TestTwoBatchModelsNeverFollowOneBatch: two models of one run submit
// batches of one size at once and lose both answers; the next run finds one
// batch each, never the same one, and each model's records hold its own
// answers.
func TestTwoBatchModelsNeverFollowOneBatch(t *testing.T) {
	_, url := batchServer(t, fakellm.Config{BatchDelay: 20 * time.Millisecond})
	a, b := newAnthropicBatcher(t, url, "fake-a"), newAnthropicBatcher(t, url, "fake-b")
	plan := func(pa, pb provider.Provider) *Plan {
		p := testPlan(t).Model("a", pa, 4).Model("b", pb, 4).Dataset("d", 10).Obj()
		for _, m := range p.Models {
			m.Batch = testBatchConfig(BatchConfig{})
		}
		return p
	}
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	var wg sync.WaitGroup
	wg.Add(2)
	lose := func(p *anthropic.Provider) *lostAnswer {
		return &lostAnswer{Provider: p, Batcher: &waitForBoth{Batcher: p, wg: &wg, kill: kill}, lose: 1}
	}
	sink := newBatchSink()
	_ = runUntil(ctx, t, plan(lose(a), lose(b)), sink)
	if err := runUntil(context.Background(), t, plan(a, b), sink); err != nil {
		t.Fatal(err)
	}
	recs, _ := sink.Batches("")
	followed := map[string][]string{}
	for _, r := range recs {
		if r.ID != "" && !slices.Contains(followed[r.ID], r.Model) {
			followed[r.ID] = append(followed[r.ID], r.Model)
		}
	}
	for id, models := range followed {
		if len(models) > 1 {
			t.Errorf("batch %s followed by %v", id, models)
		}
	}
	for _, m := range []string{"a", "b"} {
		for i := range 10 {
			if r := sink.get(m, "d", i); r == nil || r.Output != fmt.Sprintf("fake-%s:q%d", m, i) {
				t.Errorf("model %s sample %d: %+v", m, i, r)
			}
		}
	}
}

// waitForBoth stops the run once both models' submissions were made.
type waitForBoth struct {
	provider.Batcher
	wg   *sync.WaitGroup
	kill context.CancelFunc
	once sync.Once
}

func (w *waitForBoth) SubmitBatch(ctx context.Context, key string, entries [][]byte) (string, error) {
	id, err := w.Batcher.SubmitBatch(ctx, key, entries)
	w.once.Do(func() {
		w.wg.Done()
		w.wg.Wait()
		w.kill()
	})
	return id, err
}

// TestBatchDeadlineCancelsOnce: a batch past its deadline is cancelled once;
// the cancellation takes the provider a while, and the runner does not ask
// again at every look.
func TestBatchDeadlineCancelsOnce(t *testing.T) {
	srv, url := batchServer(t, fakellm.Config{BatchDelay: time.Hour, BatchCancelDelay: 300 * time.Millisecond})
	p := newOpenAIBatcher(t, url, "fake-a")
	sink := newBatchSink()
	if err := runUntil(context.Background(), t, batchPlan(t, p, 6, BatchConfig{Deadline: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond}), sink); err != nil {
		t.Fatal(err)
	}
	if st := srv.Stats(); st.BatchesCancelled != 1 || st.BatchCancelRequests != 1 {
		t.Errorf("%d batches cancelled, %d cancellations asked; want 1 and 1", st.BatchesCancelled, st.BatchCancelRequests)
	}
	for i := range 6 {
		if r := sink.get("m", "d", i); r == nil || r.Output != fmt.Sprintf("fake-a:q%d", i) {
			t.Errorf("sample %d: %+v; want it called at once", i, r)
		}
	}
}

// TestBatchFailuresKeepTheirAttemptsAcrossRuns: with retryFailed sync, the
// samples a batch failed are called at once; a run killed right after the
// batch ended still calls them at once next time, not in a new batch at their
// first attempt, and maxAttempts counts the batch's.
func TestBatchFailuresKeepTheirAttemptsAcrossRuns(t *testing.T) {
	for _, retry := range []string{"sync", "batch"} {
		t.Run(retry, func(t *testing.T) {
			srv, url := batchServer(t, fakellm.Config{BatchDelay: 10 * time.Millisecond, BatchFailureRate: 0.5, Seed: 3})
			p := newOpenAIBatcher(t, url, "fake-a")
			ctx, kill := context.WithCancel(context.Background())
			defer kill()
			sink := &killAtDone{batchSink: newBatchSink(), kill: kill}
			plan := batchPlan(t, p, 20, BatchConfig{Retry: retry})
			plan.Retry.MaxAttempts = 1
			_ = runUntil(ctx, t, plan, sink)
			if !sink.killed {
				t.Fatal("the first batch did not end")
			}
			again := batchPlan(t, p, 20, BatchConfig{Retry: retry})
			again.Retry.MaxAttempts = 1
			if err := runUntil(context.Background(), t, again, sink.batchSink); err != nil {
				t.Fatal(err)
			}
			st := srv.Stats()
			failed := 0
			for i := range 20 {
				r := sink.get("m", "d", i)
				switch {
				case r == nil:
					t.Errorf("sample %d has no record", i)
				case r.Error != "":
					failed++
				}
			}
			switch retry {
			case "sync":
				// Called at once: no second batch.
				if st.Batches != 1 || failed != 0 || st.Succeeded == 0 {
					t.Errorf("%d batches, %d calls, %d errors; want one batch and the failed samples called", st.Batches, st.Succeeded, failed)
				}
			case "batch":
				// maxAttempts 1: the batch was their attempt; no other batch.
				if st.Batches != 1 || failed == 0 {
					t.Errorf("%d batches, %d errors; want one batch and its failures errors", st.Batches, failed)
				}
			}
		})
	}
}

// killAtDone stops the run when a batch is recorded done.
type killAtDone struct {
	*batchSink
	kill   context.CancelFunc
	killed bool
}

func (k *killAtDone) PutBatch(b results.BatchRecord) error {
	err := k.batchSink.PutBatch(b)
	if b.State == results.BatchDone && !k.killed {
		k.killed = true
		k.kill()
	}
	return err
}
