package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Agents must not outlive their sample, nor proctor. Three mechanisms:
//
//   - Each agent is started with Pdeathsig SIGKILL: the kernel kills it when
//     proctor dies, even by kill -9. Pdeathsig fires when the *thread* that
//     forked exits; the Go runtime never ends a thread except one whose
//     goroutine exits while locked to it (LockOSThread), which proctor never
//     does, so the forking thread lives as long as the process.
//   - Proctor is a child subreaper (PR_SET_CHILD_SUBREAPER): what an agent
//     leaves behind when it exits, even processes that left its group with
//     setsid, is re-parented to proctor instead of init. When the sample ends,
//     those that carry the sample's PROCTOR_WORKSPACE are killed and reaped;
//     so are their children, re-parented in turn.
//   - Workspaces are named after proctor's PID (proctor-ws-<pid>-*); those of
//     a proctor that no longer exists are removed by the next one.
//
// A process that clears its environment and escapes the group is not
// recognised: it is reaped when it exits, and dies with proctor if it is the
// agent itself, but not otherwise.

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from linux/prctl.h.
const prSetChildSubreaper = 36

// reaper knows which of proctor's children os/exec is waiting for, so that it
// reaps only the others.
type reaper struct {
	self int
	mu   sync.Mutex
	// agents are the PIDs of agents being waited for by os/exec; reaping one
	// would make its Wait fail.
	agents map[int]bool
}

// newReaper returns the process's reaper. There is one: a reaper reaps every
// exited child but the agents it knows, so a second one would reap the
// agents of the first before os/exec could (several agent models in one run,
// an executor and local providers in one test binary).
var newReaper = sync.OnceValue(func() *reaper {
	// Best effort: on a kernel without it (or not Linux) orphans go to init,
	// as before.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	return &reaper{self: os.Getpid(), agents: map[int]bool{}}
})

// start starts cmd and records it, under the lock that cleanup holds while it
// reaps, so that an agent that exits at once is never taken for an orphan.
func (r *reaper) start(cmd *exec.Cmd) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.agents[cmd.Process.Pid] = true
	return nil
}

// waited forgets an agent that os/exec has reaped.
func (r *reaper) waited(pid int) {
	r.mu.Lock()
	delete(r.agents, pid)
	r.mu.Unlock()
}

// cleanup kills what the sample whose workspace is ws left running, and reaps
// every orphan that has exited (this sample's or any other's). Its processes
// are those carrying PROCTOR_WORKSPACE=ws and those still in the agent's
// process group pgid (already sent SIGKILL, but maybe not dead yet: a dying
// process's environment can no longer be read). Killed processes' own
// children are re-parented to us in turn, so it goes round until a round
// kills nothing.
func (r *reaper) cleanup(ws string, pgid int) {
	marker := []byte("PROCTOR_WORKSPACE=" + ws + "\x00")
	for round := 0; round < 50; round++ {
		killed := r.round(marker, pgid)
		if len(killed) == 0 {
			return
		}
		r.reap(killed)
	}
}

func (r *reaper) round(marker []byte, pgid int) (killed []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range children(r.self) {
		if r.agents[c.pid] {
			continue
		}
		if c.zombie {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(c.pid, &ws, syscall.WNOHANG, nil)
			continue
		}
		ours := c.pgid == pgid
		if !ours {
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.pid))
			ours = err == nil && bytes.Contains(append([]byte{0}, env...), append([]byte{0}, marker...))
		}
		if ours {
			_ = syscall.Kill(c.pid, syscall.SIGKILL)
			killed = append(killed, c.pid)
		}
	}
	return killed
}

// reap waits for killed children to die and reaps them, for at most a second:
// SIGKILL lands at once, unless a process is in uninterruptible sleep (then it
// is reaped by a later cleanup). Waiting only a fixed moment left zombies on a
// loaded machine.
func (r *reaper) reap(pids []int) {
	for deadline := time.Now().Add(time.Second); len(pids) > 0 && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
		r.mu.Lock()
		left := pids[:0]
		for _, pid := range pids {
			if r.agents[pid] {
				continue // reaped meanwhile by another cleanup, and the PID reused by an agent
			}
			var ws syscall.WaitStatus
			if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == 0 && err == nil {
				left = append(left, pid) // still dying
			}
		}
		r.mu.Unlock()
		pids = left
	}
}

type child struct {
	pid    int
	pgid   int
	zombie bool
}

// children lists the processes whose parent is ppid, from /proc.
func children(ppid int) []child {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []child
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 {
			continue
		}
		p, err1 := strconv.Atoi(f[1])
		pgid, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil && p == ppid {
			out = append(out, child{pid: pid, pgid: pgid, zombie: f[0] == "Z"})
		}
	}
	return out
}

// workspacePrefix names this process's workspaces: proctor-ws-<pid>-.
func workspacePrefix() string { return "proctor-ws-" + strconv.Itoa(os.Getpid()) + "-" }

// removeStaleWorkspaces removes the workspaces of proctor processes that no
// longer exist (killed with -9: nothing removed them). Kept workspaces
// (--keep-workspaces) carry no PID and stay.
func removeStaleWorkspaces(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "proctor-ws-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		// Signal 0 tests existence; EPERM means alive (another user's).
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			removeWorkspace(filepath.Join(root, e.Name()))
		}
	}
}

// reapExited reaps the orphans that have exited, leaving alone the agents
// os/exec waits for: an executor, PID 1 of its container, inherits every
// orphan there.
func (r *reaper) reapExited() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range children(r.self) {
		if c.zombie && !r.agents[c.pid] {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(c.pid, &ws, syscall.WNOHANG, nil)
		}
	}
}

// StartChild starts cmd, a process proctor waits for itself (a service, a
// probe), so that the reaper, which reaps the orphans agents leave behind,
// leaves it to its Wait: reaped by the reaper, its Wait would fail ("waitid:
// no child processes"), and a probe that passed would count as failed. Call
// done once cmd.Wait has returned.
func StartChild(cmd *exec.Cmd) (done func(), err error) {
	r := newReaper()
	if err := r.start(cmd); err != nil {
		return func() {}, err
	}
	pid := cmd.Process.Pid
	return func() { r.waited(pid) }, nil
}

// ReapOrphans reaps the orphans re-parented to proctor that have exited,
// leaving alone the children proctor waits for itself (agents, services,
// probes): a supervisor of services calls it as it goes, so that what they
// leave behind does not pile up as zombies.
func ReapOrphans() { newReaper().reapExited() }
