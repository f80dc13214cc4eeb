// Package shard is what a runner pod does: evaluate one shard (a slice of one
// dataset for one model) of an Evaluation's run, checkpointing into the shard's
// ConfigMaps and keeping within the share of each model's budget the controller
// grants it. `proctor shard` runs it; integration tests run it in-process.
package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/pacer"
	"github.com/proctor-dev/proctor/internal/services"
	"github.com/proctor-dev/proctor/internal/source"
	"github.com/proctor-dev/proctor/internal/version"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// Options says which shards to run and how.
type Options struct {
	Namespace  string
	Evaluation string
	Run        string
	Model      string
	// Index is the pod's worker (its Job completion index), one of Workers;
	// Workers 0 means one worker per shard (Index is then the shard's).
	Index   int
	Workers int
	// ShardRetries is how many pods that failed a shard may be followed by
	// another: the next one fails it for good (RetriesUsedError); -1 leaves
	// it to the Job.
	ShardRetries int
	Pod          string
	// LookupEnv reads the pod's environment (API keys); nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// WorkDir holds downloads and agent workspaces.
	WorkDir string
	// DatasetRoot is where PVC datasets are mounted: <root>/<claimName>/<path>.
	DatasetRoot string
	// AgentSocket is the Unix socket of the pod's agent executor, which runs an
	// agent model's processes in their own container; "" runs them here.
	AgentSocket string
	// HookSocket is the Unix socket of the executor of the pod's hooks
	// container, which runs spec.hooks.
	HookSocket string
	// FlushEvery is how often progress and records are written (default 3s).
	FlushEvery time.Duration
	// BudgetEvery is how often the budgets are read (default 2s).
	BudgetEvery time.Duration
	// FirstGrantEvery is how often they are read while a model waits for its
	// first share (default 200ms): the shard starts calling soon after the
	// controllers grant it.
	FirstGrantEvery time.Duration
	// FenceAfter stops calls to limited models when the budget could not be read
	// for that long (default 20s): the controller reclaims the shares of shards
	// it stops hearing from, and such a shard must not keep spending.
	FenceAfter time.Duration
	// GracePeriod is how long samples in flight may finish after ctx ends.
	GracePeriod time.Duration
	// StorageBudget is what the planner puts in the plan as the run's storage
	// budget for records (cluster.Plan.StorageBytes); 0 means unbounded.
	StorageBudget int64
	// PacerURL is the manager's pacer (cluster.EnvPacerURL), which spaces the
	// calls of every runner pod through a rate-limited key; "" paces this
	// pod's calls on their own. PacerToken returns the token it presents.
	PacerURL   string
	PacerToken func() (string, error)
	// Metrics, when set, count the shard's calls, samples and throttling.
	Metrics *telemetry.Metrics
	Clock   clock.WithTicker
	Log     logr.Logger
}

// RetriesUsedError says a shard failed on as many pods as its retries allow:
// the pod exits with cluster.ExitRetriesUsed, which the Job treats as final.
type RetriesUsedError struct {
	Shard    cluster.Shard
	Attempts int
}

func (e *RetriesUsedError) Error() string {
	return fmt.Sprintf("shard %s (%s samples %d-%d) failed on %d pods, as many as its retries allow",
		e.Shard.Key(), e.Shard.Dataset, e.Shard.Start, e.Shard.End-1, e.Attempts)
}

// InvalidError is a problem no retry can fix (a template naming a missing field,
// a missing API key): the pod exits with code 2, which the Job treats as final.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// Run evaluates worker o.Index's shards (cluster.WorkerShards) one after
// another, each to the end, or until ctx ends (then it checkpoints what
// finished and returns ctx's error). What a pod needs for any of its shards
// (the Evaluation, the plan, the data, earlier answers, tracing, services,
// the setup hook, the pacer) is set up once. Where it can (worker.streams),
// one engine runs the shards as a stream, each begun as the one before
// hands out its last sample; else each shard gets its head and an engine
// of its own. A shard whose head says it succeeded (an earlier pod of the
// worker finished it) is passed over. A run that is no longer the
// Evaluation's returns kube.ErrObsolete.
func Run(ctx context.Context, c client.WithWatch, o Options) error {
	o.defaults()
	w, err := startWorker(ctx, c, o)
	if err != nil {
		return err
	}
	defer w.close()
	if w.streams() {
		return w.runStream(ctx)
	}
	for _, sh := range w.shards {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := w.runShard(ctx, sh); err != nil {
			return err
		}
	}
	if len(w.shards) > 1 {
		w.log.Info("Finished the worker's shards", "shards", len(w.shards))
	}
	return nil
}

