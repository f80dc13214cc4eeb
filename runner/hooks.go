package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// Hooks are the commands an engine runs around each sample, in the sample's
// slot (spec.hooks). Setup is not the engine's: whoever starts the services
// runs it, once they are ready, before the engine runs.
type Hooks struct {
	Setup, BeforeSample, AfterSample *Hook
}

// Hook is one hook, ready to run. Provider runs its command: an agent
// provider, so that a hook runs where agents do (a local process, or an
// executor in a container of its own) and its templates render the same way.
type Hook struct {
	// Name is the hook's field (setup, beforeSample, afterSample), for errors.
	Name     string
	Provider provider.Provider
	// Timeout bounds one run; its process group is killed when it expires.
	Timeout time.Duration
}

// HookContext is what a hook's templates and environment see.
type HookContext struct {
	Slot, Slots    int
	Model, Dataset string
	// Sample is nil for setup.
	Sample *dataset.Sample
}

// HookError is a hook that failed: it exited non-zero, timed out, or could
// not be started.
type HookError struct {
	Hook string
	// Slot is the slot it ran in; -1 for setup.
	Slot     int
	TimedOut time.Duration
	Err      error
}

func (e *HookError) Error() string {
	where := ""
	if e.Slot >= 0 {
		where = fmt.Sprintf(" (slot %d)", e.Slot)
	}
	var exit *provider.ExitError
	switch {
	case e.TimedOut > 0:
		return fmt.Sprintf("hook %s%s timed out after %s and was killed", e.Hook, where, e.TimedOut)
	case errors.As(e.Err, &exit) && exit.Stderr != "":
		return fmt.Sprintf("hook %s%s exited with status %d: %s", e.Hook, where, exit.ExitCode, exit.Stderr)
	case errors.As(e.Err, &exit):
		return fmt.Sprintf("hook %s%s exited with status %d", e.Hook, where, exit.ExitCode)
	}
	return fmt.Sprintf("hook %s%s: %v", e.Hook, where, e.Err)
}

func (e *HookError) Unwrap() error { return e.Err }

// Run runs the hook once. A failure is a *HookError; a context that ended
// first (the run stopping) is its own error.
func (h *Hook) Run(ctx context.Context, hc HookContext) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	run, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req := &provider.Request{Slot: hc.Slot, Slots: hc.Slots, Model: hc.Model, Dataset: hc.Dataset, Env: SlotEnv(hc.Slot, hc.Slots)}
	slot := hc.Slot
	if hc.Sample != nil {
		req.SampleID, req.Sample = hc.Sample.ID, hc.Sample.Fields
	} else {
		slot = -1
	}
	_, err := h.Provider.Complete(run, req)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(run.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		// The provider's own deadline may end first: a pod's agent executor
		// mirrors the time left, rounded down to the millisecond, and its
		// answer can arrive before our timer has fired.
		return &HookError{Hook: h.Name, Slot: slot, TimedOut: h.Timeout, Err: err}
	}
	return &HookError{Hook: h.Name, Slot: slot, Err: err}
}

// SlotEnv is the environment that tells an agent or a hook its slot.
func SlotEnv(slot, slots int) []string {
	return []string{"PROCTOR_SLOT=" + strconv.Itoa(slot), "PROCTOR_SLOTS=" + strconv.Itoa(slots)}
}

// Services tells the engine whether the run's services (spec.services) are
// up: a local supervisor of their processes, or a runner pod's view of its
// sidecars. It must be safe for concurrent use.
type Services interface {
	// Mark is a point in the services' history, to compare with later.
	Mark() uint64
	// Since returns a *ServiceError naming a service that is down now, or
	// went down (stopped being ready, exited, restarted) after mark; nil if
	// none did.
	Since(mark uint64) error
	// WaitReady returns when every service is ready, or ctx ends (its error).
	WaitReady(ctx context.Context) error
}

// ServiceError is a service that was not up while a sample ran.
type ServiceError struct {
	Service string
	// What happened: "restarted", "was not ready", "exited"...
	What string
}

func (e *ServiceError) Error() string { return fmt.Sprintf("service %s %s", e.Service, e.What) }

// SlotCount is the number of slots a run of tasks needs: one per sample a
// model under evaluation may have in flight, over all the models.
func (p *Plan) SlotCount(tasks []Task) int {
	seen := map[string]bool{}
	n := 0
	for _, t := range tasks {
		if m := p.Model(t.Model); m != nil && !seen[t.Model] {
			seen[t.Model] = true
			n += max(1, m.Concurrency)
		}
	}
	return n
}

// slot is one worker's slot: no two samples in flight share one, so a sample
// may use "its" database or directory.
type slot struct {
	n, of int
	// broken is the hook run that failed in the slot, to repeat until it
	// succeeds before the slot takes another sample; nil when the slot is fine.
	broken *brokenSlot
}

type brokenSlot struct {
	hook  *Hook
	hc    HookContext
	since time.Time
	err   error
}

// SlotRepairError ends a model's run: a slot's hook did not succeed again
// within the repair timeout, or a service stayed down as long.
type SlotRepairError struct {
	Slot    int
	Timeout time.Duration
	Err     error
}

