// Package local is the local driver: it runs an Evaluation file on this
// machine (proctor run), as internal/shard runs one shard in a runner pod,
// around the same engine. It checks everything before it writes anything,
// keeps the checkpoint in a results directory, drains on the user's first
// interrupt and assembles results.jsonl and summary.json at the end of every
// run, interrupted ones included. Printing and exit codes are internal/cli's.
package local

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/estimate"
	"github.com/proctor-dev/proctor/internal/evalfile"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/services"
	"github.com/proctor-dev/proctor/internal/version"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/agent"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// Options say what to run and how.
type Options struct {
	// File is the Evaluation manifest; StdinFile reads it from Stdin.
	File string
	// Metrics, when set, count the run's calls, samples and throttling.
	Metrics *telemetry.Metrics
	// Stdin is where File "-" is read from; nil means os.Stdin.
	Stdin io.Reader
	// Output is the results directory; empty means results/NAME, NAME being the
	// Evaluation's (or the file's). An s3://BUCKET/PREFIX location keeps the
	// results in an object store (the standard AWS environment says how to
	// reach it), through a working copy in the user's cache directory.
	Output string
	// SyncInterval is how often a run writing to a location commits what it
	// recorded (default 10 s); it also commits at its start and end.
	SyncInterval time.Duration
	// Concurrency, when positive, overrides every model's.
	Concurrency int
	// CacheDir holds the response cache when the Evaluation enables it; empty
	// means the user's cache directory.
	CacheDir string
	// RetryErrors runs again the samples that ended in an error last time.
	RetryErrors bool
	// Restart discards the checkpoint in the output directory.
	Restart bool
	// Rescore scores every answer in the output directory again with the
	// file's scoring, calling no model under evaluation, only judges; a
	// sample without an answer is left as it is (proctor score). The scores
	// of scorers unchanged since, which succeeded, are kept unless RescoreAll.
	Rescore, RescoreAll bool
	// KeepWorkspaces keeps agent workspaces for inspection.
	KeepWorkspaces bool
	// GracePeriod is how long samples in flight may take to finish once the
	// run drains.
	GracePeriod time.Duration
	// Interrupts are the user's interrupts. Before the run starts, the first
	// stops the preparation; during the run, the first drains it and the
	// second stops it at once. Nil: none.
	Interrupts <-chan os.Signal
	// Display, when set, shows the run's progress; it is made once the
	// checkpoint is open, with the model × dataset pairs and their counts so far.
	// limits are the samples a second each model's declared requests limit
	// allows (its own, or its endpoint's), for the ETA.
	Display func(pairs []results.Pair, dir *results.Dir, limits map[string]float64) Display
	// CancelWait bounds how long --restart waits for the earlier run's
	// batches to finish cancelling (default 30 minutes).
	CancelWait time.Duration
	// Warnings receives notices for the user (processes of killed runs'
	// agents ended); nil discards them.
	Warnings io.Writer
}

// Display shows a run's progress.
type Display interface {
	runner.Observer
	// Log is the run's logger, writing where it does not disturb the display.
	Log() logr.Logger
	// Start begins showing progress; throttle says whether a model is being
	// rate limited.
	Start(throttle func(model string) runner.ThrottleStatus)
	// Note tells the user something without disturbing the display.
	Note(msg string)
	// Stop ends the display.
	Stop()
}

// Result is what a run that reached its end wrote.
type Result struct {
	// Dir is the results directory (results.jsonl, summary.json): a
	// location's working copy when Location is set.
	Dir string
	// Location is the s3:// location the results were committed to, if any.
	Location string
	// Summaries are the model × dataset summaries, in the spec's order.
	Summaries []results.Summary
	// Metrics are the scorers' metric names.
	Metrics []string
	// Interrupted is the interrupt that drained the run, if one did.
	Interrupted os.Signal
	// Budget is the budget's state at the end, when the run has one.
	Budget *spend.State
	// Comparison compares the run with spec.baseline, when it has one.
	Comparison *compare.Report
	// Gate is spec.gate's verdict, when the run has a gate.
	Gate *compare.Verdict
	// EarlierErrors counts the errored records an earlier run left, which
	// this one kept (without RetryErrors) instead of running their samples.
	EarlierErrors int64
	// Rescoring lists the pairs whose earlier answers were scored again
	// (the scoring changed, or Rescore), and why.
	Rescoring []results.Rescoring
}

