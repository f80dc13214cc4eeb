package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// TestEscapedProcessesDieWithTheSample starts agents whose children leave the
// process group (setsid, a double fork into a new session): when the sample
// ends, they must be gone too, not left running or as zombies.
func TestEscapedProcessesDieWithTheSample(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid")
	}
	tests := []struct {
		name   string
		script string // $1 is the file to write the escaped process's pid to
	}{
		{name: "setsid child", script: `setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $! > "$1"; echo ok`},
		{name: "setsid grandchild of a subshell", script: `(setsid sh -c 'echo $$ > "$0"; exec sleep 30' "$1" </dev/null >/dev/null 2>&1 &); sleep 0.2; echo ok`},
		{name: "still holding stdout", script: `setsid sleep 30 & echo $! > "$1"; echo ok`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			p := newProvider(t, Config{Command: []string{"sh", "-c", tt.script, "agent", pidFile}})
			start := time.Now()
			if got := mustComplete(t, p, &provider.Request{}); got != "ok" {
				t.Fatalf("answer = %q, want ok", got)
			}
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("process %d that left the agent's group outlived the sample", pid)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				t.Errorf("process %d is a zombie nobody reaped", pid)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("the sample took %v: the escaped process held it up", d)
			}
		})
	}
}

// TestStaleWorkspacesRemoved: workspaces of a proctor killed with -9 (named
// after its PID, now gone) are removed by the next provider; those of live
// processes and kept ones are not.
func TestStaleWorkspacesRemoved(t *testing.T) {
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, fmt.Sprintf("proctor-ws-%d-123", dead.Process.Pid))
	live := filepath.Join(root, fmt.Sprintf("proctor-ws-%d-456", os.Getpid()))
	kept := filepath.Join(root, "proctor-ws-keep-789")
	for _, d := range []string{stale, live, kept} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	newProvider(t, Config{Command: []string{"true"}, WorkspaceRoot: root})
	t.Cleanup(func() { os.RemoveAll(live); os.RemoveAll(kept) }) // before newProvider's check
	for d, want := range map[string]bool{stale: false, live: true, kept: true} {
		_, err := os.Stat(d)
		if got := !errors.Is(err, os.ErrNotExist); got != want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(d), got, want)
		}
	}
}
