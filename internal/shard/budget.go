package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/ratelimit"
	"github.com/proctor-dev/proctor/runner/spend"
)

// budgetFollower applies the shard's shares of the budgets to the engine, and
// flushes the store on a timer (the flush also acknowledges the budget
// versions). A model may have a share of two budgets: its Evaluation's (its
// own rateLimit, divided among the Evaluation's shards) and, calling through a
// ModelEndpoint, the endpoint's (its limits, divided among every shard of
// every Evaluation calling through it). Each keeps its own sum within its
// limit, so the engine applies the lesser of the two in each dimension.
//
// A rateLimit may be added to a model, or removed, while the run goes (the
// run hash leaves it out): the Evaluation's budget then gains or loses the
// model's entry, and the follower takes shares of it, or stops, from the
// next version it reads. So it reads that budget (on its watch) even while
// none of its models is limited.
type budgetFollower struct {
	c     client.Client
	o     Options
	ev    *v1alpha1.Evaluation
	run   string
	shard cluster.Shard
	eng   *runner.Engine
	store *kube.Store
	// limited are the models whose calls take shares of the Evaluation's
	// budget now: at first those the pod found limited, then those the
	// budget has an entry for.
	limited map[string]bool
	// pacer, if the pod has one, spaces the calls of the limited models (and
	// of the callers of endpoints, set by the worker) with other pods'.
	pacer ratelimit.Pacer
	// applies says whether the follower sets the engine's limits: a stream's
	// engine runs two shards at a time, and follows the newer's shares (nil:
	// always).
	applies func() bool
	// onLimited, if set, hears of the limited models each time they change.
	onLimited func(map[string]bool)
	// viaEndpoint maps the models calling through a ModelEndpoint to its name
	// (and the callers that are agents' calls, MODEL/ENDPOINT).
	viaEndpoint map[string]string
	// agentOf maps the callers that are agents' calls to the agent model.
	agentOf map[string]string
	// models are the models the shard calls (its own and the judges).
	models []string
	log    logr.Logger
	// ledger, when the run has a budget, is what the engine's calls reserve
	// from: its limit is the shard's allowance.
	ledger *spend.Ledger
	// allowed: the shard has had an allowance.
	allowed bool

	lastRead time.Time
	fenced   bool
	// own and endpoint are each model's share of its Evaluation's budget and of
	// its endpoint's, as last read.
	own, endpoint map[string]share
	// endpointRead is when each endpoint's budget was last read; read what
	// was read of it, acks what of it is in force.
	endpointRead map[string]time.Time
	read, acks   map[string]cluster.EndpointAck
	// places says which endpoints' budgets limit the calls in flight.
	places map[string]bool
	// granted are the models that have had a share: until each has, the
	// budgets are read every FirstGrantEvery instead of every BudgetEvery.
	granted map[string]bool
	// versions is what the last poll applied, to acknowledge a change at once.
	versions string
	// nudged says a budget changed (watchBudgets): it is read at once.
	nudged chan struct{}
	// watchFailed says a budget's watch failed: the budgets are read on the
	// timer even while the follower follows none.
	watchFailed atomic.Bool
}

// share is a model's part of one budget.
type share struct {
	limits ratelimit.Limits // zero in a dimension: no limit there
	paused bool
	// placesOnly: paused only for want of places in flight (its grant has
	// some in every other limited dimension); the pod's pool may lend some.
	placesOnly bool
}

