package shard

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner"
)

// budgetFollower applies the shard's shares of the budget to the engine, and
// flushes the store on a timer (the flush also acknowledges the budget version).
type budgetFollower struct {
	c       client.Client
	o       Options
	ev      *v1alpha1.Evaluation
	shard   cluster.Shard
	eng     *runner.Engine
	store   *cluster.Store
	limited map[string]bool
	// models are the models the shard calls (its own and the judges).
	models []string
	log    logr.Logger

	lastRead time.Time
	fenced   bool
}

// loop flushes every FlushEvery (or when the store asks), and reads the budget
// every BudgetEvery, until ctx ends. A failed flush is logged and retried on the
// next tick; the final flush after the run reports any error that remains.
func (b *budgetFollower) loop(ctx context.Context) {
	flush := b.o.Clock.NewTicker(b.o.FlushEvery)
	defer flush.Stop()
	poll := b.o.Clock.NewTicker(b.o.BudgetEvery)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C():
			if len(b.limited) > 0 {
				b.poll(ctx)
			}
		case <-flush.C():
			b.flush(ctx)
		case <-b.store.Wake():
			b.flush(ctx)
		}
	}
}

func (b *budgetFollower) flush(ctx context.Context) {
	b.store.SetThrottled(throttled(b.eng, b.models))
	if err := b.store.Flush(ctx, false); err != nil && ctx.Err() == nil {
		b.log.Error(err, "Failed to checkpoint; will retry")
	}
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

// poll reads the budget and applies this shard's shares; if the budget has been
// unreadable for FenceAfter, it holds every limited model.
func (b *budgetFollower) poll(ctx context.Context) {
	budget, err := cluster.ReadBudget(ctx, b.c, b.ev)
	now := b.o.Clock.Now()
	if err != nil {
		if b.lastRead.IsZero() {
			b.lastRead = now
		}
		if !b.fenced && now.Sub(b.lastRead) >= b.o.FenceAfter {
			b.log.Info("Stopped calling rate-limited models: the budget has been unreadable too long", "error", err.Error())
			for m := range b.limited {
				_ = b.eng.Pause(m, true)
			}
			b.fenced = true
		}
		return
	}
	b.lastRead, b.fenced = now, false
	key := b.shard.Key()
	for m := range b.limited {
		share, limited, paused := budget.Lookup(m, key)
		if !limited {
			continue
		}
		if !paused {
			_ = b.eng.SetLimits(m, share)
		}
		_ = b.eng.Pause(m, paused)
	}
	b.store.SetBudget(budget.Version)
}
