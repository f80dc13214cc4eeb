package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/proctor-dev/proctor/runner/provider"
)

// maxRunRequest bounds a request's body: argv, stdin and files rendered from
// one sample (a dataset record is at most 64 MiB, and templates may use it
// more than once).
const maxRunRequest = 1 << 30

// ExecutorOptions configure an Executor.
type ExecutorOptions struct {
	// WorkspaceRoot is where the samples' workspaces are made. It is the
	// executor's alone: what it holds when the executor starts is removed.
	WorkspaceRoot string
	// LookupEnv reads the executor's environment; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	Log       logr.Logger
}

// Executor runs agents for a runner in another container (`proctor
// agent-exec`, an agent pod's sidecar): the runner renders each sample and
// sends it over a Unix socket; the executor makes the workspace, writes the
// files, runs the agent as a local run would (its own process group, killed
// on timeout or when the runner gives up, output capped) and answers with the
// outcome, after removing from it the secrets it passed on to the agent.
//
// In its container it is PID 1: every orphan is re-parented to it, and it
// reaps them (see reap.go) when a sample ends and every few seconds.
type Executor struct {
	proc   *processes
	root   string
	lookup func(string) (string, bool)
	log    logr.Logger
}

// NewExecutor prepares an executor: its workspace root exists and is empty.
func NewExecutor(o ExecutorOptions) (*Executor, error) {
	if o.WorkspaceRoot == "" {
		return nil, errors.New("executor: no workspace root")
	}
	root, err := filepath.Abs(o.WorkspaceRoot)
	if err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	// Left by an executor that died (the container restarted on an emptyDir
	// that outlives it): nothing runs in them any more.
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	for _, e := range entries {
		removeWorkspace(filepath.Join(root, e.Name()))
	}
	proc, err := newProcesses("")
	if err != nil {
		return nil, err
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	return &Executor{proc: proc, root: root, lookup: o.LookupEnv, log: o.Log}, nil
}

// Listen makes the Unix socket at path that the runner connects to, replacing
// what an executor that died left there. Only this user may connect.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve answers runners on l until ctx ends; then the agents still running
// are killed, and so (as PID 1 of a container) is every process left.
func (x *Executor) Serve(ctx context.Context, l net.Listener) error {
	// Requests end with ctx: their agents are killed, not waited for.
	base, stopRequests := context.WithCancel(context.Background())
	defer stopRequests()
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathHello, x.hello)
	mux.HandleFunc("POST "+pathRun, x.run)
	srv := &http.Server{
		Handler:           mux,
		BaseContext:       func(net.Listener) context.Context { return context.WithValue(base, baseKey{}, base) },
		ReadHeaderTimeout: 30 * time.Second,
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// Orphans that exit while no sample ends would stay zombies.
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-base.Done():
				return
			case <-t.C:
				x.proc.reaper.reapExited()
			}
		}
	})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopRequests()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	wg.Wait()
	if os.Getpid() == 1 {
		// Whatever the agents left: the container is ending.
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
	x.proc.reaper.reapExited()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (x *Executor) hello(w http.ResponseWriter, r *http.Request) {
	var req helloRequest
	if !decode(w, r, &req, maxErrorBody) {
		return
	}
	if err := checkEnvVars(req.Env); err != nil {
		http.Error(w, "env: "+err.Error(), http.StatusBadRequest)
		return
	}
	reply(w, helloResponse{Version: protocolVersion, WorkspaceRoot: x.root, Env: inspect(req.Env, x.lookup)})
}

func (x *Executor) run(w http.ResponseWriter, r *http.Request) {
	var req runRequest
	if !decode(w, r, &req, maxRunRequest) {
		return
	}
	rd, err := x.check(&req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// r.Context() ends when the runner closes the connection: its timeout or
	// its shutdown. The request's own bound stands in should that not reach us.
	ctx := r.Context()
	if req.TimeoutMillis > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMillis)*time.Millisecond)
		defer cancel()
	}
	env, secrets := resolve(req.Env, x.lookup)
	start := time.Now()
	resp, err := x.proc.inWorkspace(ctx, req.Workspace, req.SampleID, rd, env, req.MaxOutput, false)
	redact := func(s string) string { return provider.Redact(s, secrets...) }
	var out runResponse
	var exit *provider.ExitError
	switch {
	case err == nil:
		out.Stdout = []byte(redact(resp.Text))
		out.Truncated, out.FullBytes = resp.Truncated, resp.FullBytes
	case errors.As(err, &exit):
		out.Exit = &wireExit{Code: exit.ExitCode, Stderr: redact(exit.Stderr)}
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		switch {
		case r.Context().Err() == nil:
			out.Ended = endedTimeout
		case stopping(r):
			out.Ended = endedStopped
		default:
			// The runner is gone: nobody reads the answer.
			x.log.V(1).Info("The runner gave up on a sample; its agent was killed", "sample", req.SampleID, "after", time.Since(start).Round(time.Millisecond).String())
			return
		}
	default:
		out.Error = redact(err.Error())
	}
	x.log.V(1).Info("Ran a sample", "sample", req.SampleID, "took", time.Since(start).Round(time.Millisecond).String(),
		"exit", out.Exit != nil, "error", out.Error != "", "ended", out.Ended)
	reply(w, out)
}

// baseKey holds, in each request's context, the context that ends when the
// executor stops.
type baseKey struct{}

// stopping reports whether the executor is shutting down.
func stopping(r *http.Request) bool {
	base, ok := r.Context().Value(baseKey{}).(context.Context)
	return ok && base.Err() != nil
}

// check validates a run request and returns it as rendered templates. The
// runner is trusted, but the socket is in a volume the agent can write to.
func (x *Executor) check(req *runRequest) (*rendered, error) {
	ws := req.Workspace
	if !filepath.IsAbs(ws) || filepath.Clean(ws) != ws || filepath.Dir(ws) != x.root || !strings.HasPrefix(filepath.Base(ws), "proctor-ws-") {
		return nil, fmt.Errorf("workspace %q is not a proctor-ws-* directory of %s", ws, x.root)
	}
	if len(req.Argv) == 0 || len(req.Argv[0]) == 0 {
		return nil, errors.New("no program to run")
	}
	if req.MaxOutput <= 0 || req.MaxOutput > maxRunRequest {
		return nil, fmt.Errorf("max output %d is out of range", req.MaxOutput)
	}
	if err := checkEnvVars(req.Env); err != nil {
		return nil, fmt.Errorf("env: %w", err)
	}
	rd := &rendered{stdin: string(req.Stdin)}
	for _, a := range req.Argv {
		rd.argv = append(rd.argv, string(a))
	}
	for _, f := range req.Files {
		if clean, err := cleanFilePath(f.Path); err != nil || clean != f.Path {
			return nil, fmt.Errorf("file %q is not a path inside the workspace", f.Path)
		}
		rd.files = append(rd.files, renderedFile{path: f.Path, content: string(f.Content)})
	}
	return rd, nil
}

// decode reads a JSON request body whole (so that the server notices at once
// when the runner closes the connection) into v.
func decode(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