// loop flushes every FlushEvery (or when the store asks), and reads the
// budgets every BudgetEvery (every FirstGrantEvery while a model waits for its
// first share) and when a watch says one changed, until ctx ends. A poll that applied a new budget version is
// acknowledged at once (a flush): the controllers count a lowered share at its
// old value until then, so a shard that joins gets its share as soon as the
// others have acknowledged making room. A failed flush is logged and retried
// on the next tick; the final flush after the run reports any error that
// remains.
func (b *budgetFollower) loop(ctx context.Context) {
	flush := b.o.Clock.NewTicker(b.o.FlushEvery)
	defer flush.Stop()
	poll := b.o.Clock.NewTicker(b.o.BudgetEvery)
	defer poll.Stop()
	first := b.o.Clock.NewTicker(b.o.FirstGrantEvery)
	defer first.Stop()
	firstC := first.C()
	if !b.follows() || !b.waitingForFirstShare() {
		first.Stop()
		firstC = nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-firstC:
			if b.poll(ctx) {
				b.flush(ctx)
			}
			if !b.waitingForFirstShare() {
				first.Stop()
				firstC = nil
			}
		case <-poll.C():
			// Following nothing, the watch says when a limit comes.
			if (b.follows() || b.watchFailed.Load()) && b.poll(ctx) {
				b.flush(ctx)
			}
		case <-b.nudged:
			if b.poll(ctx) {
				b.flush(ctx)
			}
		case <-flush.C():
			b.flush(ctx)
		case <-b.store.Wake():
			b.flush(ctx)
		}
	}
}

// follows reports whether the shard takes shares of a budget: a rate-limited
// model, a model calling through a ModelEndpoint, or the run's spend budget.
func (b *budgetFollower) follows() bool {
	return len(b.limited)+len(b.viaEndpoint) > 0 || b.ledger != nil
}

// waitingForFirstShare reports whether a limited model has not had a share
// yet, or the shard no allowance of the budget.
func (b *budgetFollower) waitingForFirstShare() bool {
	if b.ledger != nil && !b.allowed {
		return true
	}
	for m := range b.limited {
		if !b.granted[m] {
			return true
		}
	}
	for m := range b.viaEndpoint {
		if !b.granted[m] {
			return true
		}
	}
	return false
}

func (b *budgetFollower) flush(ctx context.Context) {
	if err := b.checkpoint(ctx); err != nil && ctx.Err() == nil {
		b.log.Error(err, "Failed to checkpoint; will retry")
	}
}

// checkpoint writes the head with what the follower knows.
func (b *budgetFollower) checkpoint(ctx context.Context) error {
	if b.ledger != nil {
		b.store.SetLedger(cluster.NewLedgerReport(b.ledger.State()))
	}
	b.store.SetThrottled(throttled(b.eng, b.models))
	b.store.SetEndpoints(maps.Clone(b.acks), b.usage())
	b.store.SetProvider(b.providerSeen())
	return b.store.Flush(ctx, false)
}

// throttled reports the models that the server is rate limiting now.
func throttled(eng *runner.Engine, models []string) map[string]cluster.Throttle {
	var out map[string]cluster.Throttle
	for _, m := range models {
		st := eng.Throttle(m)
		if !st.Throttled() {
			continue
		}
		t := cluster.Throttle{Since: metav1.NewTime(st.Since), Refusals: st.Refusals}
		if !st.Until.IsZero() {
			t.Until = &metav1.Time{Time: st.Until}
		}
		if out == nil {
			out = map[string]cluster.Throttle{}
		}
		out[m] = t
	}
	return out
}

