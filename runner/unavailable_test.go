package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/agent"
)

// TestUnavailableProviderEndsTheModel: a provider that says it is unavailable
// (a runner pod's agent executor died) is not retried and leaves no error
// record, not for the sample that met it nor for the samples after it: the
// run fails with the error (so the pod fails and the shard is retried, which
// resumes), and the samples that finished before keep their records.
func TestUnavailableProviderEndsTheModel(t *testing.T) {
	gone := errors.New("agent executor unreachable: connection refused")
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if req.Prompt == "q0" || req.Prompt == "q1" {
			return &provider.Response{Text: req.Prompt}, nil
		}
		return nil, &provider.UnavailableError{Err: gone}
	}}
	alive := &fakeProvider{fn: echo}
	// One sample in flight at a time, so that q0 and q1 finish first.
	plan := testPlan(t).Model("agent", p, 1).Model("other", alive, 2).Dataset("d", 10).Obj()
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	err = e.Run(t.Context(), plan.Tasks(), sink)
	if !provider.IsUnavailable(err) || !errors.Is(err, gone) {
		t.Fatalf("Run = %v; want the provider's UnavailableError", err)
	}
	if got := ids(sink, "agent", "d", 10); len(got) != 2 || got[0] != "s0" || got[1] != "s1" {
		t.Errorf("records of the model = %v; want only s0 and s1, those finished before", got)
	}
	for i := range 10 {
		if r := sink.get("agent", "d", i); r != nil && r.Error != "" {
			t.Errorf("sample %d has an error record %q; want none", i, r.Error)
		}
		if r := sink.get("other", "d", i); r == nil || r.Error != "" {
			t.Errorf("the other model's sample %d: %+v; want it done", i, r)
		}
	}
	if c := p.calls.Load(); c != 3 {
		t.Errorf("%d calls; want 3: no retry, and no sample started after it", c)
	}
}

// TestUnreachableAgentExecutorLeavesNoErrorRecord: an agent model whose
// executor cannot be reached (its container died, or never started) ends the
// run with the error and gives none of its samples an error record.
func TestUnreachableAgentExecutorLeavesNoErrorRecord(t *testing.T) {
	dir, err := os.MkdirTemp("", "px")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	a, err := agent.New(agent.Config{Command: []string{"echo", "{{ .Prompt }}"}, Executor: &agent.ExecutorConfig{
		Socket: filepath.Join(dir, "agent.sock"), ConnectTimeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	plan := testPlan(t).Model("agent", a, 3).Dataset("d", 6).Obj()
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	if err := e.Run(t.Context(), plan.Tasks(), sink); !provider.IsUnavailable(err) {
		t.Fatalf("Run = %v; want an UnavailableError", err)
	}
	if n := sink.count(); n != 0 {
		t.Errorf("%d records; want none", n)
	}
}