func (e *SlotRepairError) Error() string {
	return fmt.Sprintf("slot %d was still broken after %s: %v", e.Slot, e.Timeout, e.Err)
}

func (e *SlotRepairError) Unwrap() error { return e.Err }

func isSlotRepairError(err error) bool {
	var s *SlotRepairError
	return errors.As(err, &s)
}

// repairMaxDelay bounds the backoff between two tries at a broken slot.
const repairMaxDelay = 30 * time.Second

// ready readies a worker's slot for its next sample: it waits for the
// services, then repeats a failed hook until it succeeds. It returns nil when
// the slot is ready, errStopping when the run is stopping first, and a
// *SlotRepairError when the slot stays broken (or a service down) past the
// repair timeout.
func (e *Engine) ready(ctx context.Context, s *slot) error {
	timeout := e.plan.RepairTimeout
	if timeout <= 0 {
		timeout = defaultRepairTimeout
	}
	if e.opts.Services != nil {
		if err := e.waitServices(ctx, timeout); err != nil {
			return &SlotRepairError{Slot: s.n, Timeout: timeout, Err: err}
		}
		if e.stopping(ctx) {
			return errStopping
		}
	}
	b := s.broken
	if b == nil {
		return nil
	}
	delay := e.opts.RepairBackoff
	for {
		if e.sleep(ctx, delay) != nil {
			return errStopping
		}
		err := b.hook.Run(ctx, b.hc)
		if err == nil {
			e.log.Info("Repaired a slot", "slot", s.n, "hook", b.hook.Name, "after", e.clock.Since(b.since).Round(time.Millisecond).String())
			s.broken = nil
			e.opts.Metrics.SlotsBroken(b.hc.Model, -1)
			return nil
		}
		if ctx.Err() != nil {
			return errStopping
		}
		b.err = err
		if e.clock.Since(b.since) >= timeout {
			return &SlotRepairError{Slot: s.n, Timeout: timeout, Err: e.redactErr(err)}
		}
		delay = min(2*delay, repairMaxDelay)
	}
}

// defaultRepairTimeout is the API's default hooks.repairTimeout, for plans
// that set none (tests).
const defaultRepairTimeout = 5 * time.Minute

// waitServices waits for every service to be ready, up to timeout; ctx
// ending (the run stopping) is not an error.
func (e *Engine) waitServices(ctx context.Context, timeout time.Duration) error {
	wait, cancel := clockwork.WithTimeout(ctx, e.clock, timeout)
	defer cancel()
	err := e.opts.Services.WaitReady(wait)
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		if down := e.opts.Services.Since(e.opts.Services.Mark()); down != nil {
			return fmt.Errorf("%w for %s", down, timeout)
		}
	}
	return err
}

// brokeSlot marks s broken by a failed run of hook.
func (e *Engine) brokeSlot(s *slot, hook *Hook, hc HookContext, err error) {
	if s.broken == nil {
		s.broken = &brokenSlot{hook: hook, hc: hc, since: e.clock.Now()}
		e.opts.Metrics.SlotsBroken(hc.Model, 1)
	}
	s.broken.err = err
	e.log.Info("Took a slot out of use until a hook succeeds on it", "slot", s.n, "hook", hook.Name, "error", e.redact(err.Error()))
}

// repairHook is the hook that repairs a slot after hook failed in it: the
// hook that prepares a slot, else hook itself.
func (h *Hooks) repairHook(failed *Hook) *Hook {
	if h.BeforeSample != nil {
		return h.BeforeSample
	}
	return failed
}

// redactErr is err with the plan's secrets removed from its text.
func (e *Engine) redactErr(err error) error { return errors.New(e.redact(err.Error())) }

func (p *Plan) beforeSample() *Hook {
	if p.Hooks == nil {
		return nil
	}
	return p.Hooks.BeforeSample
}

func (p *Plan) afterSample() *Hook {
	if p.Hooks == nil {
		return nil
	}
	return p.Hooks.AfterSample
}

// runHook runs hook, if any, in slot s; a failure takes the slot out of use
// until a hook succeeds on it.
func (e *Engine) runHook(ctx context.Context, hook *Hook, hc HookContext, s *slot) error {
	if hook == nil {
		return nil
	}
	hctx, span := e.startHook(ctx, hook, hc)
	err := hook.Run(hctx, hc)
	if err != nil {
		telemetry.Fail(span, "hook", e.redact(err.Error()))
	}
	span.End()
	if isHookError(err) {
		repair := hook
		if e.plan.Hooks != nil {
			repair = e.plan.Hooks.repairHook(hook)
		}
		e.brokeSlot(s, repair, hc, err)
	}
	return err
}

func isHookError(err error) bool {
	var h *HookError
	return errors.As(err, &h)
}

// servicesDown names a service that went down since mark, if any.
func (e *Engine) servicesDown(mark uint64) error {
	if e.opts.Services == nil {
		return nil
	}
	return e.opts.Services.Since(mark)
}
