package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
)

// shortDir is a fresh directory with a short path: a Unix socket's path is at
// most 107 bytes, which t.TempDir() under a long test name can exceed.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "px")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startExecutor serves an executor in this process whose environment is env,
// until the test ends (or stop is called). It returns its socket and
// workspace root.
func startExecutor(t *testing.T, env map[string]string) (socket, root string, stop func()) {
	t.Helper()
	dir := shortDir(t)
	socket, root = filepath.Join(dir, "agent.sock"), filepath.Join(dir, "ws")
	x, err := NewExecutor(ExecutorOptions{WorkspaceRoot: root, Log: logr.Discard(), LookupEnv: func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Serve(ctx, l) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(func() {
		stop()
		assertEmptyDir(t, root)
	})
	return socket, root, stop
}

// awaitFile waits up to 5 seconds for path to exist; unlike waitFor it may be
// called from any goroutine (the test then fails on what follows).
func awaitFile(path string) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
}

// remoteProvider is a provider running cfg through the executor at socket,
// with the environment vars (default: PATH and LC_ALL from the executor).
func remoteProvider(t *testing.T, cfg Config, socket string, vars ...EnvVar) *Provider {
	t.Helper()
	if vars == nil {
		vars = []EnvVar{{Name: "PATH", FromExecutor: true}, {Name: "LC_ALL", Value: "C"}}
	}
	cfg.Executor = &ExecutorConfig{Socket: socket, Env: vars, ConnectTimeout: 5 * time.Second}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := p.Connect(t.Context()); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return p
}

// outcome is what the engine sees of a Complete: the response, or the
// error's kind and text.
type outcome struct {
	Resp *provider.Response
	Exit *provider.ExitError
	Err  string
}

func outcomeOf(resp *provider.Response, err error) outcome {
	var exit *provider.ExitError
	switch {
	case errors.As(err, &exit):
		return outcome{Exit: exit}
	case err != nil:
		return outcome{Err: err.Error()}
	}
	return outcome{Resp: resp}
}

// TestRemoteAnswersAsLocal: through an executor, a sample's answer, exit
// status, standard error and plain errors are what a local run gives, byte
// for byte.
func TestRemoteAnswersAsLocal(t *testing.T) {
	t.Parallel()
	socket, _, _ := startExecutor(t, map[string]string{"PATH": os.Getenv("PATH")})
	req := &provider.Request{System: "be brief", Prompt: "what's \"2+2\"? $HOME", SampleID: "s1",
		Sample: map[string]any{"n": 42, "bytes": "caf\xe9 \xff"}}
	tests := []struct {
		name    string
		command []string
		stdin   string
		files   map[string]string
		max     int
	}{
		{name: "answer", command: []string{"sh", "-c", `printf 'four\n\n'`}},
		{name: "argv from the sample", command: []string{"sh", "-c", `printf '%s|%s|%s' "$1" "$2" "$3"`, "agent", "{{.Prompt}}", "{{.ID}}", "{{.Sample.n}}"}},
		{name: "invalid UTF-8 kept", command: []string{"sh", "-c", `printf '%s' "$1"; printf '\377\376'`, "agent", "{{.Sample.bytes}}"}},
		{name: "stdin", stdin: "{{.System}}\n{{.Prompt}}\n", command: []string{"cat"}},
		{name: "large stdin", stdin: strings.Repeat("y", 1<<20), command: []string{"sh", "-c", "wc -c | tr -d ' '"}},
		{name: "files", files: map[string]string{"a/b.txt": "{{.ID}}:{{.Sample.n}}", "c": ""}, command: []string{"sh", "-c", "cat a/b.txt; ls -A | sort"}},
		{name: "exit code and stderr", command: []string{"sh", "-c", "echo partial; echo '  oops  ' >&2; exit 3"}},
		{name: "signal", command: []string{"sh", "-c", "kill -TERM $$"}},
		{name: "command not found", command: []string{"proctor-no-such-agent"}},
		{name: "output cap", max: 5, command: []string{"printf", "ééé"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Command: tt.command, Stdin: tt.stdin, Files: tt.files, MaxOutputBytes: tt.max}
			local := newProvider(t, cfg)
			remote := remoteProvider(t, cfg, socket)
			want := outcomeOf(complete(t, local, req))
			got := outcomeOf(complete(t, remote, req))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("through the executor (-local +remote):\n%s", diff)
			}
		})
	}
}

