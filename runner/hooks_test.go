package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// slotTracker checks that no two samples in flight share a slot, and logs
// what ran where.
type slotTracker struct {
	mu     sync.Mutex
	busy   map[int]string // slot -> sample in it
	events []string
	errs   []string
}

func newSlotTracker() *slotTracker { return &slotTracker{busy: map[int]string{}} }

func (s *slotTracker) log(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, fmt.Sprintf(format, args...))
}

func (s *slotTracker) enter(slot int, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, ok := s.busy[slot]; ok {
		s.errs = append(s.errs, fmt.Sprintf("slot %d: %s entered while %s ran", slot, id, other))
	}
	s.busy[slot] = id
}

func (s *slotTracker) leave(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, slot)
}

// hookFunc is a hook whose command is fn.
func hookFunc(name string, fn func(req *provider.Request) error) *Hook {
	return &Hook{Name: name, Timeout: time.Second, Provider: &fakeProvider{fn: func(_ context.Context, req *provider.Request, _ int64) (*provider.Response, error) {
		return &provider.Response{}, fn(req)
	}}}
}

func TestSlotsAreExclusiveAcrossModels(t *testing.T) {
	tr := newSlotTracker()
	var before, after atomic.Int64
	model := &fakeProvider{fn: func(_ context.Context, req *provider.Request, _ int64) (*provider.Response, error) {
		if want := SlotEnv(req.Slot, req.Slots); !slices.Equal(req.Env[:2], want) {
			return nil, fmt.Errorf("env %v, want %v first", req.Env, want)
		}
		tr.enter(req.Slot, req.Model+"/"+req.SampleID)
		time.Sleep(time.Millisecond)
		tr.leave(req.Slot)
		return &provider.Response{Text: fmt.Sprintf("%d/%d", req.Slot, req.Slots)}, nil
	}}
	plan := testPlan(t).Model("a", model, 3).Model("b", model, 2).Dataset("d", 60).Obj()
	plan.Hooks = &Hooks{
		BeforeSample: hookFunc("beforeSample", func(req *provider.Request) error {
			before.Add(1)
			if req.SampleID == "" || req.Sample["input"] == nil {
				return errors.New("no sample")
			}
			return nil
		}),
		AfterSample: hookFunc("afterSample", func(*provider.Request) error { after.Add(1); return nil }),
	}
	sink := newMemSink()
	run(t, plan, sink, Options{})
	if len(tr.errs) > 0 {
		t.Fatalf("slots shared:\n%s", strings.Join(tr.errs, "\n"))
	}
	seen := map[string]map[string]bool{"a": {}, "b": {}}
	for _, m := range []string{"a", "b"} {
		for i := range 60 {
			r := sink.get(m, "d", i)
			if r == nil || r.Error != "" {
				t.Fatalf("%s/%d: %+v", m, i, r)
			}
			seen[m][r.Output] = true
		}
	}
	// Model a has slots 0-2 and b 3-4, of 5; every slot was used.
	want := map[string]map[string]bool{
		"a": {"0/5": true, "1/5": true, "2/5": true},
		"b": {"3/5": true, "4/5": true},
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("slots used (-want +got):\n%s", diff)
	}
	if before.Load() != 120 || after.Load() != 120 {
		t.Errorf("hooks ran %d before and %d after, want 120 each", before.Load(), after.Load())
	}
}

// TestBrokenSlotIsRepairedBeforeReuse: a failing beforeSample is that
// sample's error, and its slot takes no other sample until the hook succeeds
// on it again.
func TestBrokenSlotIsRepairedBeforeReuse(t *testing.T) {
	tr := newSlotTracker()
	var fails atomic.Int64
	model := &fakeProvider{fn: func(_ context.Context, req *provider.Request, _ int64) (*provider.Response, error) {
		tr.log("model %s", req.SampleID)
		return &provider.Response{Text: req.Prompt}, nil
	}}
	plan := testPlan(t).Model("m", model, 1).Dataset("d", 4).Obj()
	plan.Hooks = &Hooks{
		BeforeSample: hookFunc("beforeSample", func(req *provider.Request) error {
			tr.log("before %s slot %d", req.SampleID, req.Slot)
			// s1's hook fails, and so does the first repair.
			if req.SampleID == "s1" && fails.Add(1) <= 2 {
				return &provider.ExitError{ExitCode: 3, Stderr: "relation \"crm\" is locked"}
			}
			return nil
		}),
		AfterSample: hookFunc("afterSample", func(req *provider.Request) error {
			tr.log("after %s", req.SampleID)
			return nil
		}),
	}
	sink := newMemSink()
	met := telemetry.New()
	run(t, plan, sink, Options{RepairBackoff: time.Millisecond, Metrics: met})
	// The slot broke, and was repaired.
	if got := metric(t, met, "proctor_runner_slots_broken", map[string]string{"model": "m"}); got != 0 {
		t.Errorf("proctor_runner_slots_broken = %v, want 0: repaired", got)
	}
	want := []string{
		"before s0 slot 0", "model s0", "after s0",
		"before s1 slot 0", // fails: the sample's error, no call, no afterSample
		"before s1 slot 0", // the repair fails too
		"before s1 slot 0", // and succeeds
		"before s2 slot 0", "model s2", "after s2",
		"before s3 slot 0", "model s3", "after s3",
	}
	if diff := cmp.Diff(want, tr.events); diff != "" {
		t.Errorf("what ran (-want +got):\n%s", diff)
	}
	r := sink.get("m", "d", 1)
	wantErr := `hook beforeSample (slot 0) exited with status 3: relation "crm" is locked`
	if r == nil || r.ErrorKind != results.ErrorKindHook || r.Error != wantErr {
		t.Errorf("s1's record: %+v, want error %q of kind hook", r, wantErr)
	}
	if model.calls.Load() != 3 {
		t.Errorf("the model was called %d times, want 3", model.calls.Load())
	}
}

