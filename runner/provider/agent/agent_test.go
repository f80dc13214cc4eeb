package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
)

// testTimeout bounds every Complete call of the tests, so that a bug hangs a
// test for seconds rather than forever.
const testTimeout = 10 * time.Second

// writeScript writes a /bin/sh script into a fresh temporary directory and
// returns its path. Tests run it as `sh path`, not directly: executing a file
// just written can fail with ETXTBSY when another test forks meanwhile.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// testEnv is the minimal environment the scripts need.
func testEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C"}
}

// newProvider builds a provider whose workspaces live in a fresh directory
// and, unless it keeps them, checks at the end of the test that none is left.
func newProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	if cfg.WorkspaceRoot == "" {
		cfg.WorkspaceRoot = t.TempDir()
	}
	if cfg.Env == nil {
		cfg.Env = testEnv()
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if !cfg.KeepWorkspaces {
		t.Cleanup(func() { assertEmptyDir(t, cfg.WorkspaceRoot) })
	}
	return p
}

// setWaitDelay sets how long a local provider waits for pipes held open by
// processes that escaped the agent's group.
func setWaitDelay(p *Provider, d time.Duration) { p.launch.(*local).proc.waitDelay = d }

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("workspace left behind: %s", filepath.Join(dir, e.Name()))
	}
}

func complete(t *testing.T, p *Provider, req *provider.Request) (*provider.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	return p.Complete(ctx, req)
}

// mustComplete runs a request that must succeed and returns the answer.
func mustComplete(t *testing.T, p *Provider, req *provider.Request) string {
	t.Helper()
	resp, err := complete(t, p, req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if diff := cmp.Diff(&provider.Response{Text: resp.Text, FinishReason: "exit"}, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	return resp.Text
}

func TestCompleteAnswers(t *testing.T) {
	t.Parallel()
	req := &provider.Request{
		System:   "be brief",
		Prompt:   `what's "2+2"? $HOME`,
		SampleID: "s1",
		Sample:   map[string]any{"n": 42, "lang": "go"},
	}
	tests := []struct {
		name    string
		command []string // the script's arguments; the script is command[0]
		script  string
		stdin   string
		want    string
	}{
		{
			name:   "stdout is the answer, trailing newlines trimmed",
			script: `printf 'four\n\n'`,
			want:   "four",
		},
		{
			name:   "CRLF newlines trimmed, inner ones kept",
			script: `printf 'a\r\nb\r\n\r\n'`,
			want:   "a\r\nb",
		},
		{
			name:   "leading and inner space kept",
			script: `printf '  x \n y'`,
			want:   "  x \n y",
		},
		{
			name:    "prompt reaches argv verbatim",
			command: []string{"{{.Prompt}}"},
			script:  `printf '%s' "$1"`,
			want:    req.Prompt,
		},
		{
			name:    "sample fields and ID in argv",
			command: []string{"{{.ID}}", "{{.Sample.lang}}-{{.Sample.n}}"},
			script:  `echo "$1 $2"`,
			want:    "s1 go-42",
		},
		{
			name:   "stdin template",
			stdin:  "{{.System}}\n---\n{{.Prompt}}\n",
			script: `cat`,
			want:   "be brief\n---\n" + req.Prompt,
		},
		{
			name:   "no stdin template means empty stdin",
			script: `cat; echo eof`,
			want:   "eof",
		},
		{
			name:   "large stdin is written whole",
			stdin:  strings.Repeat("y", 1<<20),
			script: `wc -c | tr -d ' '`,
			want:   strconv.Itoa(1 << 20),
		},
		{
			name:   "agent need not read its stdin",
			stdin:  strings.Repeat("y", 1<<20),
			script: `echo ignored`,
			want:   "ignored",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, Config{
				Command: append([]string{"sh", writeScript(t, tt.script)}, tt.command...),
				Stdin:   tt.stdin,
			})
			if diff := cmp.Diff(tt.want, mustComplete(t, p, req)); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCommandPathResolution(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// A relative path with a slash is relative to our directory, not to the
	// workspace the agent runs in.
	rel, err := filepath.Rel(wd, "/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range []string{"sh", "/bin/sh", rel} {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, Config{Command: []string{sh, "-c", "echo ran"}})
			if got := mustComplete(t, p, &provider.Request{}); got != "ran" {
				t.Errorf("answer = %q, want %q", got, "ran")
			}
		})
	}
}

// TestCommandRelativeToBaseDir: a relative path with a slash is relative to
// BaseDir (the Evaluation file's directory), wherever proctor runs.
func TestCommandRelativeToBaseDir(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "bin", "agent"), []byte("#!/bin/sh\necho from-base\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"bin/agent", "./bin/agent", "../" + filepath.Base(base) + "/bin/agent"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, Config{Command: []string{cmd}, BaseDir: base})
			if got := mustComplete(t, p, &provider.Request{}); got != "from-base" {
				t.Errorf("answer = %q, want %q", got, "from-base")
			}
		})
	}
}