// TestRemoteWorkspaceAndEnvironment: the agent runs in a fresh workspace of
// the executor's, holding its files, with exactly the environment declared:
// literal values from the runner, the others from the executor's own
// environment, the key trimmed.
func TestRemoteWorkspaceAndEnvironment(t *testing.T) {
	t.Parallel()
	socket, root, _ := startExecutor(t, map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": "/agent/home", "AGENT_KEY": "  sk-remote-0123456789\n",
		"GH_TOKEN": "ghp_tokentoken", "SHORT": "abc", "NOT_PASSED": "x",
	})
	p := remoteProvider(t, Config{
		Command: []string{"sh", "-c", `pwd -P; echo "$PROCTOR_WORKSPACE"; cat ctx.md; echo; printf '%s' "$AGENT_KEY" | wc -c; env | sort`},
		Files:   map[string]string{"ctx.md": "{{.Workspace}}"},
	}, socket,
		EnvVar{Name: "PATH", FromExecutor: true},
		EnvVar{Name: "HOME", FromExecutor: true},
		EnvVar{Name: "UNSET_BASE", FromExecutor: true},
		EnvVar{Name: "AGENT_KEY", FromExecutor: true, Key: true},
		EnvVar{Name: "FOO", Value: "bar baz"},
		EnvVar{Name: "GH_TOKEN", FromExecutor: true, Secret: true, Required: true},
		EnvVar{Name: "SHORT", FromExecutor: true, Secret: true, Required: true},
		EnvVar{Name: "PROCTOR_SAMPLE_ID", Value: "spoofed"},
	)
	answer := mustComplete(t, p, &provider.Request{SampleID: "s7"})
	lines := strings.Split(answer, "\n")
	if len(lines) < 4 {
		t.Fatalf("answer %q", answer)
	}
	ws := lines[1]
	if filepath.Dir(ws) != root || !strings.HasPrefix(filepath.Base(ws), "proctor-ws-") {
		t.Errorf("PROCTOR_WORKSPACE = %q, want a proctor-ws-* directory of the executor's root %s", ws, root)
	}
	if resolved, _ := filepath.EvalSymlinks(ws); lines[0] != resolved && lines[0] != ws {
		t.Errorf("the agent ran in %q, want its workspace %q", lines[0], ws)
	}
	if lines[2] != ws {
		t.Errorf("{{.Workspace}} rendered as %q, want %q", lines[2], ws)
	}
	if strings.TrimSpace(lines[3]) != fmt.Sprint(len("sk-remote-0123456789")) {
		t.Errorf("the key is %s bytes long, want it trimmed to %d", lines[3], len("sk-remote-0123456789"))
	}
	got := map[string]string{}
	for _, line := range lines[4:] {
		name, value, _ := strings.Cut(line, "=")
		got[name] = value
	}
	delete(got, "PWD") // the shell's own
	delete(got, "SHLVL")
	delete(got, "_")
	want := map[string]string{
		"PATH":              os.Getenv("PATH"),
		"HOME":              "/agent/home",
		"AGENT_KEY":         provider.Redacted, // passed on, and removed from what it prints
		"FOO":               "bar baz",
		"GH_TOKEN":          provider.Redacted,
		"SHORT":             "abc", // too short to be taken for a secret
		"PROCTOR_SAMPLE_ID": "s7",  // the executor's wins
		"PROCTOR_WORKSPACE": ws,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent environment (-want +got):\n%s", diff)
	}
}

// TestRemoteRedactsPassedThroughSecrets: the runner does not know the values
// the executor passed on, so the executor removes them, and their encodings,
// from the answer and from standard error.
func TestRemoteRedactsPassedThroughSecrets(t *testing.T) {
	t.Parallel()
	const key = "sk-ant-remote-7f3c9a2b"
	reversed := []byte(key)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	socket, _, _ := startExecutor(t, map[string]string{"PATH": os.Getenv("PATH"), "ANTHROPIC_API_KEY": key})
	vars := []EnvVar{{Name: "PATH", FromExecutor: true}, {Name: "ANTHROPIC_API_KEY", FromExecutor: true, Key: true},
		{Name: "REVERSED", Value: string(reversed)}, {Name: "B64", Value: base64.StdEncoding.EncodeToString([]byte(key))}}

	p := remoteProvider(t, Config{Command: []string{"sh", "-c", `echo "key=$ANTHROPIC_API_KEY rev=$REVERSED b64=$B64"`}}, socket, vars...)
	if got, want := mustComplete(t, p, &provider.Request{}), "key=[REDACTED] rev=[REDACTED] b64=[REDACTED]"; got != want {
		t.Errorf("answer %q, want %q", got, want)
	}
	p = remoteProvider(t, Config{Command: []string{"sh", "-c", `echo "failed with $ANTHROPIC_API_KEY" >&2; exit 1`}}, socket, vars...)
	_, err := complete(t, p, &provider.Request{})
	var exit *provider.ExitError
	if !errors.As(err, &exit) || exit.Stderr != "failed with [REDACTED]" {
		t.Errorf("Complete error = %v; want an ExitError whose stderr has the key removed", err)
	}
}

