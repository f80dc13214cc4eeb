package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/results"
)

// streams reports whether the worker runs its shards as one stream
// (runStream) rather than one after another (runShard). A stream keeps the
// model's slots busy from the first shard to the last; what it cannot carry
// across shards keeps each shard to itself:
//   - shares of a budget (a rate-limited model, a ModelEndpoint, spec.budget)
//     go to running shards, one engine's calls per share;
//   - the response cache answers from the current shard's earlier records
//     only (recordCache.use);
//   - a model or judge in batch mode sends a batch per shard, judged when
//     all its answers are in.
func (w *worker) streams() bool {
	if len(w.shards) < 2 || len(w.limitedNow())+len(w.viaEndpoint) > 0 || w.ev.Spec.Budget != nil {
		return false
	}
	if c := w.ev.Spec.Cache; c != nil && c.Enabled {
		return false
	}
	for _, name := range w.models {
		if m := w.p.Model(name); m != nil && m.Batch != nil {
			return false
		}
	}
	return true
}

// runStream evaluates the worker's shards with one engine, whose slots go
// from one shard's samples to the next's without waiting for the shard
// before to drain: a shard is opened (its head read, the pod's attempt
// written) when the shard before has handed its last sample to a slot, and
// it is saved as succeeded as soon as all its samples have records, while
// the next one runs. Each shard keeps what runShard would keep of it: its
// head, records, attempts and checkpoints. A pod that ends while two shards
// are open (the tail of one, the head of the next) leaves both resumable,
// and if it failed, an attempt counted at each.
func (w *worker) runStream(ctx context.Context) error {
	s := &stream{w: w, ctx: ctx, finished: make(chan *streamShard, len(w.shards))}
	eng, err := runner.New(w.p, runner.Options{Log: w.log, Shares: true, Metrics: w.o.Metrics, Tracer: w.tracer,
		Services: w.services(), BeginTask: s.begin})
	if err != nil {
		return &InvalidError{err}
	}
	s.eng = eng
	tasks := make([]runner.Task, len(w.shards))
	for i, sh := range w.shards {
		tasks[i] = runner.Task{Model: sh.Model, Dataset: sh.Dataset, Start: sh.Start, End: sh.End}
	}
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		s.saveFinished()
	}()
	// ctx ending (SIGTERM) drains: no new samples, and no new shard; those in
	// flight get the grace period.
	runErr := eng.RunDraining(context.WithoutCancel(ctx), tasks, s, runner.Drain{Begin: ctx.Done(), Grace: w.o.GracePeriod})
	close(s.finished)
	<-saved

	errs := []error{runErr}
	errs = append(errs, s.saveErrs...)
	for _, o := range s.opened {
		if o.done || o.complete {
			continue // succeeded before, or saved by saveFinished
		}
		o.stopCheckpoints()
		finished, err := w.flushShard(ctx, o.sh, o.store, o.attempts, runErr)
		switch {
		case err != nil:
			errs = append(errs, err)
		case !finished && runErr == nil && ctx.Err() == nil:
			errs = append(errs, fmt.Errorf("shard %s ended with %d of %d samples done", o.sh.Key(), o.store.Progress().Done, o.sh.End-o.sh.Start))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	w.log.Info("Finished the worker's shards", "shards", len(w.shards))
	return nil
}

// stream is the sink of a worker's stream of shards: each record goes to
// the store of the shard it belongs to.
type stream struct {
	w   *worker
	ctx context.Context // the pod's
	eng *runner.Engine

	// begun counts the shards begun: the newest's follower sets the
	// engine's limits.
	begun atomic.Int64

	mu sync.Mutex
	// opened are the shards begun, in order (the last ones still open).
	opened []*streamShard
	// finished takes the shards whose samples all have records, to save.
	finished chan *streamShard
	// saveErrs are saveFinished's failures.
	saveErrs []error
}

// streamShard is one shard of a stream, from its beginning.
type streamShard struct {
	sh       cluster.Shard
	log      logr.Logger
	store    *kube.Store
	sink     runner.Sink
	attempts int
	// done: the shard succeeded before the pod began it: its samples are
	// passed over.
	done bool
	// complete: all its samples have records; it is saved or being saved.
	complete        bool
	stopCheckpoints func()
}

func (o *streamShard) holds(dataset string, index int) bool {
	return o.sh.Dataset == dataset && index >= o.sh.Start && index < o.sh.End
}

// begin opens task t's shard (runner.Options.BeginTask), said running at
// once, with checkpoints of its own until it is saved.
func (s *stream) begin(_ context.Context, t runner.Task) error {
	w := s.w
	var sh cluster.Shard
	for _, x := range w.shards {
		if x.Dataset == t.Dataset && x.Start == t.Start && x.End == t.End {
			sh = x
		}
	}
	o := &streamShard{sh: sh, log: w.shardLog(sh), stopCheckpoints: func() {}}
	// The pod's ctx, not the engine's: a shard's head is read and written
	// whole even while the engine stops.
	store, attempts, err := w.openShard(s.ctx, sh)
	if err != nil {
		return err
	}
	if store == nil {
		o.done = true
		s.add(o)
		return nil
	}
	o.store, o.attempts, o.sink = store, attempts, store
	if mine := w.prev.answers[sh.Index]; len(mine) > 0 {
		delete(w.prev.answers, sh.Index) // the store takes them one by one
		o.log.Info("Scoring an earlier run's answers again, without calling the model", "answers", len(mine))
		o.sink = &answeredStore{Store: store, answers: mine}
	}
	if done := store.Progress().Done; done > 0 {
		o.log.Info("Resumed a shard", "done", done)
	}
	// A stream's shards have no shares at first (worker.streams), but a
	// rate limit may come mid-run: then the newest open shard's shares are
	// the engine's (the one before it, still open, sends only its last
	// samples' retries, and its own share, unused, keeps the sum within the
	// limit).
	seq := s.begun.Add(1)
	b := w.follower(sh, s.eng, store, nil, o.log)
	b.applies = func() bool { return s.begun.Load() == seq }
	loopCtx, stop := context.WithCancel(context.WithoutCancel(s.ctx))
	w.watch(loopCtx, b, o.log)
	if !b.follows() {
		err = store.Flush(s.ctx, false)
	} else {
		err = w.holdUntilGranted(s.ctx, b)
	}
	if err != nil {
		stop()
		return fmt.Errorf("beginning shard %s: %w", sh.Key(), err)
	}
	o.log.Info("Began a shard", "attempt", attempts+1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		b.loop(loopCtx)
	}()
	o.stopCheckpoints = func() {
		stop()
		<-stopped
	}
	s.add(o)
	// A shard whose samples all had records when begun (its pod ended before
	// saving it) is saved at once.
	s.completeIfDone(o)
	return nil
}

func (s *stream) add(o *streamShard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opened = append(s.opened, o)
}

// shardOf is the open shard that holds a sample (nil: none).
func (s *stream) shardOf(dataset string, index int) *streamShard {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The shards begun last are the ones records come to.
	for i := len(s.opened) - 1; i >= 0; i-- {
		if o := s.opened[i]; o.holds(dataset, index) {
			return o
		}
	}
	return nil
}

// Done implements results.Log.
func (s *stream) Done(model, dataset string, index int) bool {
	o := s.shardOf(dataset, index)
	return o == nil || o.done || o.sink.Done(model, dataset, index)
}

// Answered implements runner.Answered.
func (s *stream) Answered(model, dataset string, index int) *results.Record {
	if o := s.shardOf(dataset, index); o != nil && !o.done {
		if a, ok := o.sink.(runner.Answered); ok {
			return a.Answered(model, dataset, index)
		}
	}
	return nil
}

// Put implements results.Log: the record goes to its shard's store, and the
// shard that has them all is handed on to be saved.
func (s *stream) Put(model, dataset string, index int, rec *results.Record) error {
	o := s.shardOf(dataset, index)
	if o == nil || o.done {
		return fmt.Errorf("a record of sample %d of dataset %s, which no open shard of the pod holds", index, dataset)
	}
	if err := o.sink.Put(model, dataset, index, rec); err != nil {
		return err
	}
	s.completeIfDone(o)
	return nil
}

// completeIfDone hands o on to be saved once all its samples have records.
func (s *stream) completeIfDone(o *streamShard) {
	if o.store.Progress().Done != o.sh.End-o.sh.Start {
		return
	}
	s.mu.Lock()
	first := !o.complete
	o.complete = true
	s.mu.Unlock()
	if first {
		s.finished <- o // buffered for every shard of the worker
	}
}

// saveFinished saves the shards handed on, one at a time, until the stream
// ends. A shard that cannot be saved stops the stream, as it stopped
// runShard.
func (s *stream) saveFinished() {
	for o := range s.finished {
		o.stopCheckpoints()
		if _, err := s.w.flushShard(s.ctx, o.sh, o.store, o.attempts, nil); err != nil {
			s.mu.Lock()
			s.saveErrs = append(s.saveErrs, err)
			s.mu.Unlock()
			s.eng.Stop()
		}
	}
}
