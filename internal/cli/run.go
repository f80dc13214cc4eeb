package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	"github.com/proctor-dev/proctor/internal/local"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

type runOptions struct {
	metricsAddr    string
	file           string
	output         string
	concurrency    int
	cacheDir       string
	retryErrors    bool
	restart        bool
	gracePeriod    time.Duration
	syncInterval   time.Duration
	progress       string
	keepWorkspaces bool
	estimate       bool
	// rescore and rescoreAll are proctor score's.
	rescore, rescoreAll bool
}

func newRunCommand(s streams) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [-f] EVALUATION.yaml [-o DIR]",
		Short: "Run an Evaluation locally",
		Long: `Run every model of an Evaluation on every dataset, on this machine, with the same
engine, limits, retries and cache as in a cluster.

Finished samples are checkpointed in DIR as they complete. Interrupt the run (Ctrl-C
lets samples in flight finish; a second Ctrl-C stops at once) or kill it, and the same
command resumes where it stopped. At the end DIR holds results.jsonl (one record per
sample per model, in sample order) and summary.json, and a summary table is printed.
-f - reads the Evaluation from standard input (relative paths are then the working
directory's).

Exit codes:
  0    the run finished (samples that failed are results, not failures)
  1    the run could not finish (data unreadable, disk full), or every sample failed
  2    invalid input: nothing was run, nothing was written
  3    the run missed its gate (spec.gate), or has no verdict
  4    the budget ran out: raise spec.budget and run the same command to resume
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM): run the same command to resume`,
		Example: `  proctor run -f evaluation.yaml -o out/
  proctor run -f evaluation.yaml -o out/ --concurrency 32
  proctor run -f evaluation.yaml -o out/ --retry-errors`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFile(cmd, args, o, s, "proctor run -f EVALUATION.yaml (or proctor run EVALUATION.yaml)")
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "the Evaluation manifest (YAML); - reads it from standard input")
	f.StringVarP(&o.output, "output", "o", "", "output directory, or an object store location s3://BUCKET/PREFIX (default results/NAME, NAME being the Evaluation's)")
	f.IntVar(&o.concurrency, "concurrency", 0, "samples in flight per model, overriding the file")
	f.StringVar(&o.cacheDir, "cache-dir", "", "response cache directory, used when the Evaluation enables the cache (default: the user cache dir)")
	f.BoolVar(&o.retryErrors, "retry-errors", false, "run again the samples that ended in an error last time")
	f.BoolVar(&o.restart, "restart", false, "discard the checkpoint in the output directory and start over")
	f.DurationVar(&o.gracePeriod, "grace-period", 30*time.Second, "on interrupt, how long samples in flight may take to finish")
	f.DurationVar(&o.syncInterval, "sync-interval", 10*time.Second, "with -o s3://..., how often the records are committed to the location (also at the start and the end)")
	f.StringVar(&o.progress, "progress", "auto", "progress display: auto (a bar on a terminal, else lines), bar, plain or none")
	f.BoolVar(&o.keepWorkspaces, "keep-workspaces", false, "keep agent workspaces for inspection instead of removing them")
	f.BoolVar(&o.estimate, "estimate", false, "say what the run would cost, calling no model and writing nothing: input tokens counted by the providers, answers bounded by maxTokens")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics of the run's calls and samples at http://ADDR/metrics while it runs (e.g. 127.0.0.1:9464; default: none)")
	return cmd
}

// runFile is proctor run's and proctor score's RunE: the Evaluation is -f
// FILE or the one argument (usage says how to give it), then it runs.
func runFile(cmd *cobra.Command, args []string, o *runOptions, s streams, usage string) error {
	switch {
	case len(args) == 1 && o.file != "":
		return invalid(fmt.Errorf("the Evaluation is given twice: %s and -f %s", args[0], o.file))
	case len(args) == 1:
		o.file = args[0]
	case o.file == "":
		return invalid(errors.New(`required flag(s) "file" not set: ` + usage))
	}
	// This process holds the API keys; the agents it starts run as the
	// same user.
	if err := setNonDumpable(); err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("making the process non-dumpable: %w", err)}
	}
	return runEvaluation(cmd.Context(), o, verbosityOf(cmd), s)
}

