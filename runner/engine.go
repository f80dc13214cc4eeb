package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/score"
	"github.com/proctor-dev/proctor/runner/spend"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// Options tune an Engine. Zero values take the defaults.
type Options struct {
	Clock clockwork.Clock
	Log   logr.Logger
	// Shares says the plan's limits are this process's shares of keys that
	// the pacer paces against the providers (a runner pod): they are kept
	// exactly, without the wider spacing of a small limit's own pacing.
	Shares bool
	// Rand returns uniform numbers in [0, 1) for backoff jitter.
	Rand func() float64
	// Observer hears of every finished sample (progress displays).
	Observer Observer
	// Slack widens rate-limit windows; default ratelimit.DefaultSlack.
	Slack time.Duration
	// ThrottleCooldown is the least time between two halvings of a model's window; default 1s.
	ThrottleCooldown time.Duration
	// ThrottleLogEvery is the least time between two "still throttled" log
	// lines of one model; default 30s.
	ThrottleLogEvery time.Duration
	// Services, when the run has any, says whether they are up: no sample
	// starts while one is down, and a sample that fails while one was down
	// is its error.
	Services Services
	// RepairBackoff is the first wait before a broken slot's hook is tried
	// again (doubling up to 30s); default 1s.
	RepairBackoff time.Duration
	// Ledger, when the run has a budget, is what every call reserves its
	// worst case from before it is sent.
	Ledger *spend.Ledger
	// ScoreOnly scores the answers the sink holds (Answered) and calls no
	// model under evaluation: a sample without an answer is left as it is
	// (proctor score).
	ScoreOnly bool
	// Metrics, when set, count the run's calls, samples and throttling.
	Metrics *telemetry.Metrics
	// Tracer, when set, makes a trace of each sample: its attempts, scorers,
	// hooks and an agent's proxied calls.
	Tracer *telemetry.Tracer
	// BeginTask, when set, is called before a task's first sample is handed
	// to the model's slots (a model not in batch mode), while the samples of
	// the task before may still be in flight: a runner pod opens the task's
	// shard there, so that its shards follow one another without a pause.
	// No task begins once the run is stopping. An error begins no further
	// task of the model; its samples in flight finish, and Run returns it.
	BeginTask func(ctx context.Context, t Task) error
	// Limiters, when set, are models' rate limiters by name (a model, or an
	// agent endpoint's caller) from an engine before (Engine.Limiters),
	// taken as they are: a runner pod's worker runs its shards one after
	// another, an engine each, with one limiter a model, so that each
	// shard's calls are paced and counted with the last minute of the
	// shard before's. A new limiter's full bucket and empty log would add to
	// what the server still counts of the shard before.
	Limiters map[string]*ratelimit.Limiter
}

// Observer hears of finished samples. It must be safe for concurrent use and quick.
type Observer interface {
	SampleFinished(model, dataset string, rec *results.Record)
}

// Answered is a Sink that keeps earlier records of samples whose answers
// are to be scored again, without calling the model: their scoring failed
// (a retry of errors), or the scoring changed since.
type Answered interface {
	Answered(model, dataset string, index int) *results.Record
}

// Sink receives finished records: the checkpoint (results.Log).
type Sink = results.Log

// scorer is a scorer of the plan with the judge the engine gives it.
type scorer struct {
	score.Scorer
	judge score.JudgeFunc
	// batchJudge is the judge model when it runs in batch mode: the scorer
	// is left out when a sample is scored (its record awaits the verdict,
	// Record.JudgePending) and scored by the judge's batches once the
	// models have answered (judgeInBatches).
	batchJudge *modelRun
}