// InvalidError is a problem with the input: nothing was run or written.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// InterruptedError says the user interrupted the run before it started.
type InterruptedError struct{ Signal os.Signal }

func (e *InterruptedError) Error() string {
	return "interrupted before the run started; nothing was run"
}

// Run runs the Evaluation of o.File. It returns an *InvalidError (nothing
// run), an *InterruptedError (interrupted while preparing), or a Result once
// results were written, with the run's error if it could not finish.
func Run(ctx context.Context, o Options) (*Result, error) {
	pr, err := prepare(ctx, o)
	if err != nil {
		return nil, err
	}
	defer pr.cleanup()
	ev, plan, svcs, outDir := pr.ev, pr.plan, pr.services, pr.outDir
	for _, d := range plan.Datasets {
		for _, w := range d.Warnings {
			fmt.Fprintf(warnings(o), "Warning: %s\n", w)
		}
	}
	// The engine's own checks, before anything is written (the real engine
	// needs the display, which needs the checkpoint).
	if _, err := runner.New(plan, runner.Options{Log: logr.Discard()}); err != nil {
		return nil, &InvalidError{err}
	}
	// Files the process cannot open would fail samples for a reason that is
	// not the model's.
	if err := runner.EnsureOpenFiles(plan); err != nil {
		return nil, &InvalidError{fmt.Errorf("concurrency (spec.concurrency, a model's concurrency, --concurrency): %w", err)}
	}

	if err := checkOutputs(plan, outDir); err != nil {
		return nil, &InvalidError{err}
	}
	// proctor score of results without a checkpoint (fetched from a
	// cluster by proctor results) scores the answers results.jsonl holds.
	importing := false
	if o.Rescore && pr.location == "" {
		if _, err := os.Stat(filepath.Join(outDir, results.CheckpointDir)); err != nil {
			if _, err2 := os.Stat(filepath.Join(outDir, results.ResultsFile)); err2 != nil {
				return nil, &InvalidError{fmt.Errorf("%s holds neither a checkpoint of a run nor a results.jsonl: nothing to score; proctor run answers the samples", outDir)}
			}
			importing = true
		}
	}
	dir, err := results.OpenDir(outDir)
	if err != nil {
		return nil, &InvalidError{fmt.Errorf("output directory: %w", err)}
	}
	defer func() { _ = dir.Unlock() }() // releasing the lock of a directory left as it is
	defer dir.Close()
	var mirror *objects.Mirror
	if pr.location != "" {
		// With the working copy locked: another run of this machine cannot
		// be using it.
		if mirror, err = openLocation(ctx, pr.location, outDir); err != nil {
			return nil, err
		}
	}
	tasks := plan.Tasks()
	pairs := make([]results.Pair, len(tasks))
	for i, t := range tasks {
		m, d := plan.Model(t.Model), plan.Dataset(t.Dataset)
		pairs[i] = results.Pair{Model: m.Name, Dataset: d.Name, Fingerprint: plan.CheckpointFingerprint(m, d), Parts: plan.Parts(m, d),
			Total: d.Total, Metrics: plan.MetricNames(), Priced: m.Price != nil}
	}
	if importing {
		n, err := importAnswers(plan, pairs, dir, warnings(o))
		if err != nil {
			return nil, &InvalidError{fmt.Errorf("reading the answers of %s: %w", filepath.Join(outDir, results.ResultsFile), err)}
		}
		fmt.Fprintf(warnings(o), "Read %d answers from %s, to score with this Evaluation's scoring.\n", n, filepath.Join(outDir, results.ResultsFile))
	}
	if o.Rescore {
		if err := dir.HasAnswers(pairs); err != nil {
			return nil, &InvalidError{fmt.Errorf("%w: nothing to score; proctor run answers the samples", err)}
		}
	}
	if o.Restart {
		// Check first, then act: nothing is cancelled or discarded for a
		// restart that cannot complete.
		if err := dir.CanReset(); err != nil {
			return nil, &InvalidError{fmt.Errorf("--restart: %w; nothing was discarded", err)}
		}
		cancelBatches(ctx, plan, dir, warnings(o), cmp.Or(o.CancelWait, 30*time.Minute))
		if err := dir.Reset(); err != nil {
			return nil, fmt.Errorf("--restart: %w", err)
		}
		if mirror != nil {
			mirror.Restarted()
		}
	} else if err := dir.Check(pairs); err != nil {
		advice := "use another output directory (-o), or --restart to discard them"
		if errors.Is(err, results.ErrMismatch) {
			advice = "use another output directory (-o), or --restart to discard them and call the models again"
		}
		return nil, &InvalidError{fmt.Errorf("%w. Nothing was run: %s", err, advice)}
	}
	var earlierErrors int64
	for _, p := range pairs {
		if _, err := dir.Open(p, results.OpenOptions{RetryErrors: o.RetryErrors, Rescore: o.Rescore, RescoreAll: o.RescoreAll}); err != nil {
			if errors.Is(err, results.ErrMismatch) {
				return nil, &InvalidError{fmt.Errorf("%w; use another output directory (-o), or --restart to discard it", err)}
			}
			return nil, err
		}
		_, errored := dir.Counts(p.Model, p.Dataset)
		earlierErrors += int64(errored)
	}
	if mirror != nil {
		// The first commit holds the fingerprints: a second run of the
		// location is stopped here, before it calls any model.
		if err := mirror.Sync(ctx); err != nil {
			return nil, locationError(pr.location, err)
		}
	}
	rescoring := dir.Rescoring()
	if o.Rescore && len(rescoring) == 0 {
		fmt.Fprintf(warnings(o), "Nothing to score again: no scorer changed or failed since the answers in %s were scored (--all scores them all again).\n", outDir)
	}
	for _, r := range rescoring {
		why := "as asked"
		if len(r.Changed) > 0 {
			why = "the scoring changed: " + strings.Join(r.Changed, ", ")
		} else if !o.Rescore {
			why = "resuming an interrupted re-scoring"
		}
		fmt.Fprintf(warnings(o), "Scoring %d answers of model %s on dataset %s again (%s), without calling the model.\n", r.Answers, r.Model, r.Dataset, why)
	}

	var display Display = silent{}
	if o.Display != nil {
		display = o.Display(pairs, dir, requestRates(plan))
	}
	log := display.Log()
	for _, m := range plan.Models {
		if m.JudgeOnly {
			log.Info("Using a model as judge only", "model", m.Name)
		}
	}
	tracer, err := startTracing(ctx, ev, log)
	if err != nil {
		return nil, &InvalidError{err}
	}
	defer stopTracing(ctx, tracer, log)
	engOpts := runner.Options{Log: log, Observer: display, ScoreOnly: o.Rescore, Metrics: o.Metrics, Tracer: tracer}
	if limit, _ := apiconv.SpendLimit(ev.Spec.Budget); !limit.IsZero() {
		// The budget is the run's, over its resumptions: what the records
		// already written cost counts.
		engOpts.Ledger = spend.NewLedger(limit)
		engOpts.Ledger.Add(dir.Spent())
	}
	if len(svcs) > 0 || plan.Hooks != nil && plan.Hooks.Setup != nil {
		sup, err := startServices(ctx, o.Interrupts, svcs, plan, tasks, log, filepath.Join(outDir, "services"))
		if err != nil {
			return nil, err
		}
		defer sup.Stop()
		if len(svcs) > 0 {
			engOpts.Services = sup
		}
	}
	eng, err := runner.New(plan, engOpts)
	if err != nil {
		return nil, &InvalidError{err}
	}

	drain, stopWatching := watchInterrupts(o.Interrupts)
	drain.Grace = o.GracePeriod
	drain.OnBegin = func() {
		display.Note(fmt.Sprintf("Stopping: samples in flight may finish within %v (interrupt again to stop now).", o.GracePeriod))
	}
	display.Start(eng.Throttle)
	runCtx, stopSyncing := ctx, func() error { return nil }
	if mirror != nil {
		runCtx, stopSyncing = syncEvery(ctx, mirror, cmp.Or(o.SyncInterval, 10*time.Second), display.Note)
	}
	runErr := eng.RunDraining(runCtx, tasks, dir, drain)
	conflict := stopSyncing()
	runErr = errors.Join(runErr, conflict)
	sig := stopWatching()
	display.Stop()
	warnLimitsMismatch(warnings(o), plan, eng, time.Now())

	if err := dir.Close(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	summaries, err := dir.Assemble(pairs)
	if err != nil {
		return nil, fmt.Errorf("writing results: %w", errors.Join(runErr, err))
	}
	res := &Result{Dir: outDir, Location: pr.location, Summaries: summaries, Metrics: plan.MetricNames(), Interrupted: sig, EarlierErrors: earlierErrors, Rescoring: rescoring}
	var gateErr error
	if pr.baseline != "" || ev.Spec.Gate != nil {
		sum, err := compareAndGate(ev, pr.baseline, outDir, pairs, plan.MetricNames(), summaries)
		if err != nil {
			gateErr = fmt.Errorf("comparing with the baseline: %w", errors.Join(runErr, err))
		} else {
			res.Comparison, res.Gate = sum.Comparison, sum.Gate
		}
	}
	if mirror != nil && conflict == nil {
		// Last: summary.json holds the comparison and the gate's verdict.
		if err := commitLast(ctx, mirror); err != nil {
			runErr = errors.Join(runErr, locationError(pr.location, err))
			gateErr = errors.Join(gateErr, locationError(pr.location, err))
		}
	}
	if gateErr != nil {
		return nil, gateErr
	}
	if engOpts.Ledger != nil {
		st := engOpts.Ledger.State()
		res.Budget = &st
	}
	return res, runErr
}

// checkOutputs refuses a run that would write over its own data: a dataset
// read from the output directory's results.jsonl, summary.json or checkpoint.
func checkOutputs(plan *runner.Plan, outDir string) error {
	written := []string{filepath.Join(outDir, results.ResultsFile), filepath.Join(outDir, results.SummaryFile)}
	cp, _ := filepath.Abs(filepath.Join(outDir, results.CheckpointDir))
	for i, d := range plan.Datasets {
		if d.File == "" {
			continue
		}
		abs, _ := filepath.Abs(d.File)
		if rel, err := filepath.Rel(cp, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("spec.datasets[%d] (%s) reads %s, in the output directory's checkpoint, which the run writes: use another output directory (-o)", i, d.Name, d.File)
		}
		st, err := os.Stat(d.File)
		if err != nil {
			continue
		}
		for _, w := range written {
			wabs, _ := filepath.Abs(w)
			if ws, err := os.Stat(w); err == nil && os.SameFile(st, ws) || wabs == abs {
				return fmt.Errorf("spec.datasets[%d] (%s) reads %s, the output directory's %s, which the run replaces: "+
					"move the data, or use another output directory (-o)", i, d.Name, d.File, filepath.Base(w))
			}
		}
	}
	return nil
}

// warnLimitsMismatch says where a provider's rate-limit headers disagreed
// with the declared limits: a model's rateLimit, or its ModelEndpoint's
// (then against what all its models sent).
func warnLimitsMismatch(w io.Writer, plan *runner.Plan, eng *runner.Engine, now time.Time) {
	for _, m := range plan.Models {
		seen := eng.Observed(m.Name)
		declared, what := m.Limits, "rateLimit"
		var callers []string
		if m.Endpoint != "" {
			declared, what = plan.Endpoints[m.Endpoint], "ModelEndpoint "+m.Endpoint
			for _, o := range plan.Models {
				if o.Endpoint == m.Endpoint {
					callers = append(callers, o.Name)
				}
			}
		} else {
			callers = []string{m.Name}
		}
		if seen.IsZero() || declared.IsZero() {
			continue
		}
		var used cluster.Usage
		for _, c := range callers {
			u := eng.Usage(c)
			used.Add(cluster.Usage{Requests: u.Requests, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens})
		}
		if _, msg := cluster.LimitsMismatch(declared, cluster.ProviderSeen{RateLimits: seen.RateLimits, At: metav1.NewTime(seen.At)}, &used, now); msg != "" {
			fmt.Fprintf(w, "Model %s (%s): %s\n", m.Name, what, msg)
		}
	}
}

// prepared is a run checked and compiled, before anything is written.
type prepared struct {
	ev       *v1alpha1.Evaluation
	plan     *runner.Plan
	services []services.Config
	outDir   string
	// location is the s3:// location outDir is the working copy of, if any.
	location string
	// baseline is the results directory spec.baseline names, if any.
	baseline string
	// cleanup removes the run's downloads.
	cleanup func()
}

// prepare loads and compiles o.File, downloading its data into a directory
// of this process's own (cleanup removes it). It returns an *InvalidError or
// an *InterruptedError when the run cannot start.
func prepare(ctx context.Context, o Options) (*prepared, error) {
	if o.Concurrency < 0 || o.Concurrency > v1alpha1.MaxConcurrency {
		return nil, &InvalidError{fmt.Errorf("--concurrency: must be between 1 and %d", v1alpha1.MaxConcurrency)}
	}
	if o.GracePeriod < 0 {
		return nil, &InvalidError{fmt.Errorf("--grace-period: %v is negative", o.GracePeriod)}
	}
	if o.SyncInterval < 0 {
		return nil, &InvalidError{fmt.Errorf("--sync-interval: %v is negative", o.SyncInterval)}
	}
	var file *evalfile.File
	var err error
	if o.File == StdinFile {
		// Read from standard input: relative paths are the working directory's.
		var data []byte
		if data, err = io.ReadAll(cmp.Or[io.Reader](o.Stdin, os.Stdin)); err == nil {
			file, err = evalfile.DecodeFile("<stdin>", data)
		}
	} else {
		file, err = evalfile.LoadFile(o.File)
	}
	if err != nil {
		return nil, &InvalidError{err}
	}
	ev := file.Evaluation
	outDir, location := o.Output, ""
	if outDir == "" {
		outDir = filepath.Join("results", runName(ev, o.File))
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	if objstore.IsURL(outDir) {
		loc, err := objstore.ParseURL(outDir)
		if err != nil {
			return nil, &InvalidError{fmt.Errorf("-o: %w", err)}
		}
		location, outDir = loc.String(), workingCopy(base, loc)
	}
	cacheDir := o.CacheDir
	if cacheDir == "" {
		cacheDir = filepath.Join(base, "proctor", "responses")
	}

	// Nothing is written until the Evaluation has passed every check: invalid
	// input leaves no trace, and Restart discards nothing for a run that
	// cannot start. Downloads go to a directory of this process's own, removed
	// at the end (or by the next run, after a kill -9).
	dataDir := filepath.Join(os.TempDir(), dataDirPrefix+strconv.Itoa(os.Getpid()))
	removeStaleDataDirs(os.TempDir())
	// What agents of a proctor killed with -9 started lives on (its agents died
	// with it): any run ends them, whether or not it has agents of its own.
	reportLeftovers(warnings(o), agent.KillLeftovers())
	cleanup := func() { _ = os.RemoveAll(dataDir) }
	ready := false
	defer func() {
		if !ready {
			cleanup()
		}
	}()

	env := compile.Env{
		BaseDir:        filepath.Dir(o.File),
		DataDir:        dataDir,
		CacheDir:       cacheDir,
		KeepWorkspaces: o.KeepWorkspaces,
		Concurrency:    o.Concurrency,
		Endpoints:      file.EndpointLimits(),
		ModelEndpoints: file.ModelEndpoints(),
	}
	svcs, svcSecrets, err := compile.Services(&ev.Spec, env)
	if err != nil {
		return nil, &InvalidError{fmt.Errorf("%s: %w", o.File, err)}
	}
	var plan *runner.Plan
	err = interruptible(ctx, o.Interrupts, func(ctx context.Context) (err error) {
		plan, err = compile.Build(ctx, ev, env)
		return err
	})
	var interrupted *InterruptedError
	switch {
	case errors.As(err, &interrupted):
		return nil, err
	case err != nil:
		return nil, &InvalidError{fmt.Errorf("%s: %w", o.File, err)}
	}
	plan.Secrets = append(plan.Secrets, svcSecrets...)
	baseline, err := baselinePath(ev, o.File)
	if err != nil {
		return nil, &InvalidError{fmt.Errorf("%s: %w", o.File, err)}
	}
	ready = true
	return &prepared{ev: ev, plan: plan, services: svcs, outDir: outDir, location: location, baseline: baseline, cleanup: cleanup}, nil
}

// StdinFile is the File that means standard input.
const StdinFile = "-"

// runName names a run's default results directory: the Evaluation's name, or
// the file's.
func runName(ev *v1alpha1.Evaluation, file string) string {
	if ev.Name != "" {
		return ev.Name
	}
	if file == StdinFile {
		return "evaluation"
	}
	name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	if name == "" || name == "." || name == ".." {
		name = "evaluation" // "...yaml" must not make results/.. the output
	}
	return name
}

// interruptible runs fn, a step before the run starts; the first interrupt
// stops it (an *InterruptedError).
func interruptible(ctx context.Context, interrupts <-chan os.Signal, fn func(context.Context) error) error {
	var sig os.Signal
	prepCtx, prepDone := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig = <-interrupts:
			prepDone()
		case <-prepCtx.Done():
		}
	}()
	err := fn(prepCtx)
	prepDone()
	<-watched
	if sig != nil {
		return &InterruptedError{Signal: sig}
	}
	return err
}