func TestEnvironmentIsExactlyConfigured(t *testing.T) {
	// Not parallel: t.Setenv. The agent must not see our environment.
	t.Setenv("PROCTOR_AGENT_TEST_LEAK", "secret")
	root := t.TempDir()
	p := newProvider(t, Config{
		Command:       []string{"sh", "-c", "env"},
		Env:           []string{"PATH=" + os.Getenv("PATH"), "FOO=bar baz", "PROCTOR_SAMPLE_ID=spoofed"},
		WorkspaceRoot: root,
	})
	got := map[string]string{}
	for line := range strings.Lines(mustComplete(t, p, &provider.Request{SampleID: "s7"})) {
		name, value, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		got[name] = value
	}
	delete(got, "PWD") // the shell's own
	if ws := got["PROCTOR_WORKSPACE"]; !strings.HasPrefix(ws, filepath.Join(root, "proctor-ws-")) {
		t.Errorf("PROCTOR_WORKSPACE = %q, want a directory proctor-ws-* in %s", ws, root)
	}
	got["PROCTOR_WORKSPACE"] = "<ws>"
	want := map[string]string{
		"PATH":              os.Getenv("PATH"),
		"FOO":               "bar baz",
		"PROCTOR_SAMPLE_ID": "s7", // ours wins over the configured one
		"PROCTOR_WORKSPACE": "<ws>",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent environment (-want +got):\n%s", diff)
	}
}

func TestFilesAndWorkingDirectory(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p := newProvider(t, Config{
		Command: []string{"sh", "-c", `pwd -P; echo "$PROCTOR_WORKSPACE"`},
		Files: map[string]string{
			"context.md":      "Task {{.ID}}: {{.Prompt}}",
			"src/pkg/main.go": "package {{.Sample.pkg}} // in {{.Workspace}}\n",
			"./empty":         "",
		},
		WorkspaceRoot:  root,
		KeepWorkspaces: true,
	})
	answer := mustComplete(t, p, &provider.Request{Prompt: "fix it", SampleID: "s3", Sample: map[string]any{"pkg": "main"}})

	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), "proctor-ws-") {
		t.Fatalf("workspace root holds %v, want one kept proctor-ws-* directory", entries)
	}
	ws := filepath.Join(root, entries[0].Name())
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(realWS+"\n"+ws, answer); diff != "" {
		t.Errorf("agent's cwd and PROCTOR_WORKSPACE (-want +got):\n%s", diff)
	}

	got := map[string]string{}
	err = filepath.WalkDir(ws, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(ws, path)
		got[rel] = string(b)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if perm := info.Mode().Perm(); perm&^0o644 != 0 {
			t.Errorf("%s has mode %v, want at most 0644", rel, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"context.md":      "Task s3: fix it",
		"src/pkg/main.go": "package main // in " + ws + "\n",
		"empty":           "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("workspace files (-want +got):\n%s", diff)
	}
}

func TestWorkspaceRemovedWhateverTheOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command []string
		sample  map[string]any
		timeout time.Duration
	}{
		{name: "success", command: []string{"sh", "-c", "touch a b c; mkdir -p d/e; echo ok"}},
		{name: "read-only directories", command: []string{"sh", "-c", "mkdir -p ro/sub && touch ro/sub/f && chmod 0555 ro/sub ro"}},
		{name: "non-zero exit", command: []string{"sh", "-c", "touch a; exit 1"}},
		{name: "command not found", command: []string{"proctor-no-such-agent"}},
		{name: "template error", command: []string{"echo", "{{.Sample.missing}}"}, sample: map[string]any{}},
		{name: "timeout", command: []string{"sh", "-c", "touch a; sleep 1000"}, timeout: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// newProvider checks that the workspace root ends up empty.
			p := newProvider(t, Config{Command: tt.command, Files: map[string]string{"dir/f": "x"}})
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			_, _ = p.Complete(ctx, &provider.Request{Sample: tt.sample})
		})
	}
}

