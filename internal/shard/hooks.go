package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/provider"
)

// HookFailedError is a hook that failed for good: the setup hook, or a slot
// that hooks.repairTimeout did not see repaired. The pod exits with
// cluster.ExitHookFailed.
type HookFailedError struct{ Err error }

func (e *HookFailedError) Error() string { return e.Err.Error() }
func (e *HookFailedError) Unwrap() error { return e.Err }

// IsHookFailure reports whether err ends a shard on a hook.
func IsHookFailure(err error) bool {
	var h *HookFailedError
	var s *runner.SlotRepairError
	return errors.As(err, &h) || errors.As(err, &s)
}

// setup runs the setup hook, once the pod's services are ready (the kubelet
// started the runner after their startup probes; their readiness may lag).
func setup(ctx context.Context, p *runner.Plan, tasks []runner.Task, svc runner.Services, log logr.Logger) error {
	if p.Hooks == nil || p.Hooks.Setup == nil {
		return nil
	}
	if svc != nil {
		timeout := p.RepairTimeout
		wait, cancel := context.WithTimeout(ctx, timeout)
		err := svc.WaitReady(wait)
		cancel()
		if err != nil && ctx.Err() == nil {
			down := svc.Since(svc.Mark())
			return &HookFailedError{fmt.Errorf("spec.hooks.setup did not run: %w for %s", down, timeout)}
		}
	}
	slots := p.SlotCount(tasks)
	start := time.Now()
	if err := p.Hooks.Setup.Run(ctx, runner.HookContext{Slots: slots, Model: tasks[0].Model}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Its output may hold what hooks.env passed on.
		return &HookFailedError{fmt.Errorf("spec.hooks.setup: %s", provider.NewRedactor(p.Secrets...).Redact(err.Error()))}
	}
	log.Info("Ran the setup hook", "slots", slots, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}