// startServices starts the services and waits until they are ready, then
// runs the setup hook; the first interrupt stops both. On failure nothing
// is left running.
func startServices(ctx context.Context, interrupts <-chan os.Signal, cfgs []services.Config, plan *runner.Plan, tasks []runner.Task,
	log logr.Logger, logDir string) (*services.Supervisor, error) {
	var sup *services.Supervisor
	err := interruptible(ctx, interrupts, func(ctx context.Context) (err error) {
		if sup, err = services.Start(ctx, cfgs, services.Options{Log: log, LogDir: logDir}); err != nil {
			return err
		}
		if plan.Hooks == nil || plan.Hooks.Setup == nil {
			return nil
		}
		log.Info("Running the setup hook", "slots", plan.SlotCount(tasks))
		if err := plan.Hooks.Setup.Run(ctx, runner.HookContext{Slots: plan.SlotCount(tasks)}); err != nil {
			// Its output may hold what hooks.env passed on.
			return fmt.Errorf("spec.hooks.setup: %s", provider.NewRedactor(plan.Secrets...).Redact(err.Error()))
		}
		return nil
	})
	if err != nil && sup != nil {
		sup.Stop()
	}
	return sup, err
}

// watchInterrupts turns the user's interrupts into a drain: the first begins
// it, the second hurries it. stop ends the watch and returns the first
// interrupt, if any.
func watchInterrupts(interrupts <-chan os.Signal) (d runner.Drain, stop func() os.Signal) {
	begin, hurry, quit, done := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var first os.Signal
	go func() {
		defer close(done)
		select {
		case first = <-interrupts:
			close(begin)
		case <-quit:
			return
		}
		select {
		case <-interrupts:
			close(hurry)
		case <-quit:
		}
	}()
	d.Begin, d.Hurry = begin, hurry
	return d, func() os.Signal {
		close(quit)
		<-done
		return first
	}
}