func TestConcurrentSamplesAreIsolated(t *testing.T) {
	t.Parallel()
	p := newProvider(t, Config{
		Command: []string{"sh", writeScript(t, `
echo "$PROCTOR_SAMPLE_ID" > "marker-$PROCTOR_SAMPLE_ID"
sleep 0.2 # let the other samples write their markers
ls
echo ---
cat context.md`)},
		Files: map[string]string{"context.md": "context of {{.ID}}"},
	})

	const n = 8
	answers := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := complete(t, p, &provider.Request{SampleID: fmt.Sprintf("s%d", i)})
			if err != nil {
				errs[i] = err
				return
			}
			answers[i] = resp.Text
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("sample %d: %v", i, errs[i])
			continue
		}
		want := fmt.Sprintf("context.md\nmarker-s%d\n---\ncontext of s%d", i, i)
		if diff := cmp.Diff(want, answers[i]); diff != "" {
			t.Errorf("sample %d saw (-want +got):\n%s", i, diff)
		}
	}
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := newProvider(t, Config{Command: []string{"sh", writeScript(t, `
sleep 1000 &
echo $! > "$1"
sleep 1000`), pidFile}})
	// Far longer than the test allows: returning promptly must come from
	// killing the group, which closes the pipes, not from giving up on them.
	setWaitDelay(p, 10*time.Second)

	const timeout = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	start := time.Now()
	resp, err := p.Complete(ctx, &provider.Request{})
	elapsed := time.Since(start)

	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Complete = %v, %v; want an error wrapping context.DeadlineExceeded", resp, err)
	}
	if !strings.Contains(err.Error(), "timed out; process group killed") {
		t.Errorf("error %q does not say the agent was killed", err)
	}
	var exitErr *provider.ExitError
	if errors.As(err, &exitErr) {
		t.Errorf("error %v is an *ExitError, want a context error", err)
	}
	if elapsed > timeout+5*time.Second {
		t.Errorf("Complete returned after %v, want soon after the %v deadline", elapsed, timeout)
	}
	assertProcessGone(t, readPID(t, pidFile))
}

func TestCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile, started := filepath.Join(dir, "pid"), filepath.Join(dir, "started")
	p := newProvider(t, Config{Command: []string{"sh", writeScript(t, `
sleep 1000 &
echo $! > "$1"
touch "$2"
sleep 1000`), pidFile, started}})
	setWaitDelay(p, 10*time.Second)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := p.Complete(ctx, &provider.Request{})
		errc <- err
	}()
	waitFor(t, 5*time.Second, "the agent to start", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "canceled; process group killed") {
			t.Errorf("Complete error = %v, want an agent-killed error wrapping context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Complete did not return after cancellation")
	}
	assertProcessGone(t, readPID(t, pidFile))
}