// worker is what a pod sets up once for all its shards.
type worker struct {
	c      client.WithWatch
	o      Options
	ev     *v1alpha1.Evaluation
	plan   cluster.Plan
	p      *runner.Plan
	shards []cluster.Shard
	log    logr.Logger
	prev   *earlier
	tracer *telemetry.Tracer
	svc    *services.Supervisor
	pacer  *pacer.Client
	// models are the models the pod calls (its own and the judges); limited,
	// viaEndpoint and agentOf, those whose calls take shares of a budget
	// (see budgetFollower). limited changes as rate limits are added or
	// removed mid-run (limitedNow).
	models      []string
	limitedMu   sync.Mutex
	limited     map[string]bool
	viaEndpoint map[string]string
	agentOf     map[string]string
	// limiters are the models' rate limiters, kept from each shard's engine
	// for the next (runner.Options.Limiters).
	limiters map[string]*ratelimit.Limiter
	closers  []func()
}

func (w *worker) close() {
	for _, f := range slices.Backward(w.closers) {
		f()
	}
}

// startWorker reads what the pod's shards need and starts what they share.
func startWorker(ctx context.Context, c client.WithWatch, o Options) (_ *worker, err error) {
	c = prefetch(ctx, c, o)
	w := &worker{c: c, o: o, log: o.Log.WithValues("evaluation", o.Evaluation, "run", o.Run, "model", o.Model, "worker", o.Index)}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	ev, endpoints, err := currentEvaluation(ctx, c, o, false)
	if err != nil {
		return nil, err
	}
	w.ev = ev
	if w.plan, err = kube.ReadPlan(ctx, c, ev, o.Run); err != nil {
		return nil, err
	}
	all := w.plan.Shards(&ev.Spec, o.Model)
	workers := o.Workers
	if workers == 0 {
		workers = len(all) // a worker per shard: its index is the shard's
	}
	if w.shards, err = cluster.WorkerShards(all, o.Index, workers); err != nil {
		return nil, &InvalidError{fmt.Errorf("model %s: %w", o.Model, err)}
	}
	log := w.log
	var datasets []string
	for _, sh := range w.shards {
		if !slices.Contains(datasets, sh.Dataset) {
			datasets = append(datasets, sh.Dataset)
		}
	}

	// Agent workspaces are made under WorkDir, which need not exist yet (in a pod
	// it is a directory of the scratch volume).
	if err := os.MkdirAll(o.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the work directory: %w", err)
	}
	// The pod holds the API keys of its model and of the judges, no others.
	w.models = []string{o.Model}
	for j := range ev.Spec.JudgeModels() {
		w.models = append(w.models, j)
	}
	env := compile.Env{
		LookupEnv:      o.LookupEnv,
		DataDir:        filepath.Join(o.WorkDir, "data"),
		WorkspaceRoot:  o.WorkDir,
		Cluster:        true,
		Datasets:       datasets,
		Models:         w.models,
		AgentExecutor:  o.AgentSocket,
		HookExecutor:   o.HookSocket,
		ModelEndpoints: endpoints,
		ResolveSource: func(ds *v1alpha1.Dataset) (string, error) {
			return resolveSource(ctx, c, o, ev, ds)
		},
	}
	if w.prev, err = loadEarlier(ctx, c, ev, o.Run, w.shards); err != nil {
		return nil, err
	}
	for _, err := range w.prev.unread {
		log.Info("Failed to read an earlier run's answers in the results store; their samples are asked again", "error", err.Error())
	}
	if ev.Spec.Cache != nil && ev.Spec.Cache.Enabled {
		env.Cache = w.prev.cache
	}
	if w.p, err = compile.Build(ctx, ev, env); err != nil {
		return nil, &InvalidError{err}
	}
	if err := sameData(ev, &w.plan, w.p); err != nil {
		return nil, &InvalidError{err}
	}
	for _, d := range w.p.Datasets {
		for _, warning := range d.Warnings {
			log.Info("Read data that deserves a warning", "warning", warning)
		}
	}
	if err := runner.EnsureOpenFiles(w.p, o.Model); err != nil {
		return nil, &InvalidError{fmt.Errorf("the concurrency of model %s: %w", o.Model, err)}
	}
	tcfg := apiconv.Tracing(&ev.Spec)
	tcfg.Log, tcfg.Version = log, version.Version
	tcfg.Attributes = []attribute.KeyValue{telemetry.AttrEvaluation.String(ev.Name), telemetry.AttrRun.String(o.Run),
		telemetry.AttrWorker.Int(o.Index), semconv.K8SNamespaceName(ev.Namespace), semconv.K8SPodName(o.Pod)}
	if w.tracer, err = telemetry.StartTracing(ctx, tcfg); err != nil {
		return nil, &InvalidError{fmt.Errorf("tracing: %w", err)}
	}
	w.closers = append(w.closers, func() {
		// The spans still queued go out before the pod ends.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.tracer.Shutdown(sctx); err != nil {
			log.Error(err, "Failed to send the last traces")
		}
	})
	if len(ev.Spec.Services) > 0 {
		w.svc = services.Watch(compile.WatchedServices(&ev.Spec), services.Options{Log: log})
		w.closers = append(w.closers, w.svc.Stop)
	}
	tasks := make([]runner.Task, 0, len(w.shards))
	for _, sh := range w.shards {
		tasks = append(tasks, runner.Task{Model: sh.Model, Dataset: sh.Dataset, Start: sh.Start, End: sh.End})
	}
	if err := setup(ctx, w.p, tasks, w.services(), log); err != nil {
		return nil, err
	}

	// The rate-limited models among those this pod calls take their shares from the budget.
	w.limited = map[string]bool{}
	for m := range apiconv.ModelLimits(&ev.Spec) {
		if slices.Contains(w.models, m) {
			w.limited[m] = true
		}
	}
	// Models calling through a ModelEndpoint, and agents calling one through
	// their proxies, take their shares from its budget.
	w.viaEndpoint, w.agentOf = map[string]string{}, map[string]string{}
	for _, caller := range apiconv.EndpointCallers(&ev.Spec) {
		if slices.Contains(w.models, caller.Model.Name) {
			w.viaEndpoint[caller.Name] = caller.Ref.Name
			if caller.Agent != nil {
				w.agentOf[caller.Name] = caller.Model.Name
			}
		}
	}
	if o.PacerURL != "" {
		// Every pod's calls through a limited key, spaced together; a model
		// may be limited mid-run, so every pod has the pacer's client (it
		// asks nothing of it until then).
		w.pacer = pacer.NewClient(pacer.ClientOptions{URL: o.PacerURL, Namespace: ev.Namespace, Evaluation: ev.Name,
			Token: o.PacerToken, Log: log.WithName("pacer")})
		w.closers = append(w.closers, w.pacer.Close)
	}
	return w, nil
}