// silent is the display of a run shown nowhere.
type silent struct{}

func (silent) SampleFinished(string, string, *results.Record) {}
func (silent) Log() logr.Logger                               { return logr.Discard() }
func (silent) Start(func(model string) runner.ThrottleStatus) {}
func (silent) Note(string)                                    {}
func (silent) Stop()                                          {}

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

// Estimate says what the run of o.File would cost, before it starts: it
// counts every prompt's input tokens with the providers' token counting
// endpoints and bounds the answers, making no model call and writing
// nothing (estimate.Run).
func Estimate(ctx context.Context, o Options) ([]estimate.Row, *v1alpha1.Evaluation, error) {
	pr, err := prepare(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	defer pr.cleanup()
	var rows []estimate.Row
	err = interruptible(ctx, o.Interrupts, func(ctx context.Context) (err error) {
		rows, err = estimate.Run(ctx, pr.plan, estimate.Options{Log: func(msg string) { fmt.Fprintln(warnings(o), msg) }})
		return err
	})
	return rows, pr.ev, err
}

// cancelBatches cancels the batches an earlier run left in flight, before
// --restart forgets them: their answers would be paid for and never used.
// It waits for the cancellations to end (a provider takes a while, and
// requests it processes meanwhile are billed): a batch submitted anew while
// the old one still runs would be paid for twice. A batch that cannot be
// cancelled, or is still cancelling after CancelWait, is reported, not fatal.
func cancelBatches(ctx context.Context, plan *runner.Plan, dir *results.Dir, w io.Writer, wait time.Duration) {
	recs, err := dir.Batches("")
	if err != nil {
		fmt.Fprintf(w, "--restart: reading the batches: %v\n", err)
		return
	}
	batcherOf := func(name string) (provider.Batcher, string) {
		model := name
		if judge, _, ok := strings.Cut(name, "/"); ok {
			model = judge // a judge's batches: JUDGE/SCORER/MODEL
		}
		m := plan.Model(model)
		if m == nil || m.Batch == nil {
			return nil, model
		}
		b, _ := m.Provider.(provider.Batcher)
		return b, model
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = r.ID != ""
	}
	type cancelling struct {
		b         provider.Batcher
		id, model string
	}
	var asked []cancelling
	for _, r := range recs {
		b, model := batcherOf(r.Model)
		if r.State == results.BatchDone || b == nil {
			continue
		}
		if r.ID == "" {
			// Recorded as intended: it may have been submitted.
			id, err := b.FindBatch(ctx, r.Key, r.Since.Add(-provider.BatchClockSkew), len(r.Indexes), func(id string) bool { return known[id] })
			if err != nil || id == "" {
				continue
			}
			r.ID, known[id] = id, true
		}
		if err := b.CancelBatch(ctx, r.ID); err != nil {
			fmt.Fprintf(w, "--restart: batch %s of %s could not be cancelled (%v); it may still be charged\n", r.ID, model, err)
			continue
		}
		fmt.Fprintf(w, "--restart: cancelling batch %s of %s, left in flight by the earlier run\n", r.ID, model)
		asked = append(asked, cancelling{b, r.ID, model})
	}
	deadline := time.Now().Add(wait)
	for delay := 250 * time.Millisecond; len(asked) > 0; delay = min(2*delay, 10*time.Second) {
		var still []cancelling
		for _, c := range asked {
			st, err := c.b.Batch(ctx, c.id)
			switch {
			case err == nil && !st.Ended:
				still = append(still, c)
			case err == nil:
				fmt.Fprintf(w, "--restart: batch %s of %s ended (%s)\n", c.id, c.model, st.Status)
			}
		}
		asked = still
		if len(asked) == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, c := range asked {
				fmt.Fprintf(w, "--restart: batch %s of %s is still cancelling; what it answers meanwhile is charged\n", c.id, c.model)
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// warnings is where notices for the user go.
func warnings(o Options) io.Writer {
	if o.Warnings == nil {
		return io.Discard
	}
	return o.Warnings
}

// requestRates are the requests a second each model's declared limits allow:
// its own requests limit, or its endpoint's when lower (models sharing the
// endpoint get less). A sample is a call; agents and judges make more.
func requestRates(plan *runner.Plan) map[string]float64 {
	out := map[string]float64{}
	for _, m := range plan.Models {
		rpm := m.Limits.RequestsPerMinute
		if ep, ok := plan.Endpoints[m.Endpoint]; ok && ep.RequestsPerMinute > 0 && (rpm == 0 || ep.RequestsPerMinute < rpm) {
			rpm = ep.RequestsPerMinute
		}
		if rpm > 0 && !m.Agent {
			out[m.Name] = float64(rpm) / 60
		}
	}
	return out
}

// importAnswers seeds a checkpoint with the answers of DIR/results.jsonl
// (results fetched from a cluster), each at its sample's position in the
// data, found by id: proctor score then scores them. An answer that was cut
// (outputTruncated), failed, or whose id the data does not have is left out,
// and said; the samples without an answer stay unanswered.
func importAnswers(plan *runner.Plan, pairs []results.Pair, dir *results.Dir, warn io.Writer) (int, error) {
	type key struct{ model, dataset string }
	byPair := map[key]map[string]*results.Record{}
	for _, p := range pairs {
		byPair[key{p.Model, p.Dataset}] = map[string]*results.Record{}
	}
	f, err := os.Open(filepath.Join(dir.Root(), results.ResultsFile))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var cut, failed, foreign int
	err = results.EachRecordLine(f, func(n int, line []byte) error {
		var rec results.Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		ids, ok := byPair[key{rec.Model, rec.Dataset}]
		switch {
		case !ok:
			foreign++
		case rec.OutputTruncated:
			cut++
		case rec.Error != "" && rec.ErrorKind != results.ErrorKindScoring:
			failed++
		default:
			ids[rec.ID] = &rec
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// Every answer placed first, then written: a dataset that cannot be
	// read leaves no checkpoint behind.
	total, unknown := 0, 0
	placed := make([]map[int]*results.Record, len(pairs))
	for i, p := range pairs {
		ids := byPair[key{p.Model, p.Dataset}]
		answers := map[int]*results.Record{}
		err := dataset.EachSample(plan.Dataset(p.Dataset).Open, p.Total, func(s *dataset.Sample) error {
			if rec, ok := ids[s.ID]; ok {
				answers[s.Index] = rec
				delete(ids, s.ID)
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("dataset %s: %w", p.Dataset, err)
		}
		unknown += len(ids)
		placed[i] = answers
	}
	for i, p := range pairs {
		if len(placed[i]) == 0 {
			continue
		}
		if err := dir.Seed(p, placed[i]); err != nil {
			return 0, err
		}
		total += len(placed[i])
	}
	if cut+failed+foreign+unknown > 0 {
		fmt.Fprintf(warn, "Left unscored from results.jsonl: %d answers cut in the cluster (outputTruncated), %d failed calls, "+
			"%d records of models or datasets this Evaluation does not have, %d ids its data does not have.\n", cut, failed, foreign, unknown)
	}
	return total, nil
}

// startTracing sends the run's traces where spec.tracing, or the standard
// OTEL_* variables, say (nil: nowhere).
func startTracing(ctx context.Context, ev *v1alpha1.Evaluation, log logr.Logger) (*telemetry.Tracer, error) {
	cfg := apiconv.Tracing(&ev.Spec)
	cfg.Log, cfg.Version = log, version.Version
	cfg.Attributes = []attribute.KeyValue{telemetry.AttrEvaluation.String(ev.Name)}
	t, err := telemetry.StartTracing(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if t != nil {
		log.Info("Sending traces over OTLP")
	}
	return t, nil
}

// stopTracing sends the spans still queued, waiting at most 10s.
func stopTracing(ctx context.Context, t *telemetry.Tracer, log logr.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Error(err, "Failed to send the last traces")
	}
}