// TestRemoteTimeoutAndCancelKillTheProcessGroup: when the sample's context
// ends, the runner's request ends, and the executor kills the agent's whole
// group; the error wraps the context's, as a local run's does.
func TestRemoteTimeoutAndCancelKillTheProcessGroup(t *testing.T) {
	t.Parallel()
	socket, _, _ := startExecutor(t, map[string]string{"PATH": os.Getenv("PATH")})
	for _, tt := range []struct {
		name string
		want error
		text string
	}{
		{"timeout", context.DeadlineExceeded, "timed out; process group killed"},
		{"cancel", context.Canceled, "canceled; process group killed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pid")
			p := remoteProvider(t, Config{Command: []string{"sh", "-c", `sleep 1000 & echo $! > "$1"; sleep 1000`, "agent", pidFile}}, socket)
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			if errors.Is(tt.want, context.Canceled) {
				ctx, cancel = context.WithCancel(t.Context())
				defer cancel()
				go func() {
					awaitFile(pidFile)
					cancel()
				}()
			}
			start := time.Now()
			_, err := p.Complete(ctx, &provider.Request{})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("Complete error = %v; want one wrapping %v that says %q", err, tt.want, tt.text)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Complete returned after %v", d)
			}
			pid := readPID(t, pidFile)
			// The executor is in this process: its reaper, not the test, reaps.
			waitFor(t, 5*time.Second, fmt.Sprintf("process %d to be killed and reaped", pid), func() bool {
				return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
			})
		})
	}
}

// TestRemoteOutputCap: the cap is the runner's, applied by the executor.
func TestRemoteOutputCap(t *testing.T) {
	t.Parallel()
	socket, _, _ := startExecutor(t, map[string]string{"PATH": os.Getenv("PATH")})
	p := remoteProvider(t, Config{Command: []string{"sh", "-c", `head -c 300000 /dev/zero | tr '\0' x`}, MaxOutputBytes: 1000}, socket)
	resp, err := complete(t, p, &provider.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != strings.Repeat("x", 1000) || !resp.Truncated || resp.FullBytes != 300000 {
		t.Errorf("answer of %d bytes, truncated %v from %d; want 1000 x's cut from 300000", len(resp.Text), resp.Truncated, resp.FullBytes)
	}
}

// TestConnectChecksTheAgentsEnvironment: a key or a required variable the
// executor lacks fails Connect, naming the variable and never its value.
func TestConnectChecksTheAgentsEnvironment(t *testing.T) {
	t.Parallel()
	socket, _, _ := startExecutor(t, map[string]string{"KEY_OK": "sk-good", "KEY_BLANK": " \n", "KEY_SPACE": "sk bad-secret-value", "TOKEN": "t"})
	for _, tt := range []struct {
		name string
		v    EnvVar
		want *EnvError
	}{
		{"key present", EnvVar{Name: "KEY_OK", FromExecutor: true, Key: true}, nil},
		{"key missing", EnvVar{Name: "KEY_NONE", FromExecutor: true, Key: true}, &EnvError{Name: "KEY_NONE", Missing: true}},
		{"key blank", EnvVar{Name: "KEY_BLANK", FromExecutor: true, Key: true}, &EnvError{Name: "KEY_BLANK", Missing: true}},
		{"key with a space", EnvVar{Name: "KEY_SPACE", FromExecutor: true, Key: true},
			&EnvError{Name: "KEY_SPACE", Invalid: errors.New("holds a space or control character (' ' at byte 2); an API key has none")}},
		{"required present", EnvVar{Name: "TOKEN", FromExecutor: true, Required: true}, nil},
		{"required missing", EnvVar{Name: "NOPE", FromExecutor: true, Required: true}, &EnvError{Name: "NOPE", Missing: true}},
		{"optional missing", EnvVar{Name: "NOPE", FromExecutor: true}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := New(Config{Command: []string{"true"}, Executor: &ExecutorConfig{Socket: socket, Env: []EnvVar{tt.v}}})
			if err != nil {
				t.Fatal(err)
			}
			err = p.Connect(t.Context())
			var got *EnvError
			errors.As(err, &got)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b error) bool { return fmt.Sprint(a) == fmt.Sprint(b) })); diff != "" || (tt.want == nil && err != nil) {
				t.Errorf("Connect = %v (-want +got):\n%s", err, diff)
			}
			if err != nil && strings.Contains(err.Error(), "secret-value") {
				t.Errorf("Connect's error %q holds the value", err)
			}
		})
	}
}

