package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/proctor-dev/proctor/runner/provider/agent"
)

// newAgentExecCommand is what the agent container of an agent pod runs (a
// native sidecar, PID 1 of its container): it runs the agent for each sample
// the runner sends over the socket, in the agent's image, with only what the
// agent was given.
func newAgentExecCommand(s streams) *cobra.Command {
	var socket, root string
	cmd := &cobra.Command{
		Use:    "agent-exec --socket PATH",
		Short:  "Run an agent pod's agents for its runner (what agent containers run)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				return invalid(errors.New("--socket is required"))
			}
			log := newLogger(s.errOut, verbosityOf(cmd))
			// The agent's HOME and TMPDIR are directories of an emptyDir that
			// the pod names; they must exist before the first agent starts.
			for _, name := range []string{"HOME", "TMPDIR"} {
				if dir := os.Getenv(name); dir != "" && filepath.IsAbs(dir) {
					if err := os.MkdirAll(dir, 0o700); err != nil {
						log.Error(err, "Cannot create the agent's directory", "variable", name)
					}
				}
			}
			x, err := agent.NewExecutor(agent.ExecutorOptions{WorkspaceRoot: root, Log: log})
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			l, err := agent.Listen(socket)
			if err != nil {
				return &exitError{code: exitFailed, err: fmt.Errorf("listening on %s: %w", socket, err)}
			}
			// SIGTERM comes when the runner is done (the kubelet stops a
			// native sidecar after the pod's main container): a clean exit.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log.Info("Serving agents", "socket", socket, "workspaceRoot", root, "pid", os.Getpid())
			if err := x.Serve(ctx, l); err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&socket, "socket", "", "the Unix socket the runner connects to")
	f.StringVar(&root, "workspace-root", filepath.Join(os.TempDir(), "proctor-workspaces"), "where samples' workspaces are made (emptied at start)")
	return cmd
}
