// Package cli holds proctor's subcommands.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/proctor-dev/proctor/api/v1alpha1"

	"github.com/proctor-dev/proctor/internal/version"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1 // the run could not finish (data unreadable, disk full...)
	exitInvalid     = 2 // bad flags or a bad Evaluation: nothing was run
	exitInterrupted = 130
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func invalid(err error) error { return &exitError{code: exitInvalid, err: err} }

// streams are where a command writes; tests replace them.
type streams struct {
	out, errOut io.Writer
	// errIsTerminal tells whether errOut is a terminal (for the progress bar).
	errIsTerminal bool
}

// Execute runs proctor with args and returns the exit code.
func Execute(args []string) int {
	return execute(args, streams{out: os.Stdout, errOut: os.Stderr, errIsTerminal: isTerminal(os.Stderr)})
}

func execute(args []string, s streams) int {
	root := newRootCommand(s)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(s.errOut, "proctor:", ee.err)
		}
		return ee.code
	}
	// Cobra's own errors: unknown flags and commands.
	fmt.Fprintln(s.errOut, "proctor:", err)
	return exitInvalid
}

func newRootCommand(s streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "proctor",
		Short: "Run LLM and agent evaluations, locally or on Kubernetes",
		Long: "Proctor runs Evaluations: every model on every dataset, within concurrency and rate limits,\n" +
			"with retries, a response cache and resumable checkpoints.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	root.SetOut(s.out)
	root.SetErr(s.errOut)
	root.AddCommand(newRunCommand(s), newManagerCommand(s), newShardCommand(s), newPlanCommand(s), newInstallCommand(s), newResultsCommand(s))
	return root
}

// newScheme knows the built-in kinds and Proctor's.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	return scheme
}
