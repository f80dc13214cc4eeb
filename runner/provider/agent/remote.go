package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

// The protocol between a runner and its executor: JSON over HTTP on a Unix
// socket that only the pod's two containers share. Text that must reach the
// agent byte for byte (argv, stdin, files, its output) travels as []byte
// (base64 in JSON): JSON strings would replace invalid UTF-8. Nothing secret
// travels: the runner names the variables whose values the executor takes
// from its own environment, and the executor redacts them from what it
// returns.
const (
	protocolVersion = 1
	pathHello       = "/v1/hello"
	pathRun         = "/v1/run"
	// defaultConnectTimeout bounds the wait for the executor's socket: its
	// container starts alongside the runner's, or is being restarted.
	defaultConnectTimeout = 2 * time.Minute
	// maxErrorBody bounds what is read of an executor's error answer.
	maxErrorBody = 64 << 10
)

type helloRequest struct {
	Env []EnvVar `json:"env,omitempty"`
}

type helloResponse struct {
	Version       int         `json:"version"`
	WorkspaceRoot string      `json:"workspaceRoot"`
	Env           []envStatus `json:"env,omitempty"`
}

type runRequest struct {
	Workspace string     `json:"workspace"`
	SampleID  string     `json:"sampleID"`
	Argv      [][]byte   `json:"argv"`
	Stdin     []byte     `json:"stdin,omitempty"`
	Files     []wireFile `json:"files,omitempty"`
	Env       []EnvVar   `json:"env,omitempty"`
	// TimeoutMillis is what remained of the sample's time when the request
	// was sent: the executor's own bound, should the runner's cancellation
	// not reach it.
	TimeoutMillis int64 `json:"timeoutMillis,omitempty"`
	MaxOutput     int   `json:"maxOutput"`
}

type wireFile struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
}

// runResponse is a sample's outcome; at most one of Exit, Error and Ended is
// set, and none when the agent succeeded.
type runResponse struct {
	Stdout    []byte    `json:"stdout,omitempty"`
	Truncated bool      `json:"truncated,omitempty"`
	FullBytes int       `json:"fullBytes,omitempty"`
	Exit      *wireExit `json:"exit,omitempty"`
	// Error is a plain error: a command not found, a file not written.
	Error string `json:"error,omitempty"`
	// Ended says why the executor killed the agent: "timed out" (its own
	// bound) or "stopped" (the executor is shutting down).
	Ended string `json:"ended,omitempty"`
}

type wireExit struct {
	Code   int    `json:"code"`
	Stderr string `json:"stderr,omitempty"`
}

const (
	endedTimeout = "timed out"
	endedStopped = "stopped"
)

func (r *rendered) wire() (argv [][]byte, files []wireFile) {
	for _, a := range r.argv {
		argv = append(argv, []byte(a))
	}
	for _, f := range r.files {
		files = append(files, wireFile{Path: f.path, Content: []byte(f.content)})
	}
	return argv, files
}

// remote runs each sample through an executor.
type remote struct {
	cfg       ExecutorConfig
	maxOutput int
	client    *http.Client

	mu   sync.Mutex
	root string // the executor's workspace root, once connected
}

func newRemote(cfg ExecutorConfig, maxOutput int) *remote {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	socket := cfg.Socket
	return &remote{cfg: cfg, maxOutput: maxOutput, client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		// A connection per sample: an executor that went away shows as a
		// failed dial or a broken answer, never as a stale idle connection.
		DisableKeepAlives:  true,
		DisableCompression: true,
	}}}
}

// connect waits for the executor and checks the agent's environment there.
func (r *remote) connect(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.connectLocked(ctx)
}

func (r *remote) connectLocked(ctx context.Context) error {
	deadline := time.Now().Add(r.cfg.ConnectTimeout)
	for {
		hello, err := r.hello(ctx)
		if err == nil {
			if hello.Version != protocolVersion || !filepath.IsAbs(hello.WorkspaceRoot) {
				return &provider.UnavailableError{Err: fmt.Errorf("the agent executor at %s speaks protocol %d with workspace root %q; want %d",
					r.cfg.Socket, hello.Version, hello.WorkspaceRoot, protocolVersion)}
			}
			if err := envError(hello.Env); err != nil {
				return err
			}
			r.root = hello.WorkspaceRoot
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var unavailable *provider.UnavailableError
		if !errors.As(err, &unavailable) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (r *remote) hello(ctx context.Context) (*helloResponse, error) {
	var out helloResponse
	if err := r.post(ctx, pathHello, helloRequest{Env: r.cfg.Env}, &out, maxErrorBody); err != nil {
		return nil, err
	}
	return &out, nil
}

func (r *remote) workspace(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.root == "" {
		if err := r.connectLocked(ctx); err != nil {
			return "", err
		}
	}
	return filepath.Join(r.root, randomName("proctor-ws-")), nil
}

func (r *remote) launch(ctx context.Context, ws, id string, rd *rendered) (*provider.Response, error) {
	argv, files := rd.wire()
	req := runRequest{
		Workspace: ws, SampleID: id, Argv: argv, Stdin: []byte(rd.stdin), Files: files,
		Env: r.cfg.Env, MaxOutput: r.maxOutput,
	}
	if len(rd.env) > 0 {
		// The executor resolves in order, and the last value of a name wins.
		req.Env = slices.Clip(req.Env)
		for _, kv := range rd.env {
			name, value, _ := strings.Cut(kv, "=")
			req.Env = append(req.Env, EnvVar{Name: name, Value: value})
		}
	}
	if d, ok := ctx.Deadline(); ok {
		req.TimeoutMillis = max(1, time.Until(d).Milliseconds())
	}
	var out runResponse
	// base64 makes the output a third longer; the rest is small.
	if err := r.post(ctx, pathRun, req, &out, int64(r.maxOutput)*2+1<<20); err != nil {
		if ctx.Err() != nil {
			// Our own cancellation closed the connection: the executor kills
			// the agent's group when it sees it closed.
			return nil, killedError(ctx.Err())
		}
		return nil, err
	}
	switch {
	case out.Exit != nil:
		return nil, &provider.ExitError{ExitCode: out.Exit.Code, Stderr: out.Exit.Stderr}
	case out.Error != "":
		return nil, errors.New(out.Error)
	case out.Ended == endedTimeout:
		return nil, killedError(context.DeadlineExceeded)
	case out.Ended != "":
		return nil, &provider.UnavailableError{Err: fmt.Errorf("the agent executor at %s %s while the agent ran", r.cfg.Socket, out.Ended)}
	}
	resp := &provider.Response{Text: string(out.Stdout), FinishReason: "exit"}
	if out.Truncated {
		resp.Truncated, resp.FullBytes = true, out.FullBytes
	}
	return resp, nil
}

// post sends in as JSON and decodes the answer into out, reading at most
// limit bytes of it. A connection that fails (refused, reset, closed before
// the answer) is a *provider.UnavailableError; an answer that is not one is a
// plain error.
func (r *remote) post(ctx context.Context, path string, in, out any, limit int64) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("agent executor request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent-executor"+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("agent executor request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return &provider.UnavailableError{Err: fmt.Errorf("agent executor at %s: %w", r.cfg.Socket, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return fmt.Errorf("agent executor: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		// The executor went away while answering.
		return &provider.UnavailableError{Err: fmt.Errorf("agent executor at %s: reading its answer: %w", r.cfg.Socket, err)}
	}
	if int64(len(data)) > limit {
		return fmt.Errorf("agent executor: an answer longer than %d bytes", limit)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("agent executor: a malformed answer: %w", err)
	}
	return nil
}