// Engine runs a plan.
type Engine struct {
	plan    *Plan
	opts    Options
	clock   clockwork.Clock
	log     logr.Logger
	models  map[string]*modelRun
	scorers []scorer
	// judged says a scorer calls a judge model, whose tokens each record counts.
	judged bool
	// redactor removes the plan's secrets, and their encodings, from what the
	// engine writes out; built once, as every record passes through it.
	redactor *provider.Redactor

	stop     chan struct{}
	stopOnce sync.Once
	// stopCtx ends with Stop: calls that are only waiting (for the window, the
	// limiter, a retry-after or a backoff) give up then, so a stopping run waits
	// only for requests actually in flight.
	stopCtx    context.Context
	stopCancel context.CancelFunc
	randMu     sync.Mutex

	// claimMu makes the models' claims of batches found at the provider one
	// at a time.
	claimMu sync.Mutex

	// exhausted is the budget's refusal that stopped the run, if one did.
	exhausted   error
	exhaustOnce sync.Once
}

// modelRun is a model's runtime state, shared by everything that calls it.
type modelRun struct {
	*Model
	// window bounds the calls in flight, shrinking on 429s.
	window  *ratelimit.Window
	gate    *ratelimit.Gate
	limiter *ratelimit.Limiter
	est     estimator
	// throttle tracks the model's 429s, for reporting and retry.maxThrottleWait.
	throttle throttle
	// shared, for a model calling through a ModelEndpoint in a local run, is
	// the endpoint's limiter, which every model calling through it reserves
	// from as well as from its own (then only a cap).
	shared *ratelimit.Limiter
	// pacer, for a model calling through a rate-limited key in a cluster,
	// spaces its calls with every other runner pod's through the key. It
	// changes while the model runs (a rateLimit added or removed mid-run).
	pacer atomic.Pointer[pacerRef]
	// inFlight bounds the model's calls in flight (its maxInFlight share);
	// sharedInFlight, locally, its endpoint's together with its other callers.
	inFlight, sharedInFlight *ratelimit.InFlight
	usage                    usageMeter
	// observed is what the provider's rate-limit headers said last, and when.
	observedMu sync.Mutex
	observed   ObservedLimits
	// proxies are an agent model's agent endpoints.
	proxies *agentProxies
	// forwarded: the calls of an agent endpoint, made for an agent (no cache).
	forwarded bool
	// prices, for forwarded calls, price the models the endpoint lists, by
	// the model id of the agent's request; Price prices the others.
	prices map[string]*spend.Price
	// metricName is its name in metrics: an agent endpoint's calls go by
	// their agent model's.
	metricName string
	// spanName and spanAttrs name and describe its attempts' spans (the
	// GenAI conventions'), made once.
	spanName  string
	spanAttrs []attribute.KeyValue
}

// priceOf is the price of a call of m in ctx: for an agent's call, its
// endpoint's price for the model it asked for, else m.Price.
func (m *modelRun) priceOf(ctx context.Context) *spend.Price {
	if m.prices != nil {
		if fc, ok := ctx.Value(forwardKey{}).(*forwardCall); ok {
			if p := m.prices[fc.model]; p != nil {
				return p
			}
		}
	}
	return m.Price
}

// concurrency is the number of samples the model may have in flight.
func (m *modelRun) concurrency() int { return max(1, m.Concurrency) }

