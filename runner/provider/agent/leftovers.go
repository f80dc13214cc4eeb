package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// After a kill -9 of proctor, Pdeathsig kills each agent, but what an agent
// started is re-parented to init, out of reach of the subreaper that died with
// proctor: a setsid daemon, a server, a sleeping child. Unprivileged Linux has
// no way to bind a process tree to a process's life (that needs a cgroup or a
// PID namespace), so the next proctor cleans up instead: those processes still
// carry PROCTOR_WORKSPACE, naming a workspace proctor-ws-<pid>-* of a proctor
// that no longer runs.

// Leftover is a process that KillLeftovers killed.
type Leftover struct {
	PID int
	// Owner is the PID of the dead proctor whose agent left it.
	Owner int
	// Workspace is its PROCTOR_WORKSPACE.
	Workspace string
}

// KillLeftovers kills the processes of this user that agents of dead proctors
// left running, found by their PROCTOR_WORKSPACE, and removes those
// workspaces. A proctor is dead when its PID no longer exists, or belongs to a
// process started after the leftover (the PID was reused). Processes of other
// users, of live proctors and of kept workspaces (proctor-ws-keep-*, which
// carry no PID) are left alone, as are processes that cleared their
// environment. It reads /proc: elsewhere it does nothing.
func KillLeftovers() []Leftover {
	return killLeftovers("/proc", os.Getpid(), os.Getuid())
}

func killLeftovers(proc string, self, uid int) []Leftover {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	// A PID names a proctor only in our PID namespace: agents of proctors in
	// containers on this machine show here with their own namespace's PIDs.
	selfNS, _ := os.Readlink(filepath.Join(proc, "self", "ns", "pid"))
	var killed []Leftover
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if selfNS != "" && pidNamespace(proc, pid) != selfNS {
			continue
		}
		ws, owner, ok := leftoverOf(proc, pid, uid)
		if !ok || owner == self || !proctorDead(proc, owner, pid) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, Leftover{PID: pid, Owner: owner, Workspace: ws})
		}
	}
	removed := map[string]bool{}
	for _, l := range killed {
		if !removed[l.Workspace] && filepath.IsAbs(l.Workspace) {
			removed[l.Workspace] = true
			removeWorkspace(l.Workspace)
		}
	}
	return killed
}

// pidNamespace identifies the PID namespace of pid ("" when unknown).
func pidNamespace(proc string, pid int) string {
	ns, err := os.Readlink(filepath.Join(proc, strconv.Itoa(pid), "ns", "pid"))
	if err != nil {
		return ""
	}
	return ns
}

// wsMarker finds PROCTOR_WORKSPACE in a NUL-separated environment that is
// itself prefixed with a NUL.
var wsMarker = []byte("\x00PROCTOR_WORKSPACE=")

// leftoverOf returns the workspace of process pid and the PID of the proctor
// it names, when pid belongs to uid and carries PROCTOR_WORKSPACE naming a
// proctor-ws-<pid>-* directory.
func leftoverOf(proc string, pid, uid int) (ws string, owner int, ok bool) {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	fi, err := os.Stat(dir)
	if err != nil {
		return "", 0, false
	}
	// Root could read everyone's environment; only our own processes are ours to kill.
	if st, isStat := fi.Sys().(*syscall.Stat_t); !isStat || int(st.Uid) != uid {
		return "", 0, false
	}
	env, err := os.ReadFile(filepath.Join(dir, "environ"))
	if err != nil {
		return "", 0, false
	}
	env = append([]byte{0}, env...)
	i := bytes.Index(env, wsMarker)
	if i < 0 {
		return "", 0, false
	}
	val := env[i+len(wsMarker):]
	if j := bytes.IndexByte(val, 0); j >= 0 {
		val = val[:j]
	}
	ws = string(val)
	rest, found := strings.CutPrefix(filepath.Base(ws), "proctor-ws-")
	if !found {
		return "", 0, false
	}
	pidText, _, found := strings.Cut(rest, "-")
	owner, err = strconv.Atoi(pidText)
	if !found || err != nil || owner <= 0 {
		return "", 0, false // proctor-ws-keep-*: no owner to check
	}
	return ws, owner, true
}

// proctorDead reports whether the proctor owner that started leftover's agent
// has exited: no process has its PID, or the one that has it started after
// leftover did (a proctor starts before everything its agents start).
func proctorDead(proc string, owner, leftover int) bool {
	if errors.Is(syscall.Kill(owner, 0), syscall.ESRCH) {
		return true
	}
	ownerStart, err1 := startTime(proc, owner)
	leftStart, err2 := startTime(proc, leftover)
	if err1 != nil || err2 != nil {
		return false // when in doubt, kill nothing
	}
	return ownerStart > leftStart
}

// startTime is a process's start time, in clock ticks after boot (field 22 of
// /proc/PID/stat).
func startTime(proc string, pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	const startField = 22 - 3 // fields after the command name start at field 3
	if len(f) <= startField {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[startField], 10, 64)
}