// limitedNow is a copy of the models limited now (budgetFollower.limited):
// what the pod found at its start, then what the last follower to apply its
// shares found in the budget.
func (w *worker) limitedNow() map[string]bool {
	w.limitedMu.Lock()
	defer w.limitedMu.Unlock()
	out := make(map[string]bool, len(w.limited))
	maps.Copy(out, w.limited)
	return out
}

func (w *worker) setLimited(m map[string]bool) {
	w.limitedMu.Lock()
	defer w.limitedMu.Unlock()
	w.limited = m
}

// follower is a budgetFollower of shard sh's shares for eng.
func (w *worker) follower(sh cluster.Shard, eng *runner.Engine, store *kube.Store, ledger *spend.Ledger, log logr.Logger) *budgetFollower {
	b := &budgetFollower{c: w.c, o: w.o, ev: w.ev, run: w.o.Run, shard: sh, eng: eng, store: store, limited: w.limitedNow(),
		viaEndpoint: w.viaEndpoint, agentOf: w.agentOf, models: w.models, log: log, ledger: ledger, nudged: make(chan struct{}, 1),
		onLimited: w.setLimited}
	if w.pacer != nil {
		b.pacer = w.pacer
	}
	return b
}

// watch starts watching b's budgets until ctx ends.
func (w *worker) watch(ctx context.Context, b *budgetFollower, log logr.Logger) {
	watchBudgets(ctx, w.c, w.o.Clock, w.ev.Namespace, b.budgetNames(), b.nudged, func(name string, err error) {
		b.watchFailed.Store(true)
		log.Info("Failed to watch a budget; reading it on a timer meanwhile", "configMap", name, "every", w.o.BudgetEvery.String(), "error", err.Error())
	})
}