func TestAlreadyDoneContext(t *testing.T) {
	t.Parallel()
	p := newProvider(t, Config{Command: []string{"sh", "-c", "echo ran"}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Complete(ctx, &provider.Request{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Complete = %v, want context.Canceled", err)
	}
}

func TestStragglerDoesNotDelayAnswer(t *testing.T) {
	t.Parallel()
	// The agent exits at once but leaves a background job holding its stdout.
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := newProvider(t, Config{Command: []string{"sh", writeScript(t, `
sleep 1000 &
echo $! > "$1"
echo answer`), pidFile}})
	setWaitDelay(p, 10*time.Second)

	start := time.Now()
	if got := mustComplete(t, p, &provider.Request{}); got != "answer" {
		t.Errorf("answer = %q, want %q", got, "answer")
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Complete took %v: it waited for the straggler", elapsed)
	}
	assertProcessGone(t, readPID(t, pidFile))
}

func TestEscapedProcessBoundedByWaitDelay(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid command")
	}
	// A process that leaves the group (a daemon) and keeps stdout open cannot
	// be killed by us; we stop waiting for the pipe after waitDelay.
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := newProvider(t, Config{Command: []string{"sh", writeScript(t, `
setsid sleep 1000 &
echo $! > "$1"
echo answer`), pidFile}})
	setWaitDelay(p, 50*time.Millisecond)

	got := mustComplete(t, p, &provider.Request{})
	pid := readPID(t, pidFile)
	_ = syscall.Kill(pid, syscall.SIGKILL) // ours to clean up
	if got != "answer" {
		t.Errorf("answer = %q, want %q", got, "answer")
	}
}

func TestExitError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		want   *provider.ExitError
	}{
		{
			name:   "code and stderr",
			script: "echo partial answer; echo '  oops  ' >&2; exit 3",
			want:   &provider.ExitError{ExitCode: 3, Stderr: "oops"},
		},
		{
			name:   "no stderr",
			script: "exit 1",
			want:   &provider.ExitError{ExitCode: 1},
		},
		{
			name: "long stderr keeps the tail",
			script: `i=0
while [ $i -lt 1000 ]; do echo "noise line $i" >&2; i=$((i+1)); done
echo "fatal: it broke" >&2
exit 2`,
			want: &provider.ExitError{ExitCode: 2, Stderr: "<tail>"},
		},
		{
			name:   "killed by a signal",
			script: "kill -TERM $$",
			want:   &provider.ExitError{ExitCode: 128 + int(syscall.SIGTERM)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, Config{Command: []string{"sh", writeScript(t, tt.script)}})
			_, err := complete(t, p, &provider.Request{})
			var got *provider.ExitError
			if !errors.As(err, &got) {
				t.Fatalf("Complete error = %v, want *provider.ExitError", err)
			}
			if tt.want.Stderr == "<tail>" {
				if !strings.HasPrefix(got.Stderr, "…") || !strings.HasSuffix(got.Stderr, "noise line 999\nfatal: it broke") ||
					len(got.Stderr) > stderrReportBytes+len("…") {
					t.Errorf("stderr = %q (%d bytes), want …, the last %d bytes, ending with the last line",
						got.Stderr, len(got.Stderr), stderrReportBytes)
				}
				got.Stderr = "<tail>"
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ExitError (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCommandNotFound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		command string
		want    error
	}{
		{"proctor-no-such-agent", exec.ErrNotFound},
		{"/nonexistent/proctor-agent", fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, Config{Command: []string{tt.command}})
			_, err := complete(t, p, &provider.Request{})
			if !errors.Is(err, tt.want) {
				t.Errorf("Complete error = %v, want one wrapping %v", err, tt.want)
			}
			var exitErr *provider.ExitError
			if errors.As(err, &exitErr) {
				t.Errorf("Complete error is an *ExitError, want a start error")
			}
		})
	}
}

func TestOutputCap(t *testing.T) {
	t.Parallel()
	t.Run("truncated and the agent keeps running", func(t *testing.T) {
		t.Parallel()
		marker := filepath.Join(t.TempDir(), "finished")
		p := newProvider(t, Config{
			Command: []string{"sh", writeScript(t, `
head -c 300000 /dev/zero | tr '\0' x
echo done > "$1"`), marker},
			MaxOutputBytes: 1000,
		})
		resp, err := p.Complete(context.Background(), &provider.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := resp.Text, strings.Repeat("x", 1000); got != want {
			t.Errorf("answer is %d bytes, want %d x's", len(got), len(want))
		}
		if !resp.Truncated || resp.FullBytes != 300000 {
			t.Errorf("Truncated %v, FullBytes %d; want the cut flagged with the whole size 300000", resp.Truncated, resp.FullBytes)
		}
		if b, err := os.ReadFile(marker); err != nil || string(b) != "done\n" {
			t.Errorf("the agent did not run to the end past the cap: %q, %v", b, err)
		}
	})
	t.Run("no rune cut in half", func(t *testing.T) {
		t.Parallel()
		p := newProvider(t, Config{Command: []string{"printf", "ééé"}, MaxOutputBytes: 5})
		resp, err := p.Complete(context.Background(), &provider.Request{})
		if err != nil || resp.Text != "éé" || !resp.Truncated || resp.FullBytes != 6 {
			t.Errorf("answer = %+v, %v; want %q, truncated from 6 bytes", resp, err, "éé")
		}
	})
	t.Run("exactly at the cap", func(t *testing.T) {
		t.Parallel()
		p := newProvider(t, Config{Command: []string{"printf", "abc"}, MaxOutputBytes: 3})
		resp, err := p.Complete(context.Background(), &provider.Request{})
		if err != nil || resp.Text != "abc" || resp.Truncated {
			t.Errorf("answer = %+v, %v; want \"abc\", not truncated", resp, err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string // prefix of the error
	}{
		{"no command", Config{}, "command: empty"},
		{"command element", Config{Command: []string{"sh", "-c", "{{.Prompt"}}, "command[2]: template: "},
		{"stdin", Config{Command: []string{"sh"}, Stdin: "{{end}}"}, "stdin: template: "},
		{"file content", Config{Command: []string{"sh"}, Files: map[string]string{"context.md": "{{if}}"}}, `files["context.md"]: template: `},
		{"empty file path", Config{Command: []string{"sh"}, Files: map[string]string{"": "x"}}, `files[""]: empty path`},
		{"absolute file path", Config{Command: []string{"sh"}, Files: map[string]string{"/etc/x": "x"}}, `files["/etc/x"]: path must be relative`},
		{"escaping file path", Config{Command: []string{"sh"}, Files: map[string]string{"../x": "x"}}, `files["../x"]: path must not contain ".."`},
		{"dotdot inside", Config{Command: []string{"sh"}, Files: map[string]string{"a/../b": "x"}}, `files["a/../b"]: path must not contain ".."`},
		{"directory path", Config{Command: []string{"sh"}, Files: map[string]string{"a/": "x"}}, `files["a/"]: path names a directory`},
		{"workspace itself", Config{Command: []string{"sh"}, Files: map[string]string{".": "x"}}, `files["."]: path names the workspace`},
		{"same file twice", Config{Command: []string{"sh"}, Files: map[string]string{"a/b": "x", "a//b": "y"}}, `files["a/b"]: same file as files["a//b"]`},
		{"env without =", Config{Command: []string{"sh"}, Env: []string{"PATH"}}, `env: "PATH" is not a name=value pair`},
		{"negative cap", Config{Command: []string{"sh"}, MaxOutputBytes: -1}, "max output bytes: -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("New error = %v, want one starting with %q", err, tt.want)
			}
		})
	}
}

func TestCompleteTemplateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string // prefix of the error
	}{
		{"command", Config{Command: []string{"echo", "{{.ID}}", "{{.Sample.answer}}"}}, "command[2]: template: "},
		{"stdin", Config{Command: []string{"cat"}, Stdin: "{{.Sample.answer}}"}, "stdin: template: "},
		{"file", Config{Command: []string{"true"}, Files: map[string]string{"a.md": "{{.Sample.answer}}"}}, `files["a.md"]: template: `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, tt.cfg)
			for _, sample := range []map[string]any{{"question": "q"}, nil} {
				_, err := complete(t, p, &provider.Request{Sample: sample})
				if err == nil || !strings.HasPrefix(err.Error(), tt.want) ||
					!strings.Contains(err.Error(), `map has no entry for key "answer"`) {
					t.Errorf("sample %v: Complete error = %v, want %q... naming the missing key", sample, err, tt.want)
				}
				var exitErr *provider.ExitError
				if errors.As(err, &exitErr) {
					t.Errorf("sample %v: Complete error is an *ExitError, want a plain error", sample)
				}
			}
		})
	}
}