// TestExecutorRefusesRequestsOutsideItsRoot: the socket is in a volume the
// agent can write to; the executor checks what it is asked.
func TestExecutorRefusesRequestsOutsideItsRoot(t *testing.T) {
	t.Parallel()
	socket, root, _ := startExecutor(t, map[string]string{"PATH": os.Getenv("PATH")})
	p := remoteProvider(t, Config{Command: []string{"true"}}, socket)
	r := p.launch.(*remote)
	outside := shortDir(t)
	for _, tt := range []struct {
		ws    string
		files []renderedFile
	}{
		{ws: filepath.Join(outside, "proctor-ws-x")},
		{ws: filepath.Join(root, "other")},
		{ws: filepath.Join(root, "proctor-ws-x", "..", "..", "proctor-ws-y")},
		{ws: filepath.Join(root, "proctor-ws-x"), files: []renderedFile{{path: "../escape", content: "x"}}},
		{ws: filepath.Join(root, "proctor-ws-x"), files: []renderedFile{{path: "/etc/escape", content: "x"}}},
	} {
		_, err := r.launch(t.Context(), tt.ws, "s", &rendered{argv: []string{"true"}, files: tt.files})
		if err == nil || provider.IsUnavailable(err) || !strings.Contains(err.Error(), "400 Bad Request") {
			t.Errorf("workspace %s, files %v: %v; want the executor to refuse it", tt.ws, tt.files, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Errorf("the executor wrote outside its root: %v", entries)
	}
}

// TestExecutorUnreachableIsUnavailable: an executor that does not listen, or
// that dies or stops while its agent runs, is a *provider.UnavailableError:
// the engine then leaves the sample without a record rather than scoring it
// as an error.
func TestExecutorUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("never listens", func(t *testing.T) {
		t.Parallel()
		p, err := New(Config{Command: []string{"true"}, Executor: &ExecutorConfig{
			Socket: filepath.Join(shortDir(t), "agent.sock"), ConnectTimeout: 300 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = p.Connect(t.Context())
		if !provider.IsUnavailable(err) {
			t.Fatalf("Connect = %v; want an UnavailableError", err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Errorf("Connect gave up after %v, before its timeout", d)
		}
		if _, err := p.Complete(t.Context(), &provider.Request{}); !provider.IsUnavailable(err) {
			t.Errorf("Complete = %v; want an UnavailableError", err)
		}
	})
	t.Run("listens late", func(t *testing.T) {
		t.Parallel()
		dir := shortDir(t)
		socket := filepath.Join(dir, "agent.sock")
		p, err := New(Config{Command: []string{"echo", "hi"}, Executor: &ExecutorConfig{Socket: socket,
			Env: []EnvVar{{Name: "PATH", FromExecutor: true}}, ConnectTimeout: 10 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(500 * time.Millisecond)
			x, err := NewExecutor(ExecutorOptions{WorkspaceRoot: filepath.Join(dir, "ws"), Log: logr.Discard()})
			if err != nil {
				t.Error(err)
				return
			}
			l, err := Listen(socket)
			if err != nil {
				t.Error(err)
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() { _ = x.Serve(ctx, l) }() // ends with ctx
		}()
		if got := mustComplete(t, p, &provider.Request{}); got != "hi" {
			t.Errorf("answer %q", got)
		}
	})
	t.Run("stops while the agent runs", func(t *testing.T) {
		t.Parallel()
		socket, _, stop := startExecutor(t, map[string]string{"PATH": os.Getenv("PATH")})
		started := filepath.Join(t.TempDir(), "started")
		p := remoteProvider(t, Config{Command: []string{"sh", "-c", `touch "$1"; sleep 1000`, "agent", started}}, socket)
		go func() {
			awaitFile(started)
			stop()
		}()
		_, err := complete(t, p, &provider.Request{})
		if !provider.IsUnavailable(err) {
			t.Errorf("Complete = %v; want an UnavailableError", err)
		}
	})
	t.Run("killed while the agent runs", func(t *testing.T) {
		t.Parallel()
		dir := shortDir(t)
		socket, pidFile := filepath.Join(dir, "agent.sock"), filepath.Join(dir, "pid")
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		x := exec.Command(self, "-test.run=^TestHelperExecutor$")
		x.Env = append(os.Environ(), "PROCTOR_TEST_EXECUTOR="+socket, "PROCTOR_TEST_EXECUTOR_ROOT="+filepath.Join(dir, "ws"))
		if err := x.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = x.Process.Kill(); _ = x.Wait() }) // it may have exited already
		p := remoteProvider(t, Config{Command: []string{"sh", "-c", `echo $$ > "$1"; exec sleep 1000`, "agent", pidFile}}, socket)
		go func() {
			awaitFile(pidFile)
			_ = x.Process.Kill() // it may have exited already
		}()
		_, err = complete(t, p, &provider.Request{})
		if !provider.IsUnavailable(err) {
			t.Errorf("Complete = %v; want an UnavailableError", err)
		}
		// The agent dies with its executor (Pdeathsig).
		pid := readPID(t, pidFile)
		waitFor(t, 5*time.Second, "the agent to die with its executor", func() bool { return !alive(pid) })
	})
}

// TestHelperExecutor is the executor of TestExecutorUnreachableIsUnavailable,
// in a process of its own that the test kills.
func TestHelperExecutor(t *testing.T) {
	socket := os.Getenv("PROCTOR_TEST_EXECUTOR")
	if socket == "" {
		t.Skip("run by TestExecutorUnreachableIsUnavailable")
	}
	if os.Getenv("PROCTOR_TEST_EXECUTOR_PID1") != "" {
		// PID 1 of a namespace of its own, as in a container: its /proc.
		if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	x, err := NewExecutor(ExecutorOptions{WorkspaceRoot: os.Getenv("PROCTOR_TEST_EXECUTOR_ROOT"), Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	_ = x.Serve(context.Background(), l)
}

// TestExecutorAsPID1ReapsOrphans: in its container the executor is PID 1, so
// every orphan becomes its child. One that escaped the sample (a new session,
// no PROCTOR_WORKSPACE) and exits later is reaped, not left a zombie; those
// that carry the sample's workspace are killed when the sample ends.
func TestExecutorAsPID1ReapsOrphans(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, for a PID namespace")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid")
	}
	dir := shortDir(t)
	socket := filepath.Join(dir, "agent.sock")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	x := exec.Command(self, "-test.run=^TestHelperExecutor$")
	x.Env = append(os.Environ(), "PROCTOR_TEST_EXECUTOR="+socket, "PROCTOR_TEST_EXECUTOR_ROOT="+filepath.Join(dir, "ws"), "PROCTOR_TEST_EXECUTOR_PID1=1")
	x.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := x.Start(); err != nil {
		t.Skipf("no PID namespace here: %v", err)
	}
	t.Cleanup(func() { _ = x.Process.Kill(); _ = x.Wait() }) // it may have exited already
	p := remoteProvider(t, Config{Command: []string{"sh", "-c", `
setsid env -i sleep 1 </dev/null >/dev/null 2>&1 &
setsid sleep 1000 </dev/null >/dev/null 2>&1 &
sleep 0.2 # until both have left the agent's group, which is killed at the end
echo ok`}}, socket)
	if got := mustComplete(t, p, &provider.Request{}); got != "ok" {
		t.Fatalf("answer %q", got)
	}
	// Seen from here, the executor's children are its orphans.
	children := func() (running, zombies []int) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
				continue
			}
			if state, ppid, ok := procStat(pid); ok && ppid == x.Process.Pid {
				if state == "Z" {
					zombies = append(zombies, pid)
				} else {
					running = append(running, pid)
				}
			}
		}
		return running, zombies
	}
	if running, _ := children(); len(running) != 1 {
		t.Errorf("the executor has %d running children after the sample, want 1: the orphan without PROCTOR_WORKSPACE (the other was killed)", len(running))
	}
	// The orphan exits after a second; the executor reaps within seconds.
	waitFor(t, 10*time.Second, "the executor to reap its exited orphan", func() bool {
		running, zombies := children()
		return len(running) == 0 && len(zombies) == 0
	})
}