// holdUntilGranted holds b's callers until the budgets grant them a share,
// reads the budgets, and says the shard runs (the controllers grant shares
// only to running shards, and would otherwise hear of it at the first flush).
func (w *worker) holdUntilGranted(ctx context.Context, b *budgetFollower) error {
	for m := range b.limited {
		_ = b.eng.Pause(m, true)
	}
	for m := range w.viaEndpoint {
		_ = b.eng.Pause(m, true)
	}
	for _, m := range w.agentOf {
		_ = b.eng.Pause(m, true) // its agent would wait for its calls' share
	}
	b.poll(ctx)
	return b.checkpoint(ctx)
}

// services is the pod's services watch as the engine takes it (nil: none).
func (w *worker) services() runner.Services {
	if w.svc == nil {
		return nil
	}
	return w.svc
}

// runShard evaluates one of the worker's shards to the end, or until ctx
// ends (then it checkpoints what finished and returns ctx's error).
func (w *worker) runShard(ctx context.Context, sh cluster.Shard) error {
	o, ev := w.o, w.ev
	log := w.shardLog(sh)
	store, attempts, err := w.openShard(ctx, sh)
	if err != nil || store == nil {
		return err
	}
	w.prev.cache.use(sh.Index)
	tasks := []runner.Task{{Model: sh.Model, Dataset: sh.Dataset, Start: sh.Start, End: sh.End}}
	// The worker's limiters go from shard to shard: the server still counts
	// the last minute of the shard before.
	engOpts := runner.Options{Log: log, Shares: true, Metrics: o.Metrics, Tracer: w.tracer, Services: w.services(), Limiters: w.limiters}
	if ev.Spec.Budget != nil {
		// Calls wait for an allowance of the budget (none yet); what the
		// shard's earlier pods spent counts against it.
		engOpts.Ledger = spend.NewWaitingLedger(allowanceLimit(ev.Spec.Budget, spend.Totals{}))
		engOpts.Ledger.Add(store.Progress().Spent)
	}
	eng, err := runner.New(w.p, engOpts)
	if err != nil {
		return &InvalidError{err}
	}
	w.limiters = eng.Limiters()
	if done := store.Progress().Done; done > 0 {
		log.Info("Resumed a shard", "done", done)
	}
	// The callers of one endpoint in this pod pool their places in flight.
	byEndpoint := map[string][]string{}
	for caller, ep := range w.viaEndpoint {
		byEndpoint[ep] = append(byEndpoint[ep], caller)
	}
	for _, callers := range byEndpoint {
		eng.ShareInFlight(callers...)
	}
	if w.pacer != nil && len(w.viaEndpoint) > 0 {
		// The limited models' pacing is the follower's to set.
		eng.SetPacer(w.pacer, slices.Collect(maps.Keys(w.viaEndpoint))...)
	}
	b := w.follower(sh, eng, store, engOpts.Ledger, log)
	for _, m := range w.models {
		if !b.limited[m] && w.viaEndpoint[m] == "" {
			// Its limit was removed since the pod compiled its plan.
			_ = eng.SetLimits(m, ratelimit.Limits{})
		}
	}
	// Watched as long as the loops read them (they outlive ctx, see below).
	watchCtx, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatching()
	w.watch(watchCtx, b, log)
	if !b.follows() {
		err = store.Flush(ctx, false)
	} else {
		// Until the controllers grant a share, limited models send nothing.
		err = w.holdUntilGranted(ctx, b)
	}
	if err != nil {
		return fmt.Errorf("beginning shard %s: %w", sh.Key(), err)
	}
	log.Info("Began a shard", "attempt", attempts+1)

	// ctx ending (SIGTERM) drains: no new samples; those in flight get the grace
	// period. The run and the budget loops outlive ctx until then.
	runCtx := context.WithoutCancel(ctx)
	loopsDone := make(chan struct{})
	loopCtx, stopLoops := context.WithCancel(runCtx)
	go func() {
		defer close(loopsDone)
		b.loop(loopCtx)
	}()
	var sink runner.Sink = store
	if mine := w.prev.answers[sh.Index]; len(mine) > 0 {
		delete(w.prev.answers, sh.Index) // the store takes them one by one
		log.Info("Scoring an earlier run's answers again, without calling the model", "answers", len(mine))
		sink = &answeredStore{Store: store, answers: mine}
	}
	runErr := eng.RunDraining(runCtx, tasks, sink, runner.Drain{Begin: ctx.Done(), Grace: o.GracePeriod})
	stopLoops()
	<-loopsDone

	finished, err := w.flushShard(ctx, sh, store, attempts, runErr)
	switch {
	case err != nil:
		return errors.Join(runErr, err)
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		return ctx.Err()
	case !finished:
		return fmt.Errorf("shard %s ended with %d of %d samples done", sh.Key(), store.Progress().Done, sh.End-sh.Start)
	}
	return nil
}

