// Package agent evaluates a command-line agent: a coding-agent CLI, or any
// program that reads a task and prints an answer. Each sample runs as one
// process in a fresh workspace directory of its own; its standard output is
// the answer.
//
// The process is started by a launcher: as a subprocess of this process
// (local runs, tests), or by an executor (`proctor agent-exec`) in the agent's
// own container, reached over a Unix socket (runner pods), so that the agent
// shares nothing with the process that holds the judges' keys. The templates
// are rendered here either way; the launchers differ only in where the
// workspace, the files and the process live.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

const (
	// defaultMaxOutputBytes caps captured stdout when Config.MaxOutputBytes is 0.
	defaultMaxOutputBytes = 10 << 20

	// defaultWaitDelay bounds how long we wait for the agent's pipes to close
	// once the process group has been killed. Only a process that left the group
	// (setsid, double fork into a new session) can hold them open that long.
	defaultWaitDelay = 2 * time.Second
)

// Config describes how to run the agent for one sample. The templates are Go
// text/template sources (with missingkey=error) executed against TemplateData.
type Config struct {
	// Command is the argv; each element is a template rendered per sample.
	// Command[0] is looked up in PATH when it holds no slash; a relative path
	// with a slash is taken relative to BaseDir (not the workspace).
	Command []string
	// BaseDir resolves a relative command path (./agent.sh, bin/agent): the
	// Evaluation file's directory, as for data files. "" means the current
	// directory. Through an executor, the executor's working directory.
	BaseDir string
	// Stdin, when non-empty, is a template rendered and written to the
	// process's standard input; otherwise stdin is empty (/dev/null).
	Stdin string
	// Files maps a workspace-relative path to a template of its content; each
	// is written into the sample's workspace before the process starts.
	Files map[string]string
	// Env is the process environment, exactly (name=value pairs, resolved by
	// the caller). The provider adds PROCTOR_WORKSPACE and PROCTOR_SAMPLE_ID.
	// Not used through an executor (see Executor.Env).
	Env []string
	// WorkspaceRoot is the parent of the per-sample workspaces; "" means
	// os.TempDir(). It must exist. Through an executor, the executor's.
	WorkspaceRoot string
	// KeepWorkspaces leaves workspaces on disk (for debugging) instead of
	// removing them. Local only.
	KeepWorkspaces bool
	// MaxOutputBytes caps captured stdout; 0 means 10 MiB. Past the cap the
	// output is truncated (not an error) and the process keeps running with
	// its writes discarded.
	MaxOutputBytes int
	// Executor, when set, runs the agent through the executor listening on a
	// Unix socket instead of as a subprocess.
	Executor *ExecutorConfig
	// OutputFormat is what the agent prints: its answer (text, the
	// default), or a report its answer and usage are read from.
	OutputFormat Format
}

// ExecutorConfig says how to reach an executor and what environment the
// agent gets from it.
type ExecutorConfig struct {
	// Socket is the path of the executor's Unix socket.
	Socket string
	// Env is the agent's environment, in order (a later entry of a name wins).
	// Values that come from the executor's own environment never pass
	// through this process.
	Env []EnvVar
	// ConnectTimeout bounds how long Connect waits for the executor to
	// listen; 0 means 2 minutes.
	ConnectTimeout time.Duration
}

// launcher runs one rendered sample in a fresh workspace and returns its
// outcome, with the error semantics of Provider.Complete.
type launcher interface {
	// workspace returns the absolute path of a new sample's workspace, for the
	// templates (.Workspace); launch creates it.
	workspace(ctx context.Context) (string, error)
	// launch creates the workspace, writes the files, runs the process and
	// removes the workspace (unless it is kept).
	launch(ctx context.Context, ws, id string, r *rendered) (*provider.Response, error)
}

