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
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// Options says which shard to run and how.
type Options struct {
	Namespace  string
	Evaluation string
	Run        string
	Model      string
	Index      int
	Pod        string
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

// InvalidError is a problem no retry can fix (a template naming a missing field,
// a missing API key): the pod exits with code 2, which the Job treats as final.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// Run evaluates the shard to the end, or until ctx ends (then it checkpoints what
// finished and returns ctx's error). A run that is no longer the Evaluation's
// returns kube.ErrObsolete.
func Run(ctx context.Context, c client.WithWatch, o Options) error {
	o.defaults()
	log := o.Log.WithValues("evaluation", o.Evaluation, "run", o.Run, "model", o.Model, "shard", o.Index)

	ev, endpoints, err := currentEvaluation(ctx, c, o)
	if err != nil {
		return err
	}
	plan, err := kube.ReadPlan(ctx, c, ev, o.Run)
	if err != nil {
		return err
	}
	shards := plan.Shards(&ev.Spec, o.Model)
	if o.Index < 0 || o.Index >= len(shards) {
		return &InvalidError{fmt.Errorf("shard %d of model %s does not exist (it has %d)", o.Index, o.Model, len(shards))}
	}
	sh := shards[o.Index]
	log = log.WithValues("dataset", sh.Dataset, "start", sh.Start, "end", sh.End)

	// Agent workspaces are made under WorkDir, which need not exist yet (in a pod
	// it is a directory of the scratch volume).
	if err := os.MkdirAll(o.WorkDir, 0o700); err != nil {
		return fmt.Errorf("creating the work directory: %w", err)
	}
	// The pod holds the API keys of its model and of the judges, no others.
	models := []string{o.Model}
	for j := range ev.Spec.JudgeModels() {
		models = append(models, j)
	}
	env := compile.Env{
		LookupEnv:      o.LookupEnv,
		DataDir:        filepath.Join(o.WorkDir, "data"),
		WorkspaceRoot:  o.WorkDir,
		Cluster:        true,
		Datasets:       []string{sh.Dataset},
		Models:         models,
		AgentExecutor:  o.AgentSocket,
		HookExecutor:   o.HookSocket,
		ModelEndpoints: endpoints,
		ResolveSource: func(ds *v1alpha1.Dataset) (string, error) {
			return resolveSource(ctx, c, o, ev, ds)
		},
	}
	prev, err := loadEarlier(ctx, c, ev, o.Run, sh)
	if err != nil {
		return err
	}
	for _, err := range prev.unread {
		log.Info("Failed to read an earlier run's answers in the results store; their samples are asked again", "error", err.Error())
	}
	if ev.Spec.Cache != nil && ev.Spec.Cache.Enabled {
		env.Cache = prev.cache
	}
	p, err := compile.Build(ctx, ev, env)
	if err != nil {
		return &InvalidError{err}
	}
	if err := sameData(ev, &plan, p); err != nil {
		return &InvalidError{err}
	}
	for _, d := range p.Datasets {
		for _, w := range d.Warnings {
			log.Info("Read data that deserves a warning", "warning", w)
		}
	}
	store, err := kube.OpenStore(ctx, c, ev, o.Run, sh, o.Pod)
	if err != nil {
		return err
	}
	store.SetStorageBudget(plan.StorageShare(&ev.Spec, sh))
	tasks := []runner.Task{{Model: sh.Model, Dataset: sh.Dataset, Start: sh.Start, End: sh.End}}
	if err := runner.EnsureOpenFiles(p, sh.Model); err != nil {
		return &InvalidError{fmt.Errorf("the concurrency of model %s: %w", sh.Model, err)}
	}
	tcfg := apiconv.Tracing(&ev.Spec)
	tcfg.Log, tcfg.Version = log, version.Version
	tcfg.Attributes = []attribute.KeyValue{telemetry.AttrEvaluation.String(ev.Name), telemetry.AttrRun.String(o.Run),
		telemetry.AttrShard.Int(o.Index), semconv.K8SNamespaceName(ev.Namespace), semconv.K8SPodName(o.Pod)}
	tracer, err := telemetry.StartTracing(ctx, tcfg)
	if err != nil {
		return &InvalidError{fmt.Errorf("tracing: %w", err)}
	}
	defer func() {
		// The spans still queued go out before the pod ends.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := tracer.Shutdown(sctx); err != nil {
			log.Error(err, "Failed to send the last traces")
		}
	}()
	engOpts := runner.Options{Log: log, Shares: true, Metrics: o.Metrics, Tracer: tracer}
	if ev.Spec.Budget != nil {
		// Calls wait for an allowance of the budget (none yet); what the
		// shard's earlier pods spent counts against it.
		engOpts.Ledger = spend.NewWaitingLedger(allowanceLimit(ev.Spec.Budget, spend.Totals{}))
		engOpts.Ledger.Add(store.Progress().Spent)
	}
	if len(ev.Spec.Services) > 0 {
		svc := services.Watch(compile.WatchedServices(&ev.Spec), services.Options{Log: log})
		defer svc.Stop()
		engOpts.Services = svc
	}
	if err := setup(ctx, p, tasks, engOpts.Services, log); err != nil {
		return err
	}
	eng, err := runner.New(p, engOpts)
	if err != nil {
		return &InvalidError{err}
	}
	if done := store.Progress().Done; done > 0 {
		log.Info("Resumed a shard", "done", done)
	}

	// The rate-limited models among those this pod calls take their shares from the budget.
	limited := map[string]bool{}
	for m := range apiconv.ModelLimits(&ev.Spec) {
		if slices.Contains(models, m) {
			limited[m] = true
		}
	}
	// Models calling through a ModelEndpoint, and agents calling one through
	// their proxies, take their shares from its budget.
	viaEndpoint, agentOf := map[string]string{}, map[string]string{}
	for _, caller := range apiconv.EndpointCallers(&ev.Spec) {
		if slices.Contains(models, caller.Model.Name) {
			viaEndpoint[caller.Name] = caller.Ref.Name
			if caller.Agent != nil {
				agentOf[caller.Name] = caller.Model.Name
			}
		}
	}
	// The callers of one endpoint in this pod pool their places in flight.
	byEndpoint := map[string][]string{}
	for caller, ep := range viaEndpoint {
		byEndpoint[ep] = append(byEndpoint[ep], caller)
	}
	for _, callers := range byEndpoint {
		eng.ShareInFlight(callers...)
	}
	if o.PacerURL != "" && len(limited)+len(viaEndpoint) > 0 {
		// Every pod's calls through a limited key, spaced together.
		pc := pacer.NewClient(pacer.ClientOptions{URL: o.PacerURL, Namespace: ev.Namespace, Evaluation: ev.Name,
			Token: o.PacerToken, Log: log.WithName("pacer")})
		defer pc.Close()
		eng.SetPacer(pc, append(slices.Collect(maps.Keys(limited)), slices.Collect(maps.Keys(viaEndpoint))...)...)
	}
	b := &budgetFollower{c: c, o: o, ev: ev, run: o.Run, shard: sh, eng: eng, store: store, limited: limited, viaEndpoint: viaEndpoint,
		agentOf: agentOf, models: models, log: log, ledger: engOpts.Ledger, nudged: make(chan struct{}, 1)}
	// Watched as long as the loops read them (they outlive ctx, see below).
	watchCtx, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatching()
	if len(limited)+len(viaEndpoint) > 0 || b.ledger != nil {
		watchBudgets(watchCtx, c, o.Clock, ev.Namespace, b.budgetNames(), b.nudged, func(name string, err error) {
			log.Info("Failed to watch a budget; reading it on a timer meanwhile", "configMap", name, "every", o.BudgetEvery.String(), "error", err.Error())
		})
		// Until the controllers grant a share, limited models send nothing.
		for m := range limited {
			_ = eng.Pause(m, true)
		}
		for m := range viaEndpoint {
			_ = eng.Pause(m, true)
		}
		for _, m := range agentOf {
			_ = eng.Pause(m, true) // its agent would wait for its calls' share
		}
		b.poll(ctx)
		// Say at once that the shard runs, with what it read: the controllers
		// grant shares only to running shards, and would otherwise hear of it
		// at the first flush.
		b.flush(ctx)
	}

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
	if len(prev.answers) > 0 {
		log.Info("Scoring an earlier run's answers again, without calling the model", "answers", len(prev.answers))
		sink = &answeredStore{Store: store, answers: prev.answers}
	}
	runErr := eng.RunDraining(runCtx, tasks, sink, runner.Drain{Begin: ctx.Done(), Grace: o.GracePeriod})
	stopLoops()
	<-loopsDone

	// Whatever happened, save what finished.
	finished := runErr == nil && ctx.Err() == nil && store.Progress().Done == sh.End-sh.Start
	saveCtx, cancelSave := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelSave()
	if err := store.Flush(saveCtx, finished); err != nil {
		return errors.Join(runErr, fmt.Errorf("saving records: %w", err))
	}
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		return ctx.Err()
	case !finished:
		return fmt.Errorf("shard ended with %d of %d samples done", store.Progress().Done, sh.End-sh.Start)
	}
	log.Info("Finished a shard", "done", store.Progress().Done, "errored", store.Progress().Errored)
	return nil
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
// kube.ErrObsolete if it is gone or its run is no longer o.Run.
func currentEvaluation(ctx context.Context, c client.Client, o Options) (*v1alpha1.Evaluation, map[string]*v1alpha1.ModelEndpointSpec, error) {
	ev := &v1alpha1.Evaluation{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Evaluation}, ev); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, kube.ErrObsolete
		}
		return nil, nil, fmt.Errorf("reading the evaluation: %w", err)
	}
	v1alpha1.SetDefaults(&ev.Spec)
	if !cluster.IsRun(ev, o.Run) {
		return nil, nil, kube.ErrObsolete
	}
	endpoints, err := resolveEndpoints(ctx, c, o, ev)
	if err != nil {
		return nil, nil, err
	}
	return ev, endpoints, nil
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