func runEvaluation(ctx context.Context, o *runOptions, verbosity int, s streams) error {
	if ctx == nil {
		ctx = context.Background()
	}
	switch o.progress {
	case "auto", "bar", "plain", "none":
	default:
		return invalid(fmt.Errorf("--progress: %q is not one of auto, bar, plain or none", o.progress))
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if o.estimate {
		return runEstimate(ctx, o, sigs, s)
	}

	var metrics *telemetry.Metrics
	if o.metricsAddr != "" {
		m, stop, err := serveMetrics(o.metricsAddr)
		if err != nil {
			return err
		}
		defer stop()
		metrics = m
	}
	res, err := local.Run(ctx, local.Options{
		Metrics:        metrics,
		File:           o.file,
		Output:         o.output,
		Concurrency:    o.concurrency,
		CacheDir:       o.cacheDir,
		RetryErrors:    o.retryErrors,
		Restart:        o.restart,
		Rescore:        o.rescore,
		RescoreAll:     o.rescoreAll,
		KeepWorkspaces: o.keepWorkspaces,
		GracePeriod:    o.gracePeriod,
		SyncInterval:   o.syncInterval,
		Interrupts:     sigs,
		Warnings:       s.errOut,
		Display: func(pairs []results.Pair, dir *results.Dir, limits map[string]float64) local.Display {
			return newProgress(o.progress, s, pairs, dir, limits, verbosity)
		},
	})
	if res == nil {
		return notStarted(err)
	}
	runErr := err

	printSummary(s.out, res.Summaries, res.Metrics)
	printCut(s.errOut, res.Summaries)
	done, total := progressTotals(res.Summaries)
	errored := erroredTotal(res.Summaries)
	if errored > 0 {
		top, err := topErrors(filepath.Join(res.Dir, results.ResultsFile), 3)
		if err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("reading the errors back: %w", err))
		}
		// On stderr: stdout holds the table alone, for scripts.
		printErrors(s.errOut, top)
		if res.EarlierErrors > 0 {
			fmt.Fprintf(s.errOut, "%d of these errors were recorded by an earlier run and kept, their samples not run again: "+
				"run the same command with --retry-errors to retry them.\n", res.EarlierErrors)
		}
	}
	if res.Location != "" {
		fmt.Fprintf(s.errOut, "Results: %s (its working copy: %s)\n", res.Location, res.Dir)
	} else {
		fmt.Fprintf(s.errOut, "Results: %s, %s\n", filepath.Join(res.Dir, results.ResultsFile), filepath.Join(res.Dir, results.SummaryFile))
	}
	if b := res.Budget; b != nil {
		fmt.Fprintf(s.errOut, "Budget: %s\n", budgetLine(b))
	}
	if res.Comparison != nil {
		printComparison(s.out, res.Comparison)
	}
	if res.Gate != nil {
		printVerdict(s.out, res.Gate)
	}

	switch {
	case runner.IsBudgetExceeded(runErr):
		msg := fmt.Sprintf("%v; %d of %d samples done: raise spec.budget and run the same command again to resume", runErr, done, total)
		return &exitError{code: exitBudget, err: errors.New(msg)}
	case runErr != nil:
		return &exitError{code: exitFailed, err: runErr}
	case res.Interrupted != nil:
		msg := fmt.Sprintf("interrupted with %d of %d samples done; run the same command again to resume", done, total)
		return &exitError{code: signalExitCode(res.Interrupted), err: errors.New(msg)}
	case done > 0 && errored == done:
		// Nothing was evaluated: a server down, a wrong model name, a bad key.
		// Scores of 0 from that must not pass for a finished run.
		if res.EarlierErrors > 0 {
			return &exitError{code: exitFailed, err: fmt.Errorf("all %d samples failed, %d of them in an earlier run (--retry-errors retries them); the most common errors are above",
				done, res.EarlierErrors)}
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("all %d samples failed; the most common errors are above", done)}
	case res.Gate != nil && res.Gate.Incomplete != "":
		return &exitError{code: exitRegression, err: fmt.Errorf("the run is incomplete (%s): no gate verdict", res.Gate.Incomplete)}
	case res.Gate != nil && !res.Gate.Passed:
		return &exitError{code: exitRegression, err: fmt.Errorf("the run missed its gate: %d rule violation(s), listed above", len(res.Gate.Violations))}
	}
	return nil
}