// Provider runs an agent process per request. It is safe for concurrent use.
type Provider struct {
	tmpl   templates
	launch launcher
	format Format
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg and parses its templates. It does not reach the executor:
// Connect does, and so does the first Complete.
func New(cfg Config) (*Provider, error) {
	tmpl, err := parseTemplates(cfg)
	if err != nil {
		return nil, err
	}
	if err := cfg.OutputFormat.check(); err != nil {
		return nil, err
	}
	if cfg.MaxOutputBytes < 0 {
		return nil, fmt.Errorf("max output bytes: %d is negative", cfg.MaxOutputBytes)
	}
	maxOutput := cfg.MaxOutputBytes
	if maxOutput == 0 {
		maxOutput = defaultMaxOutputBytes
	}
	if x := cfg.Executor; x != nil {
		if x.Socket == "" {
			return nil, errors.New("executor: no socket")
		}
		if err := checkEnvVars(x.Env); err != nil {
			return nil, fmt.Errorf("env: %w", err)
		}
		return &Provider{tmpl: tmpl, launch: newRemote(*x, maxOutput), format: cfg.OutputFormat}, nil
	}
	for _, kv := range cfg.Env {
		if i := strings.IndexByte(kv, '='); i <= 0 {
			return nil, fmt.Errorf("env: %q is not a name=value pair", kv)
		}
	}
	l, err := newLocal(cfg, maxOutput)
	if err != nil {
		return nil, err
	}
	return &Provider{tmpl: tmpl, launch: l, format: cfg.OutputFormat}, nil
}

// Connect waits for the executor to listen (bounded by
// ExecutorConfig.ConnectTimeout) and checks that the variables the agent
// needs from it are set (an *EnvError names one that is not). An executor
// that cannot be reached is a *provider.UnavailableError. Without an executor
// it does nothing.
func (p *Provider) Connect(ctx context.Context) error {
	if r, ok := p.launch.(*remote); ok {
		return r.connect(ctx)
	}
	return nil
}

// Complete runs the agent on one sample in a fresh workspace and returns its
// standard output as the answer, or the answer and usage its output reports
// (Config.OutputFormat).
//
// Errors: a template that fails on this sample, or a command that cannot be
// started, is a plain error; a process that exits non-zero is a
// *provider.ExitError, and one whose report cannot be read or says it failed
// an *OutputError; when ctx is done first the whole process group is
// killed and the error wraps ctx.Err(). An executor that cannot be reached, or
// that went away mid-run, is a *provider.UnavailableError: not the sample's
// fault.
func (p *Provider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	// Don't create a workspace for a sample whose time is already up.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ws, err := p.launch.workspace(ctx)
	if err != nil {
		return nil, err
	}
	r, err := p.tmpl.render(TemplateData{
		Prompt:    req.Prompt,
		System:    req.System,
		Sample:    req.Sample,
		ID:        req.SampleID,
		Workspace: ws,
		Slot:      req.Slot,
		Slots:     req.Slots,
		Model:     req.Model,
		Dataset:   req.Dataset,
	})
	if err != nil {
		return nil, err
	}
	r.env = req.Env
	resp, err := p.launch.launch(ctx, ws, req.SampleID, r)
	if err != nil {
		return nil, err
	}
	if err := readOutput(p.format, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// randomName returns prefix followed by 16 random hex digits: workspace names
// nobody can guess, so that an agent cannot prepare one for another sample.
func randomName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return prefix + hex.EncodeToString(b[:])
}

// makeWorkspace creates the workspace ws, which must not exist yet.
func makeWorkspace(ws string) error {
	if err := os.Mkdir(ws, 0o700); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	return nil
}

// writeFiles writes the rendered files into the workspace. Paths were
// validated by New, so they stay inside ws; they are written through an
// os.Root and never over an existing file, so that a symlink another agent
// planted in the fresh workspace cannot lead a write out of it.
func writeFiles(ws string, files []renderedFile) error {
	if len(files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	for _, f := range files {
		if err := writeFile(root, f); err != nil {
			return fmt.Errorf("write workspace file %q: %w", f.path, err)
		}
	}
	return nil
}

func writeFile(root *os.Root, f renderedFile) error {
	if dir := filepath.Dir(f.path); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	out, err := root.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := out.WriteString(f.content); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// removeWorkspace deletes a workspace, best effort. A failure is not reported:
// the sample's result is already decided and must not depend on cleanup.
func removeWorkspace(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	// Agents and their tools (the Go module cache, for one) leave read-only
	// directories whose entries cannot be unlinked. Make every directory
	// writable and try once more. WalkDir visits a directory before reading
	// it, so even an unreadable one is fixed in time.
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir) // if this fails too, the directory leaks
}