// poll reads the budgets and applies this shard's shares. It reports whether
// a budget version changed since the last poll (to acknowledge at once).
func (b *budgetFollower) poll(ctx context.Context) bool {
	if b.own == nil {
		b.own, b.endpoint = map[string]share{}, map[string]share{}
		b.endpointRead, b.acks, b.read = map[string]time.Time{}, map[string]cluster.EndpointAck{}, map[string]cluster.EndpointAck{}
		b.places = map[string]bool{}
		b.granted = map[string]bool{}
		// Nothing is sent before a budget says how much.
		for m := range b.limited {
			b.own[m] = share{paused: true}
		}
		for m := range b.viaEndpoint {
			b.endpoint[m] = share{paused: true}
		}
	}
	b.pollOwn(ctx)
	for _, ep := range sortedValues(b.viaEndpoint) {
		b.pollEndpoint(ctx, ep)
	}
	// The models, and the callers of endpoints that are not models (agents'
	// calls through their proxies).
	names := slices.Clone(b.models)
	for _, c := range slices.Sorted(maps.Keys(b.viaEndpoint)) {
		if !slices.Contains(names, c) {
			names = append(names, c)
		}
	}
	endpoint := b.pooledEndpointShares()
	applies := b.applies == nil || b.applies()
	paused := map[string]bool{}
	for _, m := range names {
		if b.viaEndpoint[m] == "" && applies {
			// Its own limit's calls are spaced by the pacer; a model whose
			// limit was removed goes unlimited, unpaced and unheld.
			var p ratelimit.Pacer
			if b.limited[m] {
				p = b.pacer
			}
			b.eng.SetPacer(p, m)
		}
		if !b.limited[m] && b.viaEndpoint[m] == "" {
			if applies {
				_ = b.eng.SetLimits(m, ratelimit.Limits{})
			}
			paused[m] = false
			continue
		}
		sh := combine(b.own[m], endpoint[m])
		if !sh.paused {
			if applies {
				_ = b.eng.SetLimits(m, sh.limits)
			}
			b.granted[m] = true
		}
		paused[m] = sh.paused
	}
	// An agent whose calls are held starts no sample: it would wait for its
	// endpoint within its own timeout.
	for caller, model := range b.agentOf {
		if paused[caller] {
			paused[model] = true
		} else if _, ok := paused[model]; !ok {
			paused[model] = false
		}
	}
	if applies {
		for m, p := range paused {
			_ = b.eng.Pause(m, p)
		}
		if b.onLimited != nil {
			b.onLimited(maps.Clone(b.limited))
		}
	}
	b.acknowledge(endpoint)
	versions := fmt.Sprint(b.store.Progress().Budget, b.acks)
	changed := versions != b.versions
	b.versions = versions
	return changed
}

// pollOwn reads the Evaluation's budget; if it has been unreadable for
// FenceAfter, it holds every limited model.
func (b *budgetFollower) pollOwn(ctx context.Context) {
	budget, err := kube.ReadBudget(ctx, b.c, b.ev)
	now := b.o.Clock.Now()
	if apierrors.IsNotFound(err) && len(b.limited) == 0 && b.ledger == nil {
		// The controller makes it for the first limit: none yet.
		return
	}
	if err != nil {
		if b.lastRead.IsZero() {
			b.lastRead = now
		}
		if !b.fenced && now.Sub(b.lastRead) >= b.o.FenceAfter {
			b.log.Info("Stopped calling rate-limited models: the budget has been unreadable too long", "error", err.Error())
			for m := range b.limited {
				b.own[m] = share{paused: true}
			}
			b.fenced = true
		}
		return
	}
	b.lastRead, b.fenced = now, false
	key := b.shard.Key()
	b.followLimits(budget)
	for m := range b.limited {
		b.own[m] = shareIn(budget, m, key)
	}
	if b.ledger != nil && budget.Spend != nil {
		// An allowance is never lowered while the shard runs: no fence is
		// needed, what was read stays safe to spend.
		a, ok := budget.Spend.Allowances[key]
		b.ledger.SetLimit(allowanceLimit(b.ev.Spec.Budget, a))
		b.allowed = b.allowed || ok
	}
	b.store.SetBudget(budget.Version)
}

// followLimits takes the models the divided budget has an entry for as the
// limited ones: a limit added mid-run is followed from now on, and a removed
// one no more. Until the first division (version 0), the models found limited
// at the start wait for it.
func (b *budgetFollower) followLimits(budget *cluster.Budget) {
	if budget.Version == 0 {
		return
	}
	for _, m := range b.models {
		_, limited, _ := budget.Lookup(m, b.shard.Key())
		switch {
		case limited && !b.limited[m]:
			b.limited[m] = true
			b.log.Info("Began taking shares of a rate limit added to the spec", "model", m)
		case !limited && b.limited[m]:
			delete(b.limited, m)
			delete(b.own, m)
			delete(b.granted, m)
			b.log.Info("Stopped taking shares of a rate limit removed from the spec", "model", m)
		}
	}
}

