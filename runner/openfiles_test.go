package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/runner/provider"

	"golang.org/x/sys/unix"
)

// TestEnsureOpenFiles: a run whose samples in flight need more files than
// the process may open raises its limit, or, when it may not, is refused
// saying how much concurrency fits.
func TestEnsureOpenFiles(t *testing.T) {
	plan := func(concurrency int, agent bool) *Plan {
		return &Plan{Models: []*Model{
			{Name: "m", Concurrency: concurrency, Agent: agent},
			{Name: "judge", Concurrency: 10000, JudgeOnly: true},
		}}
	}
	cases := []struct {
		name      string
		plan      *Plan
		cur, max  uint64
		canRaise  bool
		wantSet   uint64 // the soft limit set; 0: none
		wantError string
	}{
		{name: "fits", plan: plan(400, false), cur: 1024, max: 1024},
		{name: "raised by a privileged process", plan: plan(10000, false), cur: 1024, max: 1024, canRaise: true, wantSet: 20128},
		{name: "raised to the hard limit", plan: plan(1000, false), cur: 1024, max: 4096, wantSet: 2128},
		{name: "refused", plan: plan(10000, false), cur: 1024, max: 1024,
			wantError: "need about 20128 open files, and this process may open 1024 (ulimit -n): lower concurrency to at most 448 in all, or raise the limit (ulimit -n 20128)"},
		{name: "agents hold more", plan: plan(100, true), cur: 1024, max: 1024,
			wantError: "need about 1728 open files, and this process may open 1024 (ulimit -n): lower concurrency to at most 56 in all"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cur, hard := c.cur, c.max
			var set uint64
			get := func(_ int, l *unix.Rlimit) error { l.Cur, l.Max = cur, hard; return nil }
			setr := func(_ int, l *unix.Rlimit) error {
				if l.Max > hard && !c.canRaise {
					return errors.New("operation not permitted")
				}
				cur, hard, set = l.Cur, l.Max, l.Cur
				return nil
			}
			err := ensureOpenFiles(c.plan, nil, get, setr)
			if c.wantError == "" && err != nil || c.wantError != "" && (err == nil || !strings.Contains(err.Error(), c.wantError)) {
				t.Fatalf("error %v, want %q", err, c.wantError)
			}
			if c.wantError == "" && set != c.wantSet {
				t.Errorf("soft limit set to %d, want %d", set, c.wantSet)
			}
		})
	}
}

// TestRunningOutOfFilesIsNotTheModels: a call that fails because this
// process ran out of files records nothing (it is not the model's error);
// the run stops saying what ran out, and the sample runs again on resume.
func TestRunningOutOfFilesIsNotTheModels(t *testing.T) {
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if n >= 5 {
			return nil, fmt.Errorf("Post \"http://x/v1/chat/completions\": %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)})
		}
		return echo(ctx, req, n)
	}}
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 20).Obj()
	e, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	err = e.Run(context.Background(), plan.Tasks(), sink)
	var exhausted *LocalExhaustedError
	if !errors.As(err, &exhausted) || !strings.Contains(err.Error(), "ran out of open files") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Fatalf("Run = %v; want a *LocalExhaustedError", err)
	}
	for i := range 20 {
		if r := sink.get("m", "d", i); r != nil && r.Error != "" {
			t.Errorf("sample %d recorded as an error: %q", i, r.Error)
		}
	}
	if got := p.calls.Load(); got != 5 {
		t.Errorf("%d calls; want the run stopped at the first that ran out of files (5)", got)
	}
}