// TestAfterSampleFailureBreaksTheSlot: the sample's record stands, and the
// slot is repaired (by beforeSample) before it takes another.
func TestAfterSampleFailureBreaksTheSlot(t *testing.T) {
	tr := newSlotTracker()
	model := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", model, 1).Dataset("d", 2).Obj()
	plan.Hooks = &Hooks{
		BeforeSample: hookFunc("beforeSample", func(req *provider.Request) error {
			tr.log("before %s", req.SampleID)
			return nil
		}),
		AfterSample: hookFunc("afterSample", func(req *provider.Request) error {
			tr.log("after %s", req.SampleID)
			if req.SampleID == "s0" {
				return errors.New("drop database failed")
			}
			return nil
		}),
	}
	sink := newMemSink()
	run(t, plan, sink, Options{RepairBackoff: time.Millisecond})
	want := []string{"before s0", "after s0", "before s0", "before s1", "after s1"}
	if diff := cmp.Diff(want, tr.events); diff != "" {
		t.Errorf("what ran (-want +got):\n%s", diff)
	}
	if r := sink.get("m", "d", 0); r == nil || r.Error != "" || r.Output != "q0" {
		t.Errorf("s0's record: %+v, want its answer", r)
	}
}

// TestSlotThatStaysBrokenEndsTheModel: past the repair timeout the model's
// run ends with an error, and the samples it did not reach have no record
// (a later run does them).
func TestSlotThatStaysBrokenEndsTheModel(t *testing.T) {
	model := &fakeProvider{fn: echo}
	plan := testPlan(t).Model("m", model, 2).Dataset("d", 20).Obj()
	plan.RepairTimeout = 20 * time.Millisecond
	plan.Hooks = &Hooks{BeforeSample: hookFunc("beforeSample", func(req *provider.Request) error {
		if req.SampleID == "s0" || req.SampleID == "s1" {
			return nil
		}
		return errors.New("could not connect to server: Connection refused")
	})}
	met := telemetry.New()
	e, err := New(plan, Options{RepairBackoff: time.Millisecond, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	err = e.Run(context.Background(), plan.Tasks(), sink)
	var rep *SlotRepairError
	if !errors.As(err, &rep) || !strings.Contains(err.Error(), "was still broken after 20ms: hook beforeSample") ||
		!strings.Contains(err.Error(), "Connection refused") {
		t.Fatalf("Run: %v, want a *SlotRepairError naming the hook and its error", err)
	}
	// s0 and s1 ran; each slot then failed one sample and stayed broken.
	if n := sink.count(); n != 4 {
		t.Errorf("%d records, want 4 (2 answers, 2 hook errors)", n)
	}
	// Both slots are out of use, as the metrics say; no sample is in flight.
	if got := metric(t, met, "proctor_runner_slots_broken", map[string]string{"model": "m"}); got != 2 {
		t.Errorf("proctor_runner_slots_broken = %v, want 2", got)
	}
	if got := metric(t, met, "proctor_runner_samples_in_flight", map[string]string{"model": "m"}); got != 0 {
		t.Errorf("proctor_runner_samples_in_flight = %v, want 0", got)
	}
	hookErrors := 0
	for i := range 20 {
		if r := sink.get("m", "d", i); r != nil && r.ErrorKind == results.ErrorKindHook {
			hookErrors++
		}
	}
	if hookErrors != 2 {
		t.Errorf("%d hook errors, want 2", hookErrors)
	}
}

func TestHookTimeout(t *testing.T) {
	hang := &Hook{Name: "beforeSample", Timeout: 20 * time.Millisecond, Provider: &fakeProvider{fn: func(ctx context.Context, _ *provider.Request, _ int64) (*provider.Response, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}}
	err := hang.Run(context.Background(), HookContext{Slot: 2, Slots: 4})
	if want := "hook beforeSample timed out after 20ms and was killed"; err == nil || err.Error() != want {
		t.Errorf("Run: %v, want %q", err, want)
	}
	// An agent executor that applies the time left itself can end it a moment
	// before the hook's timer: its deadline, not an error of the hook's.
	early := &Hook{Name: "beforeSample", Timeout: time.Hour, Provider: &fakeProvider{fn: func(context.Context, *provider.Request, int64) (*provider.Response, error) {
		return nil, fmt.Errorf("agent timed out; process group killed: %w", context.DeadlineExceeded)
	}}}
	err = early.Run(context.Background(), HookContext{Slot: 0, Slots: 1, Sample: &dataset.Sample{ID: "b"}})
	if want := "hook beforeSample (slot 0) timed out after 1h0m0s and was killed"; err == nil || err.Error() != want {
		t.Errorf("Run with the provider's deadline first: %v, want %q", err, want)
	}
	// The run's own end is not the hook's failure.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := hang.Run(ctx, HookContext{}); !errors.Is(err, context.Canceled) || isHookError(err) {
		t.Errorf("Run on a cancelled context: %v, want context.Canceled", err)
	}
}

// fakeServices is a service that can be taken down and brought back.
type fakeServices struct {
	mu      sync.Mutex
	up      bool
	gen     uint64
	downGen uint64 // when it last went down
	upCh    chan struct{}
}

func newFakeServices() *fakeServices { return &fakeServices{up: true, upCh: make(chan struct{})} }

func (f *fakeServices) Mark() uint64 { f.mu.Lock(); defer f.mu.Unlock(); return f.gen }

func (f *fakeServices) Since(mark uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.up || f.downGen > mark {
		return &ServiceError{Service: "crm-db", What: "restarted"}
	}
	return nil
}

func (f *fakeServices) WaitReady(ctx context.Context) error {
	f.mu.Lock()
	up, ch := f.up, f.upCh
	f.mu.Unlock()
	if up {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeServices) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	f.up, f.downGen = false, f.gen
}

func (f *fakeServices) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	f.up = true
	close(f.upCh)
	f.upCh = make(chan struct{})
}

// TestServiceCrashFailsSamplesInFlight: the samples in flight when a service
// goes down fail naming it; no sample starts until it is back, and the run
// goes on then.
func TestServiceCrashFailsSamplesInFlight(t *testing.T) {
	svc := newFakeServices()
	var started atomic.Int64
	crashed := make(chan struct{})
	model := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, _ int64) (*provider.Response, error) {
		if started.Add(1) == 5 {
			svc.down()
			close(crashed)
			go func() { time.Sleep(50 * time.Millisecond); svc.restart() }()
			return nil, &provider.ExitError{ExitCode: 2, Stderr: "server closed the connection unexpectedly"}
		}
		return echo(ctx, req, 0)
	}}
	plan := testPlan(t).Model("m", model, 1).Dataset("d", 10).Obj()
	plan.Retry.MaxAttempts = 1
	sink := newMemSink()
	run(t, plan, sink, Options{Services: svc})
	<-crashed
	for i := range 10 {
		r := sink.get("m", "d", i)
		if r == nil {
			t.Fatalf("sample %d has no record", i)
		}
		if i == 4 {
			want := "service crm-db restarted while the sample ran: agent exited with status 2: server closed the connection unexpectedly"
			if r.ErrorKind != results.ErrorKindService || r.Error != want {
				t.Errorf("the crashed sample's record: kind %q, error %q; want service, %q", r.ErrorKind, r.Error, want)
			}
		} else if r.Error != "" {
			t.Errorf("sample %d: %s", i, r.Error)
		}
	}
}