func TestCheckTemplates(t *testing.T) {
	t.Parallel()
	cfg := Config{
		// Nothing is run, so the command need not exist.
		Command: []string{"/nonexistent/agent", "--task={{.Prompt}}", "{{.ID}}"},
		Stdin:   "{{.System}}",
		Files:   map[string]string{"a.md": "{{.Sample.question}} in {{.Workspace}}"},
	}
	data := TemplateData{
		Prompt: "p", System: "s", ID: "1", Workspace: "/ws",
		Sample: map[string]any{"question": "q"},
	}
	if err := CheckTemplates(cfg, data); err != nil {
		t.Errorf("CheckTemplates = %v, want nil", err)
	}

	tests := []struct {
		name   string
		modify func(*Config, *TemplateData)
		want   string // prefix of the error
	}{
		{"missing sample key", func(_ *Config, d *TemplateData) { d.Sample = map[string]any{} }, `files["a.md"]: template: `},
		{"unknown field", func(c *Config, _ *TemplateData) { c.Command[2] = "{{.Bogus}}" }, "command[2]: template: "},
		{"parse error", func(c *Config, _ *TemplateData) { c.Stdin = "{{" }, "stdin: template: "},
		{"bad file path", func(c *Config, _ *TemplateData) { c.Files = map[string]string{"/x": ""} }, `files["/x"]: `},
		{"empty program", func(c *Config, _ *TemplateData) { c.Command[0] = "{{if false}}x{{end}}" }, "command[0]: renders to an empty program name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, data := cfg, data
			cfg.Command = append([]string(nil), cfg.Command...)
			tt.modify(&cfg, &data)
			err := CheckTemplates(cfg, data)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("CheckTemplates = %v, want an error starting with %q", err, tt.want)
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"short", []string{"a", "b"}, "ab"},
		{"exact", []string{"abcd", "ef"}, "abcdef"},
		{"overflow across writes", []string{"abcd", "efgh"}, "…cdefgh"},
		{"one big write", []string{"0123456789"}, "…456789"},
		{"big write after small", []string{"x", "abcdef"}, "…abcdef"},
		{"rune cut at the front", []string{"aééééx"}, "…ééx"}, // the cut é is dropped
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := &tailBuffer{max: 6}
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := b.summary(6); got != tt.want {
				t.Errorf("summary = %q, want %q", got, tt.want)
			}
		})
	}
}