// allowanceLimit is the ledger limit of an allowance of budget: each bounded
// dimension at the allowance, and at 1 (nothing can be spent) before any.
func allowanceLimit(budget *v1alpha1.Budget, a spend.Totals) spend.Limit {
	var l spend.Limit
	if budget.MaxCost != nil {
		l.Cost = max(a.Cost, spend.Nothing)
	}
	if budget.MaxTokens != nil {
		l.Tokens = max(a.Tokens, 1)
	}
	return l
}

// pollEndpoint reads a ModelEndpoint's budget. Its models stop at once when the
// endpoint is gone, and when its budget has been unreadable for FenceAfter.
func (b *budgetFollower) pollEndpoint(ctx context.Context, ep string) {
	budget, uid, err := kube.ReadEndpointBudget(ctx, b.c, b.ev.Namespace, ep)
	now := b.o.Clock.Now()
	set := func(s func(model string) share) {
		for m, e := range b.viaEndpoint {
			if e == ep {
				b.endpoint[m] = s(m)
			}
		}
	}
	switch {
	case errors.Is(err, cluster.ErrEndpointGone):
		if _, had := b.acks[ep]; had || b.endpointRead[ep].IsZero() {
			b.log.Info("Stopped calling models of a ModelEndpoint that is gone, until it is back", "endpoint", ep)
		}
		delete(b.acks, ep)
		delete(b.read, ep)
		b.endpointRead[ep] = now
		set(func(string) share { return share{paused: true} })
		return
	case err != nil:
		if b.endpointRead[ep].IsZero() {
			b.endpointRead[ep] = now
		}
		if now.Sub(b.endpointRead[ep]) >= b.o.FenceAfter {
			set(func(string) share { return share{paused: true} })
		}
		return
	}
	b.endpointRead[ep] = now
	set(func(m string) share {
		return shareIn(budget, ep, cluster.EndpointUserKey(b.ev.Name, b.run, b.shard, m))
	})
	b.read[ep] = cluster.EndpointAck{UID: uid, Version: budget.Version}
	mb := budget.Models[ep]
	b.places[ep] = mb != nil && mb.Limits.MaxInFlight > 0
}

// acknowledge acknowledges each endpoint's budget as read once it is in
// force: at once for the per-minute limits (the limiter counts what was sent
// before at the limit then), and for places in flight once the calls over the
// pod's pool (its callers' places together; none while all are held) have
// ended.
func (b *budgetFollower) acknowledge(endpoint map[string]share) {
	for ep, ack := range b.read {
		if b.places[ep] {
			var callers []string
			for c, e := range b.viaEndpoint {
				if e == ep {
					callers = append(callers, c)
				}
			}
			// The callers share one bound (Engine.ShareInFlight): the pool.
			if !inForce(endpoint, callers, b.eng.InFlight(callers[0])) {
				continue
			}
		}
		b.acks[ep] = ack
	}
}

// pooledEndpointShares are the callers' shares of their endpoints with the
// places in flight of each endpoint's callers in this pod pooled: the
// engine gives them one bound (Engine.ShareInFlight), so that a model whose
// own grant has no place may use its judge's, and the other way round (a
// sample waits for its judge: apart, one holding the places and the other
// none would wait for each other forever).
func (b *budgetFollower) pooledEndpointShares() map[string]share {
	out := maps.Clone(b.endpoint)
	for _, ep := range sortedValues(b.viaEndpoint) {
		var callers []string
		for c, e := range b.viaEndpoint {
			if e == ep {
				callers = append(callers, c)
			}
		}
		for c, sh := range poolPlaces(b.endpoint, callers) {
			out[c] = sh
		}
	}
	return out
}

// poolPlaces pools the places in flight of callers' shares: each that is not
// held for another reason gets the sum of their places, if any.
func poolPlaces(shares map[string]share, callers []string) map[string]share {
	var pool int64
	for _, c := range callers {
		if sh := shares[c]; !sh.paused || sh.placesOnly {
			pool += sh.limits.MaxInFlight
		}
	}
	out := map[string]share{}
	for _, c := range callers {
		sh := shares[c]
		if pool > 0 && (!sh.paused || sh.placesOnly) {
			sh.paused, sh.placesOnly = false, false
			sh.limits.MaxInFlight = pool
		}
		out[c] = sh
	}
	return out
}

