package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sleeper starts `sleep 30` with the given PROCTOR_WORKSPACE and returns it;
// the test kills it at the end if it is still there.
func sleeper(t *testing.T, ws string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PROCTOR_WORKSPACE=" + ws}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// killedBySIGKILL waits up to half a second for cmd to die, and reports
// whether SIGKILL ended it; one still running is killed, and false.
func killedBySIGKILL(t *testing.T, cmd *exec.Cmd) bool {
	t.Helper()
	for deadline := time.Now().Add(500 * time.Millisecond); alive(cmd.Process.Pid) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	running := alive(cmd.Process.Pid)
	if running {
		_ = cmd.Process.Kill()
	}
	_ = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return !running && ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func TestKillLeftovers(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc")
	}
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ws := func(name string) string {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	deadWS := ws(fmt.Sprintf("proctor-ws-%d-1", dead.Process.Pid))
	tests := []struct {
		name     string
		ws       string
		wantKill bool
	}{
		{"workspace of a dead proctor", deadWS, true},
		{"workspace of a live proctor (ours)", ws(fmt.Sprintf("proctor-ws-%d-2", os.Getpid())), false},
		{"kept workspace", ws("proctor-ws-keep-3"), false},
		{"not a proctor workspace", ws("elsewhere"), false},
	}
	cmds := make([]*exec.Cmd, len(tests))
	for i, tt := range tests {
		cmds[i] = sleeper(t, tt.ws)
	}
	// As a test binary, we are not the PID the live workspace names for the
	// process scanning: pretend to be another proctor.
	killed := killLeftovers("/proc", -1, os.Getuid())
	for i, tt := range tests {
		if got := killedBySIGKILL(t, cmds[i]); got != tt.wantKill {
			t.Errorf("%s: killed = %v, want %v", tt.name, got, tt.wantKill)
		}
	}
	// The machine may hold other leftovers: look at ours only.
	var ours []Leftover
	for _, l := range killed {
		if filepath.Dir(l.Workspace) == root {
			ours = append(ours, l)
		}
	}
	want := []Leftover{{PID: cmds[0].Process.Pid, Owner: dead.Process.Pid, Workspace: deadWS}}
	if diff := cmp.Diff(want, ours); diff != "" {
		t.Errorf("killLeftovers returned (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(deadWS); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead proctor's workspace is left (err %v)", err)
	}

	// Processes of another user are never touched (as root, we could).
	if n := len(killLeftovers("/proc", -1, os.Getuid()+1)); n != 0 {
		t.Errorf("killed %d processes of another uid", n)
	}
}

// TestProctorDeadAfterPIDReuse: a proctor's PID taken by a process started after
// the leftover cannot be the proctor that started it.
func TestProctorDeadAfterPIDReuse(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	older := sleeper(t, "")
	time.Sleep(20 * time.Millisecond) // start times count clock ticks (10 ms)
	newer := sleeper(t, "")
	if !proctorDead("/proc", newer.Process.Pid, older.Process.Pid) {
		t.Errorf("a PID owned by a process younger than the leftover counts as a live proctor")
	}
	if proctorDead("/proc", older.Process.Pid, newer.Process.Pid) {
		t.Errorf("a live process older than the leftover counts as dead")
	}
}

// TestLeftoversInAnotherPIDNamespaceAreLeftAlone: a process of a container on
// this machine names a proctor by its own namespace's PID, which means nothing
// here; it is never taken for a leftover.
func TestLeftoversInAnotherPIDNamespaceAreLeftAlone(t *testing.T) {
	if _, err := os.Stat("/proc/self/ns/pid"); err != nil {
		t.Skip("needs /proc")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(t.TempDir(), fmt.Sprintf("proctor-ws-%d-1", dead.Process.Pid))
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PROCTOR_WORKSPACE=" + ws}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a process in a new PID namespace here: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	killLeftovers("/proc", -1, os.Getuid())
	if killedBySIGKILL(t, cmd) {
		t.Error("a process in another PID namespace was killed as a leftover")
	}
}