// signalExitCode is the shell's convention: 128 + the signal's number.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitInterrupted
}

func erroredTotal(ss []results.Summary) (n int64) {
	for _, s := range ss {
		n += s.Errored
	}
	return n
}

func progressTotals(ss []results.Summary) (done, total int64) {
	for _, s := range ss {
		done += s.Completed
		total += s.Total
	}
	return done, total
}

// newLogger logs through slog's text handler; verbosity v enables logr levels up to v.
func newLogger(w interface{ Write([]byte) (int, error) }, v int) logr.Logger {
	h := slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: slog.Level(-v),
		// A terminal user reads these as they come: the time adds nothing.
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.Attr{}
			case slog.LevelKey:
				// logr's V(n) becomes slog level -n: call all of them DEBUG.
				if l, ok := a.Value.Any().(slog.Level); ok && l < slog.LevelInfo {
					return slog.String(slog.LevelKey, "DEBUG")
				}
			}
			return a
		},
	})
	return logr.FromSlogHandler(h)
}

// budgetLine says what a run spent of its budget.
func budgetLine(b *spend.State) string {
	var parts []string
	if b.Limit.Cost > 0 {
		parts = append(parts, fmt.Sprintf("spent %s of %s", b.Spent.Cost, b.Limit.CostText()))
	}
	if b.Limit.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("used %d of %d tokens", b.Spent.Tokens, b.Limit.Tokens))
	}
	return strings.Join(parts, ", ")
}

// runEstimate prints what the run would cost.
func runEstimate(ctx context.Context, o *runOptions, sigs chan os.Signal, s streams) error {
	rows, ev, err := local.Estimate(ctx, local.Options{
		File: o.file, Concurrency: o.concurrency, CacheDir: o.cacheDir, Interrupts: sigs, Warnings: s.errOut,
	})
	if err != nil {
		return notStarted(err)
	}
	printEstimate(s.out, s.errOut, rows, ev.Spec.Budget)
	return nil
}

// notStarted is the exit of a run that did not get under way: refused
// (invalid input), interrupted while preparing, or failed.
func notStarted(err error) error {
	var invalidErr *local.InvalidError
	var interrupted *local.InterruptedError
	switch {
	case errors.As(err, &invalidErr):
		return invalid(err)
	case errors.As(err, &interrupted):
		return &exitError{code: signalExitCode(interrupted.Signal), err: err}
	}
	return &exitError{code: exitFailed, err: err}
}

// printCut says which models stopped answers at parameters.maxTokens: a
// reasoning model that spends them thinking answers nothing, and scores 0
// for it.
func printCut(w io.Writer, ss []results.Summary) {
	for _, s := range ss {
		if s.MaxTokensReached > 0 {
			fmt.Fprintf(w, "Model %s on dataset %s: %d of %d answers stopped at parameters.maxTokens (maxTokensReached in their records): "+
				"cut short, or empty; raise maxTokens to score whole answers.\n", terminalSafe(s.Model), terminalSafe(s.Dataset), s.MaxTokensReached, s.Completed)
		}
	}
}
