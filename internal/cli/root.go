// Package cli holds proctor's subcommands.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/proctor-dev/proctor/api/v1alpha1"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/version"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = cluster.ExitFailed  // the run could not finish (data unreadable, disk full...)
	exitInvalid = cluster.ExitInvalid // bad flags or a bad Evaluation: nothing was run
	// exitBudget: the budget ran out before every sample was done (raise it
	// and run again to resume).
	exitBudget      = 4
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
	root.SetArgs(normalizeArgs(args))
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			// Errors may quote a model server or the data (a 429's body).
			fmt.Fprintln(s.errOut, "proctor:", terminalSafeLines(ee.err.Error()))
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
	// Persistent, so that -v works before the subcommand as well as among its flags.
	v := verbosity(0)
	f := root.PersistentFlags().VarPF(&v, "verbosity", "v", "log verbosity of proctor run: -v every retry, -vv debug (or -v N)")
	f.NoOptDefVal = "+1"
	root.AddCommand(newRunCommand(s), newScoreCommand(s), newManagerCommand(s), newShardCommand(s), newPlanCommand(s), newInstallCommand(s),
		newAgentExecCommand(s), newResultsCommand(s), newCompareCommand(s), newViewCommand(s))
	return root
}

// newScheme knows the built-in kinds and Proctor's.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	return scheme
}

// verbosity is a level that a bare -v raises by one (-vv is 2) and -v N sets.
// A bare -v must not take a value: as an int flag, "-v -f x" made "-f" its value.
type verbosity int

// maxVerbosity is the highest level that logs anything more.
const maxVerbosity = 2

func (v *verbosity) String() string { return strconv.Itoa(int(*v)) }
func (v *verbosity) Type() string   { return "count" }

func (v *verbosity) Set(s string) error {
	if s == "+1" {
		*v = min(*v+1, maxVerbosity)
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a level from 0 to %d", s, maxVerbosity)
	}
	*v = verbosity(min(n, maxVerbosity))
	return nil
}

// verbosityOf returns the -v level given to cmd (or to proctor before it).
func verbosityOf(cmd *cobra.Command) int {
	if f := cmd.Flag("verbosity"); f != nil {
		if v, ok := f.Value.(*verbosity); ok {
			return int(*v)
		}
	}
	return 0
}

// normalizeArgs joins "-v N" and "--verbosity N" into "-v=N". A flag whose
// value is optional takes it only after "=", so without this "-v 2" would
// leave "2" as an argument; no proctor command takes a bare number as one.
func normalizeArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if (a == "-v" || a == "--verbosity") && i+1 < len(args) && isDigits(args[i+1]) {
			out = append(out, a+"="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
