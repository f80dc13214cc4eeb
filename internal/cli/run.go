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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/evalfile"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/provider/agent"
	"github.com/proctor-dev/proctor/runner/results"
)

type runOptions struct {
	file           string
	output         string
	concurrency    int
	cacheDir       string
	retryErrors    bool
	restart        bool
	gracePeriod    time.Duration
	progress       string
	keepWorkspaces bool
}

func newRunCommand(s streams) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run -f EVALUATION.yaml [-o DIR]",
		Short: "Run an Evaluation locally",
		Long: `Run every model of an Evaluation on every dataset, on this machine, with the same
engine, limits, retries and cache as in a cluster.

Finished samples are checkpointed in DIR as they complete. Interrupt the run (Ctrl-C
lets samples in flight finish; a second Ctrl-C stops at once) or kill it, and the same
command resumes where it stopped. At the end DIR holds results.jsonl (one record per
sample per model, in sample order) and summary.json, and a summary table is printed.`,
		Example: `  proctor run -f evaluation.yaml -o out/
  proctor run -f evaluation.yaml -o out/ --concurrency 32
  proctor run -f evaluation.yaml -o out/ --retry-errors`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// This process holds the API keys; the agents it starts run as the
			// same user.
			if err := setNonDumpable(); err != nil {
				return &exitError{code: exitFailed, err: fmt.Errorf("making the process non-dumpable: %w", err)}
			}
			return runEvaluation(cmd.Context(), o, verbosityOf(cmd), s)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "file", "f", "", "the Evaluation manifest (YAML)")
	f.StringVarP(&o.output, "output", "o", "", "output directory (default results/NAME, NAME being the Evaluation's)")
	f.IntVar(&o.concurrency, "concurrency", 0, "samples in flight per model, overriding the file")
	f.StringVar(&o.cacheDir, "cache-dir", "", "response cache directory, used when the Evaluation enables the cache (default: the user cache dir)")
	f.BoolVar(&o.retryErrors, "retry-errors", false, "run again the samples that ended in an error last time")
	f.BoolVar(&o.restart, "restart", false, "discard the checkpoint in the output directory and start over")
	f.DurationVar(&o.gracePeriod, "grace-period", 30*time.Second, "on interrupt, how long samples in flight may take to finish")
	f.StringVar(&o.progress, "progress", "auto", "progress display: auto (a bar on a terminal, else lines), bar, plain or none")
	f.BoolVar(&o.keepWorkspaces, "keep-workspaces", false, "keep agent workspaces for inspection instead of removing them")
	_ = cmd.MarkFlagRequired("file")
	return cmd
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
	if o.concurrency < 0 || o.concurrency > v1alpha1.MaxConcurrency {
		return invalid(fmt.Errorf("--concurrency: must be between 1 and %d", v1alpha1.MaxConcurrency))
	}

	ev, err := evalfile.Load(o.file)
	if err != nil {
		return invalid(err)
	}
	name := ev.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(o.file), filepath.Ext(o.file))
		if name == "" || name == "." || name == ".." {
			name = "evaluation" // "...yaml" must not make results/.. the output
		}
	}
	outDir := o.output
	if outDir == "" {
		outDir = filepath.Join("results", name)
	}
	cacheDir := o.cacheDir
	if cacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cacheDir = filepath.Join(base, "proctor", "responses")
	}

	// Signals: the first stops taking samples and lets those in flight finish
	// within the grace period; the second, or the period's end, stops at once.
	// Before the run starts, the first stops the preparation.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// Nothing is written until the Evaluation has passed every check: invalid
	// input leaves no trace, and --restart discards nothing for a run that
	// cannot start. Downloads go to a directory of this process's own, removed
	// at the end (or by the next run, after a kill -9).
	dataDir := filepath.Join(os.TempDir(), dataDirPrefix+strconv.Itoa(os.Getpid()))
	removeStaleDataDirs(os.TempDir())
	// What agents of a proctor killed with -9 started lives on (its agents died
	// with it): any run ends them, whether or not it has agents of its own.
	reportLeftovers(s.errOut, agent.KillLeftovers())
	defer os.RemoveAll(dataDir)

	var prepSig os.Signal
	prepCtx, prepDone := context.WithCancel(runCtx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case prepSig = <-sigs:
			prepDone()
		case <-prepCtx.Done():
		}
	}()
	plan, err := compile.Build(prepCtx, ev, compile.Env{
		BaseDir:        filepath.Dir(o.file),
		DataDir:        dataDir,
		CacheDir:       cacheDir,
		KeepWorkspaces: o.keepWorkspaces,
		Concurrency:    o.concurrency,
	})
	prepDone()
	<-watched
	if prepSig != nil {
		return &exitError{code: signalExitCode(prepSig), err: errors.New("interrupted before the run started; nothing was run")}
	}
	if err != nil {
		return invalid(fmt.Errorf("%s: %w", o.file, err))
	}

	// The engine's own checks, before anything is written (the real engine
	// needs the progress display, which needs the checkpoint).
	if _, err := runner.New(plan, runner.Options{Log: logr.Discard()}); err != nil {
		return invalid(err)
	}

	dir, err := results.OpenDir(outDir)
	if err != nil {
		return invalid(fmt.Errorf("output directory: %w", err))
	}
	defer dir.Unlock()
	defer dir.Close()
	if o.restart {
		if err := dir.Reset(); err != nil {
			return fmt.Errorf("--restart: %w", err)
		}
	}

	tasks := plan.Tasks()
	pairs := make([]results.Pair, len(tasks))
	for i, t := range tasks {
		m, d := plan.Model(t.Model), plan.Dataset(t.Dataset)
		pairs[i] = results.Pair{Model: m.Name, Dataset: d.Name, Fingerprint: plan.CheckpointFingerprint(m, d), Total: d.Total, Metrics: plan.MetricNames()}
		if _, err := dir.Open(pairs[i], o.retryErrors); err != nil {
			if errors.Is(err, results.ErrMismatch) {
				return invalid(fmt.Errorf("%w; use another output directory, or --restart to discard it", err))
			}
			return err
		}
	}

	prog := newProgress(o.progress, s, pairs, dir)
	log := newLogger(prog.logWriter(), verbosity)
	for _, m := range plan.Models {
		if m.JudgeOnly {
			log.Info("Using a model as judge only", "model", m.Name)
		}
	}
	eng, err := runner.New(plan, runner.Options{Log: log, Observer: prog})
	if err != nil {
		return invalid(err)
	}
	prog.throttle = eng.Throttle

	var interrupted os.Signal
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case sig := <-sigs:
			interrupted = sig
			eng.Stop()
			prog.note(fmt.Sprintf("Stopping: samples in flight may finish within %v (interrupt again to stop now).", o.gracePeriod))
			t := time.NewTimer(o.gracePeriod)
			defer t.Stop()
			select {
			case <-sigs:
			case <-t.C:
			case <-runCtx.Done():
			}
			cancel()
		case <-runCtx.Done():
		}
	}()

	prog.start()
	runErr := eng.Run(runCtx, tasks, dir)
	cancel()
	<-stopped
	prog.stop()

	if err := dir.Close(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	summaries, err := dir.Assemble(pairs)
	if err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("writing results: %w", errors.Join(runErr, err))}
	}
	printSummary(s.out, summaries, plan.MetricNames())
	done, total := progressTotals(summaries)
	errored := erroredTotal(summaries)
	if errored > 0 {
		top, err := topErrors(filepath.Join(outDir, results.ResultsFile), 3)
		if err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("reading the errors back: %w", err))
		}
		// On stderr: stdout holds the table alone, for scripts.
		printErrors(s.errOut, top)
	}
	fmt.Fprintf(s.errOut, "Results: %s, %s\n", filepath.Join(outDir, results.ResultsFile), filepath.Join(outDir, results.SummaryFile))

	switch {
	case runErr != nil:
		return &exitError{code: exitFailed, err: runErr}
	case interrupted != nil:
		msg := fmt.Sprintf("interrupted with %d of %d samples done; run the same command again to resume", done, total)
		return &exitError{code: signalExitCode(interrupted), err: errors.New(msg)}
	case done > 0 && errored == done:
		// Nothing was evaluated: a server down, a wrong model name, a bad key.
		// Scores of 0 from that must not pass for a finished run.
		return &exitError{code: exitFailed, err: fmt.Errorf("all %d samples failed; the most common errors are above", done)}
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

// dataDirPrefix names the directories that hold a run's downloaded datasets:
// the prefix and the owner's PID.
const dataDirPrefix = "proctor-data-"

// removeStaleDataDirs removes the download directories of proctor processes
// that no longer exist (killed with -9, which runs no deferred cleanup).
func removeStaleDataDirs(tmp string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), dataDirPrefix))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dataDirPrefix) || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		// Signal 0 checks existence; EPERM means the PID is alive (someone else's).
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
		}
	}
}

// reportLeftovers says which processes of dead proctors' agents were killed, one
// line per dead proctor.
func reportLeftovers(w io.Writer, killed []agent.Leftover) {
	byOwner := map[int][]string{}
	var owners []int
	for _, l := range killed {
		if _, ok := byOwner[l.Owner]; !ok {
			owners = append(owners, l.Owner)
		}
		byOwner[l.Owner] = append(byOwner[l.Owner], strconv.Itoa(l.PID))
	}
	slices.Sort(owners)
	for _, o := range owners {
		fmt.Fprintf(w, "Killed processes left running by the agents of proctor %d, which was killed: PID %s\n", o, strings.Join(byOwner[o], ", "))
	}
}
