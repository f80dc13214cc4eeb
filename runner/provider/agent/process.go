package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/proctor-dev/proctor/runner/provider"
)

const (
	// stderrTailBytes is how much of the end of stderr we keep.
	stderrTailBytes = 4 << 10
	// stderrReportBytes is how much of that tail goes into an ExitError:
	// enough for the final error message, short enough for a results table.
	stderrReportBytes = 500
)

// run starts the agent in ws, waits for it and turns the outcome into a
// response or an error.
func (p *processes) run(ctx context.Context, ws, id string, r *rendered, env []string, maxOutput int) (*provider.Response, error) {
	name := r.argv[0]
	// exec.Cmd would resolve a relative path against Dir, the fresh workspace,
	// where the program cannot be; the user meant it relative to the
	// Evaluation file, as data files are.
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		name = filepath.Join(p.baseDir, name)
	}

	cmd := exec.CommandContext(ctx, name, r.argv[1:]...)
	cmd.Dir = ws
	// Never nil (a nil Env would mean "inherit ours"); exec.Cmd keeps the last
	// of duplicate names, so ours win over the caller's.
	cmd.Env = append(cmd.Env, env...)
	cmd.Env = append(cmd.Env, "PROCTOR_WORKSPACE="+ws, "PROCTOR_SAMPLE_ID="+id)
	// A process group of its own, so that one signal reaches everything the
	// agent spawned (shells, tools, servers) and nothing of ours.
	// Pdeathsig: the agent dies with proctor, even by kill -9 (see reap.go).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	// Our own pipes (see streams) are not covered by WaitDelay; finish bounds
	// them by the same delay. Here it only caps Wait after Cancel.
	cmd.WaitDelay = p.waitDelay

	stdout := &cappedBuffer{max: maxOutput}
	stderr := &tailBuffer{max: stderrTailBytes}
	s, err := startStreams(cmd, r.stdin, stdout, stderr)
	if err != nil {
		return nil, fmt.Errorf("start agent: %w", err)
	}
	if err := p.reaper.start(cmd); err != nil {
		s.abort()
		return nil, fmt.Errorf("start agent: %w", err)
	}
	s.started()

	waitErr := cmd.Wait()
	p.reaper.waited(cmd.Process.Pid)
	// Stragglers: a shell that exited (or was killed) leaves its background
	// jobs running, and they still hold our pipes. Kill them whatever the
	// outcome: the group, then those that left it (setsid).
	_ = killGroup(cmd.Process.Pid)
	p.reaper.cleanup(ws, cmd.Process.Pid)
	s.finish(p.waitDelay)

	state := cmd.ProcessState
	switch {
	case state == nil:
		// The process could not be waited for (someone else reaped it).
		return nil, fmt.Errorf("wait for agent: %w", waitErr)
	case state.Success():
		// Even if ctx ended meanwhile: the agent finished, and its answer is whole.
		resp := &provider.Response{Text: trimNewlines(stdout.text()), FinishReason: "exit"}
		if stdout.truncated {
			resp.Truncated, resp.FullBytes = true, stdout.total
		}
		return resp, nil
	case ctx.Err() != nil:
		return nil, killedError(ctx.Err())
	default:
		return nil, &provider.ExitError{ExitCode: exitCode(state), Stderr: stderr.summary(stderrReportBytes)}
	}
}

// killedError is the error of an agent killed because ctxErr ended its
// sample: it wraps ctxErr, as the engine expects of a provider.
func killedError(ctxErr error) error {
	what := "canceled"
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		what = "timed out"
	}
	return fmt.Errorf("agent %s; process group killed: %w", what, ctxErr)
}