// flushShard writes what the pod finished of shard sh, whatever happened,
// and reports whether the shard succeeded: all its samples have records,
// runErr is nil and ctx (the pod's) has not ended. A pod that drained (ctx
// ended, no runErr) takes its attempt back: the shard did not fail on it.
func (w *worker) flushShard(ctx context.Context, sh cluster.Shard, store *kube.Store, attempts int, runErr error) (bool, error) {
	finished := runErr == nil && ctx.Err() == nil && store.Progress().Done == sh.End-sh.Start
	if runErr == nil && ctx.Err() != nil {
		store.SetAttempts(attempts) // drained: not the shard's failure
	}
	saveCtx, cancelSave := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelSave()
	if err := store.Flush(saveCtx, finished); err != nil {
		return false, fmt.Errorf("saving the records of shard %s: %w", sh.Key(), err)
	}
	if finished {
		w.shardLog(sh).Info("Finished a shard", "done", store.Progress().Done, "errored", store.Progress().Errored)
	}
	return finished, nil
}

func (w *worker) shardLog(sh cluster.Shard) logr.Logger {
	return w.log.WithValues("shard", sh.Index, "dataset", sh.Dataset, "start", sh.Start, "end", sh.End)
}

// openShard opens shard sh's store and counts the pod's attempt at it (the
// caller writes it with its first flush); attempts is the count before. A
// nil store: the shard succeeded already (an earlier pod of the worker
// finished it).
func (w *worker) openShard(ctx context.Context, sh cluster.Shard) (_ *kube.Store, attempts int, _ error) {
	o, ev, c := w.o, w.ev, w.c
	store, err := kube.OpenStore(ctx, c, ev, o.Run, sh, o.Pod)
	if apierrors.IsNotFound(err) {
		// The run's heads go when an edit starts another run: this pod's
		// work is over, not failed.
		if _, _, cerr := currentEvaluation(ctx, c, o, true); errors.Is(cerr, kube.ErrObsolete) {
			return nil, 0, cerr
		}
	}
	if err != nil {
		return nil, 0, err
	}
	if store.Succeeded() {
		return nil, 0, nil
	}
	// The pods that began the shard and neither finished nor drained it
	// failed on it: past its retries it fails for good. The attempt is
	// written before any call, so that a pod killed outright (OOM) counts
	// (with the first checkpoint of a shard that follows a budget).
	attempts = store.Progress().Attempts
	if o.ShardRetries >= 0 && attempts > o.ShardRetries {
		return nil, 0, &RetriesUsedError{Shard: sh, Attempts: attempts}
	}
	store.SetAttempts(attempts + 1)
	store.SetStorageBudget(w.plan.StorageShare(&ev.Spec, sh))
	return store, attempts, nil
}

// sameData checks that the pod read the data the planner planned: a url
// without sha256 whose content changed since, or a PVC's file rewritten,
// would mix two versions of the data in one run (the shards that ran before
// the change scored the old samples) without a word.
func sameData(ev *v1alpha1.Evaluation, plan *cluster.Plan, p *runner.Plan) error {
	for _, d := range p.Datasets {
		want, ok := plan.Data[d.Name]
		if !ok || want == d.Fingerprint {
			continue
		}
		path, what := "spec.datasets", "its source"
		for i := range ev.Spec.Datasets {
			if ds := &ev.Spec.Datasets[i]; ds.Name == d.Name {
				path = fmt.Sprintf("spec.datasets[%d].source", i)
				switch {
				case ds.Source.URL != "":
					what = "the data at " + ds.Source.URL
				case ds.Source.PVC != nil:
					what = fmt.Sprintf("the file %s of PVC %s", ds.Source.PVC.Path, ds.Source.PVC.ClaimName)
				}
			}
		}
		return fmt.Errorf("%s: %s changed since the run was planned: its shards would score two versions of dataset %s. "+
			"Pin it (a url's sha256, or a ConfigMap, which each run copies) and start the run again", path, what, d.Name)
	}
	return nil
}

