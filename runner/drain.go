package runner

import (
	"context"
	"time"
)

// Drain says how a run ends early, the same way for both drivers: a local
// run on the user's first interrupt, a runner pod on SIGTERM. Draining stops
// taking samples (Stop), lets the samples in flight finish within Grace, then
// cancels them; they leave no record and run again next time.
type Drain struct {
	// Begin starts draining when it is closed or receives.
	Begin <-chan struct{}
	// Grace bounds how long samples in flight may still take.
	Grace time.Duration
	// Hurry, when it is closed or receives while draining, cancels at once (a
	// second interrupt).
	Hurry <-chan struct{}
	// OnBegin, when set, is called as draining begins (to tell the user).
	OnBegin func()
}

// RunDraining is Run, ended early as d says. ctx ending cancels at once, as it
// does for Run.
func (e *Engine) RunDraining(ctx context.Context, tasks []Task, sink Sink, d Drain) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		select {
		case <-d.Begin:
		case <-runCtx.Done():
			return
		}
		e.Stop()
		if d.OnBegin != nil {
			d.OnBegin()
		}
		t := e.clock.NewTimer(d.Grace)
		defer t.Stop()
		select {
		case <-t.Chan():
		case <-d.Hurry:
		case <-runCtx.Done():
		}
		cancel()
	}()
	err := e.Run(runCtx, tasks, sink)
	cancel()
	<-drained
	return err
}