// killGroup sends SIGKILL to the process group pgid. A group that no longer
// exists is reported as os.ErrProcessDone, which exec.Cmd.Cancel understands
// as "nothing to do".
func killGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// exitCode is the process's exit status, or 128+N when signal N killed it, as
// a shell would report it (exec reports -1).
func exitCode(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

// streams are the agent's standard streams, as pipes we own.
//
// We don't let exec.Cmd create them: Cmd.Wait then waits for its copying
// goroutines, which a straggler holding a pipe keeps alive until WaitDelay
// runs out, even when the agent itself exited at once. With our own pipes Wait
// returns when the agent exits; we kill its group and only then wait for the
// copies, which end as soon as the group is dead.
type streams struct {
	child  []*os.File // the child's ends; ours to close once it has them
	parent []*os.File // our ends
	copies sync.WaitGroup
	start  []func() // the copying goroutines, started after the process
}

// startStreams wires cmd's stdin (input, or /dev/null when empty), stdout and
// stderr to pipes.
func startStreams(cmd *exec.Cmd, input string, stdout, stderr io.Writer) (*streams, error) {
	s := &streams{}
	for _, w := range []io.Writer{stdout, stderr} {
		pr, pw, err := os.Pipe()
		if err != nil {
			s.abort()
			return nil, err
		}
		s.child = append(s.child, pw)
		s.parent = append(s.parent, pr)
		s.start = append(s.start, func() {
			// The writers never fail, so Copy reads until every writer has
			// closed the pipe or finish gives up on it.
			_, _ = io.Copy(w, pr)
		})
	}
	cmd.Stdout, cmd.Stderr = s.child[0], s.child[1]

	if input != "" {
		pr, pw, err := os.Pipe()
		if err != nil {
			s.abort()
			return nil, err
		}
		s.child = append(s.child, pr)
		s.parent = append(s.parent, pw)
		s.start = append(s.start, func() {
			// An agent may exit without reading all its input: the write then
			// fails with EPIPE, which is no concern of ours.
			_, _ = io.WriteString(pw, input)
			_ = pw.Close() // EOF for the agent
		})
		cmd.Stdin = pr
	}
	return s, nil
}

// started closes the child's ends (the process holds its own copies now) and
// starts copying.
func (s *streams) started() {
	closeFiles(s.child)
	for _, f := range s.start {
		s.copies.Go(f)
	}
}

// abort closes everything when the process could not be started.
func (s *streams) abort() {
	closeFiles(s.child)
	closeFiles(s.parent)
}

// finish waits for the copies to end, for at most delay: only a process that
// escaped the group can hold a pipe open that long, and we stop waiting for it.
func (s *streams) finish(delay time.Duration) {
	done := make(chan struct{})
	go func() {
		s.copies.Wait()
		close(done)
	}()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		// Pipes from os.Pipe are non-blocking and polled, so a deadline
		// interrupts the pending reads and writes.
		for _, f := range s.parent {
			_ = f.SetDeadline(time.Now())
		}
		<-done
	}
	closeFiles(s.parent)
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// cappedBuffer keeps the first max bytes written to it and discards the rest
// without failing, so that a verbose agent keeps running rather than dying of
// SIGPIPE.
type cappedBuffer struct {
	buf       []byte
	max       int
	truncated bool
	total     int // bytes written, kept or not
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.total += n
	if room := b.max - len(b.buf); len(p) > room {
		p = p[:room]
		b.truncated = true
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// text returns what was kept, without a rune that the cap cut in half.
func (b *cappedBuffer) text() string {
	buf := b.buf
	if b.truncated {
		for i := 0; i < utf8.UTFMax-1 && len(buf) > 0; i++ {
			if r, size := utf8.DecodeLastRune(buf); r != utf8.RuneError || size > 1 {
				break
			}
			buf = buf[:len(buf)-1]
		}
	}
	return string(buf)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf     []byte
	max     int
	dropped bool // whether anything before buf was discarded
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= b.max {
		b.dropped = b.dropped || len(b.buf) > 0 || len(p) > b.max
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		return n, nil
	}
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.dropped = true
		b.buf = append(b.buf[:0], b.buf[over:]...) // copy handles the overlap
	}
	return n, nil
}

// summary returns at most the last n bytes, trimmed of surrounding space,
// starting at a rune boundary and marked with "…" when cut.
func (b *tailBuffer) summary(n int) string {
	buf, cut := b.buf, b.dropped
	if len(buf) > n {
		buf, cut = buf[len(buf)-n:], true
	}
	for len(buf) > 0 && !utf8.RuneStart(buf[0]) {
		buf = buf[1:]
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(buf), "\uFFFD"))
	if cut && s != "" {
		s = "…" + s
	}
	return s
}

// trimNewlines removes trailing "\n" and "\r\n" (but not a lone "\r", which
// is content).
func trimNewlines(s string) string {
	for {
		switch {
		case strings.HasSuffix(s, "\r\n"):
			s = s[:len(s)-2]
		case strings.HasSuffix(s, "\n"):
			s = s[:len(s)-1]
		default:
			return s
		}
	}
}