// inForce reports whether the pooled shares of callers hold with n calls
// in flight: at most the pool (what any caller not held has), none while all
// are held.
func inForce(shares map[string]share, callers []string, n int64) bool {
	var pool int64
	for _, c := range callers {
		if sh := shares[c]; !sh.paused {
			pool = max(pool, sh.limits.MaxInFlight)
		}
	}
	return n <= pool
}

// shareIn is the share of key under entry name of a budget: paused while the
// budget is not divided yet (version 0), no limit when it has no entry of that
// name (none declared, or the limit was removed), else the key's grant, paused
// while it has none.
func shareIn(b *cluster.Budget, name, key string) share {
	if b.Version == 0 {
		return share{paused: true}
	}
	lim, limited, paused := b.Lookup(name, key)
	if !limited {
		return share{}
	}
	sh := share{limits: lim, paused: paused}
	if mb := b.Models[name]; paused && !b.Held && mb != nil {
		if _, granted := mb.Grants[key]; granted {
			// Paused for want of places alone?
			l := mb.Limits
			sh.placesOnly = l.MaxInFlight > 0 && lim.MaxInFlight == 0 &&
				(l.RequestsPerMinute == 0 || lim.RequestsPerMinute > 0) &&
				(l.InputTokensPerMinute == 0 || lim.InputTokensPerMinute > 0) &&
				(l.OutputTokensPerMinute == 0 || lim.OutputTokensPerMinute > 0)
		}
	}
	return sh
}

// combine is the lesser of two shares in each dimension (zero: no limit), and
// paused if either is.
func combine(a, b share) share {
	return share{paused: a.paused || b.paused, limits: a.limits.Lesser(b.limits)}
}

// usage is what the shard sent to each caller of a limited key (a model
// calling through an endpoint, or with a rateLimit) over the last minute. Of
// a stream's open shards only the newest says it: one engine sent for both,
// and the controller sums the running shards' usage.
func (b *budgetFollower) usage() map[string]cluster.Usage {
	if len(b.viaEndpoint)+len(b.limited) == 0 || b.applies != nil && !b.applies() {
		return nil
	}
	out := map[string]cluster.Usage{}
	for _, m := range b.callers() {
		u := b.eng.Usage(m)
		out[m] = cluster.Usage{Requests: u.Requests, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, Throttled: u.Throttled}
	}
	return out
}

// callers are the callers of limited keys: the models with a rateLimit, and
// the callers of endpoints.
func (b *budgetFollower) callers() []string {
	out := slices.Collect(maps.Keys(b.viaEndpoint))
	for m := range b.limited {
		if b.viaEndpoint[m] == "" {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// providerSeen is what the providers' rate-limit headers last said of the
// keys of the shard's callers, those they said something of.
func (b *budgetFollower) providerSeen() map[string]cluster.ProviderSeen {
	var out map[string]cluster.ProviderSeen
	names := b.callers()
	for _, m := range b.models {
		if !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	for _, m := range names {
		o := b.eng.Observed(m)
		if o.IsZero() {
			continue
		}
		if out == nil {
			out = map[string]cluster.ProviderSeen{}
		}
		out[m] = cluster.ProviderSeen{RateLimits: o.RateLimits, At: metav1.NewTime(o.At)}
	}
	return out
}

func sortedValues(m map[string]string) []string {
	out := slices.Collect(maps.Values(m))
	slices.Sort(out)
	return slices.Compact(out)
}

// budgetNames are the ConfigMaps whose budgets the shard follows: its
// Evaluation's (for its own rate limits and spend, and for limits that may
// be added) and its endpoints'.
func (b *budgetFollower) budgetNames() []string {
	names := []string{cluster.BudgetName(b.ev.Name)}
	for _, ep := range sortedValues(b.viaEndpoint) {
		names = append(names, cluster.EndpointBudgetName(ep))
	}
	return names
}