// New prepares an engine for plan.
func New(plan *Plan, opts Options) (*Engine, error) {
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	if opts.Slack == 0 {
		opts.Slack = ratelimit.DefaultSlack
	}
	if opts.ThrottleCooldown == 0 {
		opts.ThrottleCooldown = time.Second
	}
	if opts.ThrottleLogEvery == 0 {
		opts.ThrottleLogEvery = 30 * time.Second
	}
	if opts.RepairBackoff == 0 {
		opts.RepairBackoff = time.Second
	}
	e := &Engine{plan: plan, opts: opts, clock: opts.Clock, log: opts.Log, models: map[string]*modelRun{}, stop: make(chan struct{}),
		redactor: provider.NewRedactor(plan.Secrets...)}
	e.stopCtx, e.stopCancel = context.WithCancel(context.Background())
	shared := map[string]*ratelimit.Limiter{}
	sharedInFlight := map[string]*ratelimit.InFlight{}
	for name, l := range plan.Endpoints {
		shared[name] = ratelimit.New(l, opts.Slack, opts.Clock)
		shared[name].SetBurst(ratelimit.Burst{Tokens: plan.EndpointBursts[name]})
		shared[name].SetExact(opts.Shares)
		if l.MaxInFlight > 0 {
			sharedInFlight[name] = ratelimit.NewInFlight(l.MaxInFlight)
		}
	}
	newRun := func(m *Model) *modelRun {
		own := opts.Limiters[m.Name]
		if own == nil {
			own = ratelimit.New(m.Limits, opts.Slack, opts.Clock)
		}
		own.SetBurst(ratelimit.Burst{Tokens: m.Burst})
		own.SetExact(opts.Shares)
		return &modelRun{
			Model:          m,
			window:         ratelimit.NewWindow(max(1, m.Concurrency), opts.ThrottleCooldown, opts.Clock),
			gate:           ratelimit.NewGate(opts.Clock),
			limiter:        own,
			inFlight:       ratelimit.NewInFlight(m.Limits.MaxInFlight),
			est:            newEstimator(m.MaxTokens),
			shared:         shared[m.Endpoint],
			sharedInFlight: sharedInFlight[m.Endpoint],
			usage:          usageMeter{clock: opts.Clock},
			metricName:     m.Name,
			spanName:       m.GenAI.SpanName(),
			spanAttrs:      append(m.GenAI.Attributes(), telemetry.AttrModel.String(m.Name), telemetry.AttrEndpoint.String(m.Endpoint)),
		}
	}
	for _, m := range plan.Models {
		run := newRun(m)
		e.models[m.Name] = run
		if len(m.AgentEndpoints) == 0 {
			continue
		}
		run.proxies = &agentProxies{sessions: map[string]*agentSession{}}
		for _, a := range m.AgentEndpoints {
			if e.models[a.Caller] != nil || a.Caller == "" || a.BaseURL == nil {
				return nil, fmt.Errorf("model %s: agent endpoint %s: no base URL, or a caller name %q already taken", m.Name, a.Endpoint, a.Caller)
			}
			// The calls of all the model's agents, paced as one caller.
			conc := agentCallWindow * max(1, m.Concurrency)
			c := &Model{Name: a.Caller, Provider: newForwarder(a, conc), Concurrency: conc, Limits: a.Limits,
				Endpoint: a.Endpoint, EndpointWeight: a.Weight, Timeout: m.Timeout, Price: m.Price,
				GenAI: telemetry.GenAI{Operation: telemetry.OperationChat, Provider: a.providerName(), BaseURL: a.BaseURL.String()}}
			cr := newRun(c)
			cr.forwarded, cr.prices, cr.metricName = true, a.Prices, m.Name
			cr.spanAttrs = append(c.GenAI.Attributes(), telemetry.AttrModel.String(m.Name), telemetry.AttrEndpoint.String(a.Endpoint))
			if len(a.Prices) > 0 {
				run.proxies.priced = true
			}
			e.models[a.Caller] = cr
			run.proxies.proxies = append(run.proxies.proxies, &agentProxy{ep: a, run: cr})
		}
	}
	for _, s := range plan.Scorers {
		var judge score.JudgeFunc
		var batchJudge *modelRun
		if s.JudgeModel != "" {
			jm := e.models[s.JudgeModel]
			if jm == nil {
				return nil, fmt.Errorf("scorer %s: judge model %q is not in the plan", s.Config.Name, s.JudgeModel)
			}
			judge = e.judgeFunc(jm)
			e.judged = true
			if jm.Batch != nil {
				batchJudge = jm
			}
		}
		sc := s.Built
		if sc == nil {
			var err error
			if sc, err = score.New(s.Config, judge); err != nil {
				return nil, fmt.Errorf("scorer %s: %w", s.Config.Name, err)
			}
		}
		e.scorers = append(e.scorers, scorer{Scorer: sc, judge: judge, batchJudge: batchJudge})
	}
	return e, nil
}

// Limiters are the models' rate limiters by name, for an engine after this
// one (Options.Limiters).
func (e *Engine) Limiters() map[string]*ratelimit.Limiter {
	out := make(map[string]*ratelimit.Limiter, len(e.models))
	for name, m := range e.models {
		out[name] = m.limiter
	}
	return out
}

