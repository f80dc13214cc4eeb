package local_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leftoverAgent starts a daemon that leaves its process group (setsid), writes
// its PID to $PIDDIR/<sample id>, then works for longer than the test lasts.
const leftoverAgent = `#!/bin/sh
setsid sleep 300 </dev/null >/dev/null 2>&1 &
echo $! > "$PIDDIR/$PROCTOR_SAMPLE_ID"
sleep 60
echo late
`

// running reports whether pid exists and is not a zombie (a killed orphan of
// init may stay a zombie for a while; it runs no more).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// TestLeftoversOfKilledProctorAreKilledByTheNextRun: after kill -9 of proctor,
// its agent dies (Pdeathsig) but a daemon the agent started with setsid is
// re-parented to init and lives on. The next proctor run, whatever it runs,
// kills it and removes the dead proctor's workspace.
func TestLeftoversOfKilledProctorAreKilledByTheNextRun(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid")
	}
	// Not parallel: any other proctor run of this package would kill the
	// daemon first.
	w := newWorkspace(t)
	script := w.write("agent.sh", leftoverAgent)
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	pidDir := t.TempDir()
	w.writeEval("leftovers", fmt.Sprintf(`  datasets:
  - name: tasks
    source:
      inline:
      - {id: s1, input: "work", expected: done}
  models:
  - name: bot
    provider: agent
    agent:
      command: [%q]
      env: [{name: PIDDIR, value: %q}]
      timeout: 2m
  scoring:
  - type: exact_match
`, script, pidDir))

	p := w.start(w.runArgs()...)
	pidFile := filepath.Join(pidDir, "s1")
	var daemon int
	waitFor(t, 20*time.Second, "the agent's daemon", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		daemon, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && running(daemon)
	})
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	workspaces, _ := filepath.Glob(filepath.Join(w.tmp, "proctor-ws-*"))
	if len(workspaces) != 1 {
		t.Fatalf("workspaces under TMPDIR: %v, want 1", workspaces)
	}

	p.signal(syscall.SIGKILL)
	if r := p.wait(); r.Code != 128+int(syscall.SIGKILL) {
		t.Fatalf("want death by SIGKILL\n%s", r)
	}
	// The gap this test is about: nothing proctor left in place kills it.
	time.Sleep(200 * time.Millisecond)
	if !running(daemon) {
		t.Skipf("the daemon %d died with proctor, or another proctor run on this machine killed it: nothing left to test", daemon)
	}

	// Any later run, here one with no agent at all, kills it.
	w.write("other.yaml", evaluation("other", `  datasets:
  - name: d
    source:
      inline: [{id: q1, input: "What is 2+2?", expected: "4"}]
  models:
  - name: m
    provider: openai
    model: fake
    baseURL: http://127.0.0.1:9/v1
  retry: {maxAttempts: 1}
  scoring: [{type: exact_match}]
`))
	res := w.proctor("run", "-f", filepath.Join(w.dir, "other.yaml"), "-o", filepath.Join(w.dir, "other-out"), "--progress", "none")
	if want := "Killed processes left running by the agents of proctor"; !strings.Contains(res.Stderr, want) || !strings.Contains(res.Stderr, strconv.Itoa(daemon)) {
		t.Errorf("stderr does not say %q naming PID %d\n%s", want, daemon, res)
	}
	waitFor(t, 5*time.Second, "the daemon to die", func() bool { return !running(daemon) })
	if left, _ := filepath.Glob(filepath.Join(w.tmp, "proctor-ws-*")); len(left) != 0 {
		t.Errorf("the dead proctor's workspace is left: %v", left)
	}
}