// readPID reads the PID a script wrote.
func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the script did not record its background job's PID in time: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// assertProcessGone waits up to a second for pid to be gone. A zombie counts
// as gone as long as its parent is not this process: it was killed, and
// reaping it is init's job (which, in a container, may be slow to do it).
func assertProcessGone(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, time.Second, fmt.Sprintf("process %d to die", pid), func() bool {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		state, ppid, ok := procStat(pid)
		if !ok {
			return true // gone between the two calls
		}
		if state == "Z" {
			if ppid == os.Getpid() {
				t.Fatalf("process %d is a zombie child of the test process", pid)
			}
			return true
		}
		return false
	})
}

// procStat returns a process's state and parent PID from /proc.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return fields[0], ppid, err == nil
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSampleEnvironment: a sample's own variables (its endpoints' proxies
// and placeholder key) come after the configured ones and win over them,
// locally and through an executor.
func TestSampleEnvironment(t *testing.T) {
	cfg := Config{Command: []string{"sh", "-c", `echo "$OPENAI_BASE_URL $OPENAI_API_KEY $FOO"`}, WorkspaceRoot: t.TempDir()}
	local := cfg
	local.Env = []string{"PATH=" + os.Getenv("PATH"), "FOO=bar", "OPENAI_API_KEY=configured"}
	socket, _, stop := startExecutor(t, map[string]string{"PATH": os.Getenv("PATH")})
	defer stop()
	remote := remoteProvider(t, cfg, socket, EnvVar{Name: "PATH", FromExecutor: true}, EnvVar{Name: "FOO", Value: "bar"},
		EnvVar{Name: "OPENAI_API_KEY", Value: "configured"})
	for name, p := range map[string]*Provider{"local": newProvider(t, local), "remote": remote} {
		req := &provider.Request{SampleID: "s1", Env: []string{"OPENAI_BASE_URL=http://127.0.0.1:9/v1", "OPENAI_API_KEY=proctor-agent-x"}}
		if got := mustComplete(t, p, req); got != "http://127.0.0.1:9/v1 proctor-agent-x bar" {
			t.Errorf("%s: the agent saw %q", name, got)
		}
	}
}
