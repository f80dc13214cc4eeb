package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/proctor-dev/proctor/runner/provider"
)

// local runs each sample as a subprocess of this process.
type local struct {
	proc      *processes
	env       []string
	root      string // absolute
	keep      bool
	maxOutput int
}

func newLocal(cfg Config, maxOutput int) (*local, error) {
	root := cfg.WorkspaceRoot
	if root == "" {
		root = os.TempDir()
	}
	// Templates see .Workspace and the agent sees PROCTOR_WORKSPACE; both are
	// promised absolute, and the agent's cwd differs from ours.
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	proc, err := newProcesses(cfg.BaseDir)
	if err != nil {
		return nil, err
	}
	if !cfg.KeepWorkspaces {
		removeStaleWorkspaces(root)
	}
	return &local{proc: proc, env: cfg.Env, root: root, keep: cfg.KeepWorkspaces, maxOutput: maxOutput}, nil
}

func (l *local) workspace(context.Context) (string, error) {
	// Named after our PID, so that the next proctor can tell a workspace left
	// by a kill -9 from one in use; kept ones are named apart, never removed.
	prefix := workspacePrefix()
	if l.keep {
		prefix = "proctor-ws-keep-"
	}
	return filepath.Join(l.root, randomName(prefix)), nil
}

func (l *local) launch(ctx context.Context, ws, id string, r *rendered) (*provider.Response, error) {
	env := l.env
	if len(r.env) > 0 {
		// os/exec keeps the last value of a name: the sample's win.
		env = append(slices.Clip(env), r.env...)
	}
	return l.proc.inWorkspace(ctx, ws, id, r, env, l.maxOutput, l.keep)
}

// processes starts agent processes and reaps what they leave behind: the part
// of a launcher that the executor shares with local runs.
type processes struct {
	reaper    *reaper
	baseDir   string        // absolute
	waitDelay time.Duration // a field so that tests can shorten or stretch it
}

func newProcesses(baseDir string) (*processes, error) {
	abs, err := filepath.Abs(baseDir)
	if err != nil {
		return nil, fmt.Errorf("base dir: %w", err)
	}
	return &processes{reaper: newReaper(), baseDir: abs, waitDelay: defaultWaitDelay}, nil
}

// inWorkspace creates the workspace ws, writes the files into it, runs the
// agent there with exactly env (plus PROCTOR_WORKSPACE and PROCTOR_SAMPLE_ID)
// and removes the workspace, unless keep.
func (p *processes) inWorkspace(ctx context.Context, ws, id string, r *rendered, env []string, maxOutput int, keep bool) (*provider.Response, error) {
	if err := makeWorkspace(ws); err != nil {
		return nil, err
	}
	if !keep {
		// Deferred so that it runs on every path, including kills. By then the
		// process group is dead, so nothing is still writing into the directory.
		defer removeWorkspace(ws)
	}
	if err := writeFiles(ws, r.files); err != nil {
		return nil, err
	}
	return p.run(ctx, ws, id, r, env, maxOutput)
}
