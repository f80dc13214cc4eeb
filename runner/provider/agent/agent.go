// Package agent evaluates a command-line agent: a coding-agent CLI, or any
// program that reads a task and prints an answer. Each sample runs as one
// subprocess in a fresh workspace directory of its own; its standard output is
// the answer.
package agent

import (
	"context"
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
	// directory.
	BaseDir string
	// Stdin, when non-empty, is a template rendered and written to the
	// process's standard input; otherwise stdin is empty (/dev/null).
	Stdin string
	// Files maps a workspace-relative path to a template of its content; each
	// is written into the sample's workspace before the process starts.
	Files map[string]string
	// Env is the process environment, exactly (name=value pairs, resolved by
	// the caller). The provider adds PROCTOR_WORKSPACE and PROCTOR_SAMPLE_ID.
	Env []string
	// WorkspaceRoot is the parent of the per-sample workspaces; "" means
	// os.TempDir(). It must exist.
	WorkspaceRoot string
	// KeepWorkspaces leaves workspaces on disk (for debugging) instead of
	// removing them.
	KeepWorkspaces bool
	// MaxOutputBytes caps captured stdout; 0 means 10 MiB. Past the cap the
	// output is truncated (not an error) and the process keeps running with
	// its writes discarded.
	MaxOutputBytes int
}

// Provider runs an agent process per request. It is safe for concurrent use:
// everything in it but the reaper (which locks) is read-only after New.
type Provider struct {
	reaper    *reaper
	baseDir   string // absolute
	tmpl      templates
	env       []string
	root      string
	keep      bool
	maxOutput int
	waitDelay time.Duration // a field so that tests can shorten or stretch it
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg and parses its templates.
func New(cfg Config) (*Provider, error) {
	tmpl, err := parseTemplates(cfg)
	if err != nil {
		return nil, err
	}
	for _, kv := range cfg.Env {
		if i := strings.IndexByte(kv, '='); i <= 0 {
			return nil, fmt.Errorf("env: %q is not a name=value pair", kv)
		}
	}
	if cfg.MaxOutputBytes < 0 {
		return nil, fmt.Errorf("max output bytes: %d is negative", cfg.MaxOutputBytes)
	}
	maxOutput := cfg.MaxOutputBytes
	if maxOutput == 0 {
		maxOutput = defaultMaxOutputBytes
	}
	root := cfg.WorkspaceRoot
	if root == "" {
		root = os.TempDir()
	}
	// Templates see .Workspace and the agent sees PROCTOR_WORKSPACE; both are
	// promised absolute, and the agent's cwd differs from ours.
	if root, err = filepath.Abs(root); err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	baseDir, err := filepath.Abs(cfg.BaseDir)
	if err != nil {
		return nil, fmt.Errorf("base dir: %w", err)
	}
	if !cfg.KeepWorkspaces {
		removeStaleWorkspaces(root)
	}
	return &Provider{
		reaper:    newReaper(),
		baseDir:   baseDir,
		tmpl:      tmpl,
		env:       cfg.Env,
		root:      root,
		keep:      cfg.KeepWorkspaces,
		maxOutput: maxOutput,
		waitDelay: defaultWaitDelay,
	}, nil
}

// Complete runs the agent on one sample in a fresh workspace and returns its
// standard output as the answer.
//
// Errors: a template that fails on this sample, or a command that cannot be
// started, is a plain error; a process that exits non-zero is a
// *provider.ExitError; when ctx is done first the whole process group is
// killed and the error wraps ctx.Err().
func (p *Provider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	// Don't create a workspace for a sample whose time is already up.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Named after our PID, so that the next proctor can tell a workspace left
	// by a kill -9 from one in use; kept ones are named apart, never removed.
	pattern := workspacePrefix() + "*"
	if p.keep {
		pattern = "proctor-ws-keep-*"
	}
	ws, err := os.MkdirTemp(p.root, pattern)
	if err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	if !p.keep {
		// Deferred so that it runs on every path, including kills. By then the
		// process group is dead, so nothing is still writing into the directory.
		defer removeWorkspace(ws)
	}

	r, err := p.tmpl.render(TemplateData{
		Prompt:    req.Prompt,
		System:    req.System,
		Sample:    req.Sample,
		ID:        req.SampleID,
		Workspace: ws,
	})
	if err != nil {
		return nil, err
	}
	if err := writeFiles(ws, r.files); err != nil {
		return nil, err
	}
	return p.run(ctx, ws, req.SampleID, r)
}

// writeFiles writes the rendered files into the workspace. Paths were
// validated by New, so they stay inside ws.
func writeFiles(ws string, files []renderedFile) error {
	for _, f := range files {
		full := filepath.Join(ws, f.path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("write workspace file %q: %w", f.path, err)
		}
		if err := os.WriteFile(full, []byte(f.content), 0o644); err != nil {
			return fmt.Errorf("write workspace file %q: %w", f.path, err)
		}
	}
	return nil
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