// TestServiceThatStaysDownEndsTheModel: a service that does not come back
// within the repair timeout ends the model's run, naming it.
func TestServiceThatStaysDownEndsTheModel(t *testing.T) {
	svc := newFakeServices()
	svc.down()
	plan := testPlan(t).Model("m", &fakeProvider{fn: echo}, 2).Dataset("d", 3).Obj()
	plan.RepairTimeout = 20 * time.Millisecond
	e, err := New(plan, Options{Services: svc})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	err = e.Run(context.Background(), plan.Tasks(), sink)
	if err == nil || !strings.Contains(err.Error(), "service crm-db restarted for 20ms") {
		t.Fatalf("Run: %v, want the service named", err)
	}
	if sink.count() != 0 {
		t.Errorf("%d records, want none", sink.count())
	}
}

func TestSlotCount(t *testing.T) {
	plan := testPlan(t).Model("a", &fakeProvider{fn: echo}, 3).Model("b", &fakeProvider{fn: echo}, 0).
		Model("judge", &fakeProvider{fn: echo}, 7).JudgeOnly().Dataset("d", 1).Dataset("e", 1).Obj()
	if got := plan.SlotCount(plan.Tasks()); got != 4 {
		t.Errorf("SlotCount = %d, want 4 (3 for a, 1 for b, none for the judge)", got)
	}
	if got := plan.SlotCount([]Task{{Model: "b", Dataset: "d"}}); got != 1 {
		t.Errorf("SlotCount of b's tasks = %d, want 1", got)
	}
}