// resolveEndpoints gives the models with endpointRef what their
// ModelEndpoints say, and returns the specs of every endpoint the Evaluation
// refers to (the agents' proxies need theirs). The controller starts no Job
// while one is missing; a pod that starts while one is gone (deleted mid-run,
// its pod replaced) waits for it instead of failing, as the calls of the pods
// already running do.
func resolveEndpoints(ctx context.Context, c client.Client, o Options, ev *v1alpha1.Evaluation) (map[string]*v1alpha1.ModelEndpointSpec, error) {
	specs := map[string]*v1alpha1.ModelEndpointSpec{}
	for _, caller := range apiconv.EndpointCallers(&ev.Spec) {
		name := caller.Ref.Name
		if ns := caller.Ref.Namespace; ns != "" && ns != ev.Namespace {
			return nil, &InvalidError{fmt.Errorf("%s.namespace: %q is not the Evaluation's namespace", caller.Path, ns)}
		}
		if specs[name] == nil {
			var ep v1alpha1.ModelEndpoint
			for logged := false; ; logged = true {
				err := c.Get(ctx, client.ObjectKey{Namespace: ev.Namespace, Name: name}, &ep)
				if err == nil {
					break
				}
				if !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("reading ModelEndpoint %s (%s): %w", name, caller.Path, err)
				}
				if !logged {
					o.Log.Info("Waiting for a ModelEndpoint that is gone", "endpoint", name, "caller", caller.Name)
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-o.Clock.After(o.BudgetEvery):
				}
			}
			specs[name] = &ep.Spec
		}
		if caller.Agent == nil {
			caller.Model.UseEndpoint(specs[name])
		}
	}
	return specs, nil
}

// currentEvaluation reads the Evaluation, defaulted as the controller sees it
// and its models given what their ModelEndpoints say, or returns
// kube.ErrObsolete if it is gone or its run is no longer o.Run. Unless fresh,
// it reads the API server's cached copy first (cachedRead).
func currentEvaluation(ctx context.Context, c client.Client, o Options, fresh bool) (*v1alpha1.Evaluation, map[string]*v1alpha1.ModelEndpointSpec, error) {
	var ev *v1alpha1.Evaluation
	if !fresh {
		cached, err := readEvaluation(ctx, c, o, cachedRead)
		if err == nil && cluster.IsRun(cached, o.Run) {
			ev = cached
		}
	}
	if ev == nil {
		var err error
		if ev, err = readEvaluation(ctx, c, o); err != nil {
			return nil, nil, err
		}
		if !cluster.IsRun(ev, o.Run) {
			return nil, nil, kube.ErrObsolete
		}
	}
	endpoints, err := resolveEndpoints(ctx, c, o, ev)
	if err != nil {
		return nil, nil, err
	}
	return ev, endpoints, nil
}

// cachedRead reads what the API server's watch cache holds (resourceVersion
// 0) rather than etcd: the pods of a run start together, each reading the
// Evaluation, hundreds of KiB with inline data, and 8 such reads at once
// took 240-460 ms from etcd and 23-92 ms from the cache. A cached copy may
// only be behind; one whose spec hashes to the pod's run is that run's spec
// (the run is its hash), and the runner reads nothing else of it.
var cachedRead = &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}}

// readEvaluation reads the Evaluation, defaulted, or returns kube.ErrObsolete
// if it is gone.
func readEvaluation(ctx context.Context, c client.Client, o Options, opts ...client.GetOption) (*v1alpha1.Evaluation, error) {
	ev := &v1alpha1.Evaluation{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Evaluation}, ev, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, kube.ErrObsolete
		}
		return nil, fmt.Errorf("reading the evaluation: %w", err)
	}
	v1alpha1.SetDefaults(&ev.Spec)
	return ev, nil
}

func (o *Options) defaults() {
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	if o.DatasetRoot == "" {
		o.DatasetRoot = cluster.DatasetRoot
	}
	if o.FlushEvery == 0 {
		o.FlushEvery = 3 * time.Second
	}
	if o.BudgetEvery == 0 {
		o.BudgetEvery = 2 * time.Second
	}
	if o.FirstGrantEvery == 0 {
		o.FirstGrantEvery = 200 * time.Millisecond
	}
	if o.FenceAfter == 0 {
		o.FenceAfter = 20 * time.Second
	}
	if o.GracePeriod == 0 {
		o.GracePeriod = 20 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// resolveSource makes a cluster dataset source a local file.
func resolveSource(ctx context.Context, c client.Client, o Options, ev *v1alpha1.Evaluation, ds *v1alpha1.Dataset) (string, error) {
	pod := source.Pod{Get: kube.Getter(c), Evaluation: ev, Run: o.Run, DatasetRoot: o.DatasetRoot, DataDir: filepath.Join(o.WorkDir, "data")}
	return source.ResolveInPod(ctx, pod, ds)
}