// exhaust stops the run because the budget is exhausted: Run returns err.
func (e *Engine) exhaust(err error) {
	e.exhaustOnce.Do(func() {
		e.exhausted = err
		e.log.Info("Stopping: the budget is exhausted; samples in flight finish", "reason", err.Error())
		e.Stop()
	})
}

// Stop stops taking new samples. Requests in flight run to completion (or until
// the Run context is cancelled); samples that are only waiting (for a place in
// the window, the rate limiter, a retry-after or a backoff) stop at once and
// leave no record, so they run next time. It may be called more than once.
func (e *Engine) Stop() {
	e.stopOnce.Do(func() {
		close(e.stop)
		e.stopCancel()
	})
}

// Throttle reports whether the server is rate limiting a model, since when,
// and until when it asked to wait.
func (e *Engine) Throttle(model string) ThrottleStatus {
	m := e.models[model]
	if m == nil {
		return ThrottleStatus{}
	}
	return m.throttle.snapshot()
}

// Usage is what the engine sent to a model over the last minute.
func (e *Engine) Usage(model string) Usage {
	m := e.models[model]
	if m == nil {
		return Usage{}
	}
	return m.usage.lastMinute()
}

// ObservedLimits are what a model's provider said of its key's limits in the
// rate-limit headers of its latest answer that had them, and when.
type ObservedLimits struct {
	provider.RateLimits
	At time.Time
}

// observe returns the observer keeping m's latest rate-limit headers.
func (m *modelRun) observe(clock clockwork.Clock) provider.RateLimitObserver {
	return func(r provider.RateLimits) {
		now := clock.Now()
		m.observedMu.Lock()
		defer m.observedMu.Unlock()
		m.observed = ObservedLimits{RateLimits: r, At: now}
	}
}

// Observed is what a model's provider last said of its key's limits (zero
// when it never did).
func (e *Engine) Observed(model string) ObservedLimits {
	m := e.models[model]
	if m == nil {
		return ObservedLimits{}
	}
	m.observedMu.Lock()
	defer m.observedMu.Unlock()
	return m.observed
}

// SetLimits changes a model's budgets while running (a cluster re-dividing them).
func (e *Engine) SetLimits(model string, l ratelimit.Limits) error {
	m := e.models[model]
	if m == nil {
		return fmt.Errorf("no model %q", model)
	}
	m.limiter.SetLimits(l)
	m.inFlight.SetMax(l.MaxInFlight)
	return nil
}

// SetPacer has the calls of callers (models, and agents' callers) spaced by
// p after their own limiter: a cluster's pacer, for the callers of
// rate-limited keys; nil spaces them no more. It may be called while the
// engine runs: the calls that ask for their places next go by it.
func (e *Engine) SetPacer(p ratelimit.Pacer, callers ...string) {
	for _, c := range callers {
		if m := e.models[c]; m != nil {
			if p == nil {
				m.pacer.Store(nil)
			} else {
				m.pacer.Store(&pacerRef{p})
			}
		}
	}
}

// pacerRef holds a Pacer for an atomic.Pointer.
type pacerRef struct{ ratelimit.Pacer }

// ShareInFlight makes models share one bound on calls in flight (a runner
// pod's callers of one endpoint, whose places are pooled), set by SetLimits of
// any of them. Call it before Run.
func (e *Engine) ShareInFlight(models ...string) {
	f := ratelimit.NewInFlight(0)
	for _, name := range models {
		if m := e.models[name]; m != nil {
			m.inFlight = f
		}
	}
}

// InFlight is the number of a model's calls in flight (and about to be sent).
func (e *Engine) InFlight(model string) int64 {
	m := e.models[model]
	if m == nil {
		return 0
	}
	return m.inFlight.InUse()
}

// Pause holds every call to a model (a cluster shard waiting for its share of
// the model's budget) until Pause(model, false).
func (e *Engine) Pause(model string, paused bool) error {
	m := e.models[model]
	if m == nil {
		return fmt.Errorf("no model %q", model)
	}
	m.gate.Hold(paused)
	return nil
}

// Run evaluates tasks, putting every finished record into sink. Samples the sink
// already holds are skipped. Each model works through its tasks in order with its
// own window; different models run side by side. Run returns when all samples are
// done, after Stop once the samples in flight are, or when ctx ends (samples cut off
// then leave no record, so they run again next time). Per-sample failures are
// records, not errors: Run fails only if data cannot be read or the sink fails.
func (e *Engine) Run(ctx context.Context, tasks []Task, sink Sink) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	byModel := map[string][]Task{}
	var order []string
	for _, t := range tasks {
		if e.models[t.Model] == nil || e.plan.Dataset(t.Dataset) == nil {
			return fmt.Errorf("task %s/%s: unknown model or dataset", t.Model, t.Dataset)
		}
		if _, ok := byModel[t.Model]; !ok {
			order = append(order, t.Model)
		}
		byModel[t.Model] = append(byModel[t.Model], t)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	// Locally, the callers of a shared endpoint divide its limits by weight
	// while they run (the endpoint's own limiter keeps their sum exact).
	active := map[string]bool{}
	for _, name := range order {
		active[name] = true
		e.forCallers(name, func(c string) { active[c] = true })
	}
	e.divideEndpoints(active)
	// Each model's workers have slots of their own, numbered across models.
	slots, base := e.plan.SlotCount(tasks), 0
	for _, name := range order {
		first := base
		base += e.models[name].concurrency()
		wg.Go(func() {
			var err error
			if m := e.models[name]; m.Batch != nil {
				err = e.runBatchModel(ctx, cancel, m, byModel[name], sink)
			} else {
				err = e.runModel(ctx, cancel, m, byModel[name], sink, slotRange{first: first, total: slots})
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			delete(active, name)
			e.forCallers(name, func(c string) { delete(active, c) })
			e.divideEndpoints(active)
		})
	}
	wg.Wait()
	if len(errs) == 0 && !e.stopping(ctx) {
		// Every answer is in: the judges in batch mode judge them.
		if err := e.judgeInBatches(ctx, cancel, order, byModel, sink); err != nil {
			errs = append(errs, err)
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		errs = append(errs, cause)
	}
	// Every worker is done: exhausted is settled.
	if e.exhausted != nil {
		errs = append(errs, e.exhausted)
	}
	return errors.Join(errs...)
}

// forCallers calls fn with the callers of a model's agent endpoints.
func (e *Engine) forCallers(model string, fn func(caller string)) {
	if m := e.models[model]; m != nil && m.proxies != nil {
		for _, p := range m.proxies.proxies {
			fn(p.run.Name)
		}
	}
}

// divideEndpoints gives each active caller of a shared endpoint (a local
// run's Plan.Endpoints) its part of the endpoint's limits, by weight and
// within its own limits (WaterFill); what a caller that is done leaves goes
// to the others. A caller whose part is nothing in some limited dimension
// (more callers than calls in flight allowed, say) waits until it has one.
// Judges take no part: their calls are made inside their subjects' samples,
// which would wait for them; the endpoint's own limiter paces them with the
// rest.
func (e *Engine) divideEndpoints(active map[string]bool) {
	for ep, lim := range e.plan.Endpoints {
		var names []string
		for name, m := range e.models {
			if m.Endpoint == ep && active[name] && !m.JudgeOnly {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		weights := make([]int64, len(names))
		caps := make([]ratelimit.Limits, len(names))
		for i, name := range names {
			weights[i], caps[i] = e.models[name].EndpointWeight, e.models[name].Limits
		}
		for i, part := range ratelimit.Divide(lim, weights, caps) {
			m := e.models[names[i]]
			nothing := (lim.RequestsPerMinute > 0 && part.RequestsPerMinute == 0) || (lim.InputTokensPerMinute > 0 && part.InputTokensPerMinute == 0) ||
				(lim.OutputTokensPerMinute > 0 && part.OutputTokensPerMinute == 0) || (lim.MaxInFlight > 0 && part.MaxInFlight == 0)
			m.gate.Hold(nothing)
			if !nothing {
				own := part.Lesser(m.Limits)
				m.limiter.SetLimits(own)
				m.inFlight.SetMax(own.MaxInFlight)
			}
		}
	}
}

// slotRange is a model's slots: first to first+concurrency-1, of total.
type slotRange struct{ first, total int }

// runModel works through a model's tasks in order. Its concurrency is a pool of
// that many workers fed one sample at a time: as soon as one finishes the next
// starts (a sliding window), and workers keep their grown stacks between samples.
//
// A model whose quota does not recover (ThrottledOutError) stops alone: its
// samples in flight leave no record, the other models go on, and the error is
// returned.
func (e *Engine) runModel(ctx context.Context, fail context.CancelCauseFunc, m *modelRun, tasks []Task, sink Sink, slots slotRange) error {
	// What the model's end leaves running: the calls the provider accepted,
	// and the scoring of their answers (the judges' waits end with Stop).
	runWaits, stopRunWaits := context.WithCancel(ctx)
	defer stopRunWaits()
	defer context.AfterFunc(e.stopCtx, stopRunWaits)()
	ctx = context.WithValue(ctx, runKey{}, runScope{run: ctx, waits: runWaits})
	ctx, throttledOut := context.WithCancelCause(ctx)
	defer throttledOut(nil)
	// The waits before a request is sent end with Stop too: one context for the
	// model's calls (and the judge calls they make), not one per attempt.
	waits, stopWaits := context.WithCancel(ctx)
	defer stopWaits()
	defer context.AfterFunc(e.stopCtx, stopWaits)()
	ctx = context.WithValue(ctx, waitsKey{}, waits)
	if m.proxies != nil {
		stop, err := e.startProxies(m)
		if err != nil {
			return err
		}
		defer stop()
	}
	jobs := make(chan job)
	var workers sync.WaitGroup
	for w := range m.concurrency() {
		s := &slot{n: slots.first + w, of: slots.total}
		workers.Go(func() {
			for j := range jobs {
				// A broken slot, or a service that is down, starts no sample
				// (this one waits for it; the other slots go on).
				err := e.ready(ctx, s)
				if errors.Is(err, errStopping) {
					continue // the run is stopping: the sample runs next time
				}
				if err != nil {
					e.log.Error(err, "Stopped a model whose slot could not be repaired", "model", m.Name)
					throttledOut(err)
					return
				}
				e.opts.Metrics.SamplesInFlight(m.Name, 1)
				e.finish(ctx, fail, throttledOut, m, j, sink, s)
				e.opts.Metrics.SamplesInFlight(m.Name, -1)
			}
		})
	}
	var errs []error
	for _, t := range tasks {
		if e.opts.BeginTask != nil {
			if e.stopping(ctx) {
				break
			}
			if err := e.opts.BeginTask(ctx, t); err != nil {
				errs = append(errs, err)
				break
			}
		}
		if err := e.dispatch(ctx, m, t, sink, jobs); err != nil {
			errs = append(errs, err)
		}
	}
	close(jobs)
	workers.Wait()
	if cause := context.Cause(ctx); endsModel(cause) {
		errs = append(errs, cause)
	}
	return errors.Join(errs...)
}

// endsModel reports whether err ends a model's part of the run, leaving its
// unfinished samples without a record: its quota did not recover, or its
// provider is unavailable (the pod's agent executor is gone).
func endsModel(err error) bool {
	return isThrottledOut(err) || provider.IsUnavailable(err) || isSlotRepairError(err) || IsBudgetExceeded(err)
}

// IsBudgetExceeded reports whether err is, or wraps, a refusal of the budget.
func IsBudgetExceeded(err error) bool {
	var x *spend.ExceededError
	return errors.As(err, &x)
}

// job is one sample of one dataset.
type job struct {
	ds *Dataset
	s  dataset.Sample
	// answered is an earlier record with the model's answer, to score again.
	answered *results.Record
}

// dispatch streams one task's samples to the model's workers.
func (e *Engine) dispatch(ctx context.Context, m *modelRun, t Task, sink Sink, jobs chan<- job) error {
	ds := e.plan.Dataset(t.Dataset)
	r, closer, err := ds.Open()
	if err != nil {
		return fmt.Errorf("dataset %s: %w", ds.Name, err)
	}
	defer closer.Close()
	if t.Start > 0 {
		if err := skip(r, t.Start); err != nil {
			return fmt.Errorf("dataset %s: %w", ds.Name, err)
		}
	}
	for {
		if e.stopping(ctx) {
			return nil
		}
		s, err := r.Next()
		if errors.Is(err, io.EOF) || (err == nil && s.Index >= t.End) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dataset %s: %w", ds.Name, err)
		}
		if sink.Done(m.Name, ds.Name, s.Index) {
			continue
		}
		j := job{ds: ds, s: s}
		if a, ok := sink.(Answered); ok {
			j.answered = a.Answered(m.Name, ds.Name, s.Index)
		}
		if e.opts.ScoreOnly && (j.answered == nil || j.answered.ID != s.ID) {
			continue // nothing to score: left unanswered
		}
		select {
		case jobs <- j:
		case <-e.stop:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

func (e *Engine) stopping(ctx context.Context) bool {
	select {
	case <-e.stop:
		return true
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// skip advances r past its first n samples.
func skip(r dataset.Reader, n int) error {
	if s, ok := r.(dataset.Skipper); ok {
		return s.Skip(n)
	}
	for range n {
		if _, err := r.Next(); err != nil {
			return err
		}
	}
	return nil
}

// redact removes secrets from text the engine writes out.
func (e *Engine) redact(s string) string { return e.redactor.Redact(s) }

// redactToolCalls removes secrets from the tools a model called (their
// arguments are model output too). calls is not modified.
func (e *Engine) redactToolCalls(calls []provider.ToolCall) []provider.ToolCall {
	var out []provider.ToolCall
	for i, c := range calls {
		args := e.redact(string(c.Arguments))
		rc := provider.ToolCall{ID: e.redact(c.ID), Name: e.redact(c.Name), Arguments: c.Arguments}
		if args != string(c.Arguments) {
			rc.Arguments = json.RawMessage(args)
			if !json.Valid(rc.Arguments) {
				// The secret was not inside a JSON string: keep the record valid.
				rc.Arguments = json.RawMessage(`{"redacted":true}`)
			}
		}
		if rc.ID == c.ID && rc.Name == c.Name && args == string(c.Arguments) {
			if out != nil {
				out = append(out, c)
			}
			continue
		}
		if out == nil {
			out = append(make([]provider.ToolCall, 0, len(calls)), calls[:i]...)
		}
		out = append(out, rc)
	}
	if out == nil {
		return calls
	}
	return out
}

// cost is a record's cost of amount at the model's pricing: nil (unknown)
// when the model has none, or is an agent whose calls Proctor does not see
// (no agent endpoints). An agent's calls may be priced by their endpoints
// instead (per model id).
func (m *modelRun) cost(amount spend.Amount) *float64 {
	switch {
	case m.Agent && m.proxies == nil:
		return nil
	case m.Price == nil && (m.proxies == nil || !m.proxies.priced):
		return nil
	}
	return ptrDollars(amount)
}

// reportedCost is what an agent's run cost by the usage it reported: at
// the model's pricing, else what the agent said it cost (Claude Code's
// total_cost_usd), else unknown. An answer from the cache cost nothing.
func (m *modelRun) reportedCost(resp *provider.Response, cached bool) *float64 {
	switch {
	case m.Price == nil && resp.ReportedCost == nil:
		return nil
	case cached:
		return ptrDollars(0)
	case m.Price != nil:
		return ptrDollars(m.Price.Of(resp.Usage, false))
	}
	return ptrDollars(spend.FromDollars(*resp.ReportedCost))
}

func ptrDollars(a spend.Amount) *float64 {
	d := a.Dollars()
	return &d
}

// sleep waits d, or until ctx ends (its error) or the engine stops (errStopping).
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stopCtx.Done():
		return errStopping
	}
}

func (e *Engine) rand() float64 {
	e.randMu.Lock()
	defer e.randMu.Unlock()
	return e.opts.Rand()
}
