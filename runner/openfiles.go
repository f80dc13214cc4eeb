package runner

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// What a run holds open, roughly: a connection for each model call in flight
// (and one for a judge's call it makes), pipes, a pidfd and workspace files
// for each agent in flight, and the process's own (journals, the cache, its
// listeners, the runtime's).
const (
	filesPerCall  = 2
	filesPerAgent = 16
	filesBase     = 128
)

// openFiles is about how many files the plan's samples in flight hold open
// at once (every model under evaluation, of those named when some are, runs
// its concurrency at once), and the most one sample in flight of them holds.
func (p *Plan) openFiles(models []string) (need, perSample uint64) {
	need, perSample = filesBase, filesPerCall
	for _, m := range p.Models {
		if m.JudgeOnly || m.Batch != nil || len(models) > 0 && !slices.Contains(models, m.Name) {
			continue // a judge is called from its subjects' samples; batches are a few requests
		}
		per := uint64(filesPerCall)
		if m.Agent {
			per = filesPerAgent
		}
		perSample = max(perSample, per)
		need += uint64(max(1, m.Concurrency)) * per
	}
	return need, perSample
}

// OpenFilesError says the process may not open what the run's samples in
// flight would: exhausting it would fail samples for a reason that is not the
// model's.
type OpenFilesError struct {
	Need, Limit uint64
	// Concurrency is the most samples in flight, over all models, that fit.
	Concurrency uint64
}

func (e *OpenFilesError) Error() string {
	return fmt.Sprintf("the samples in flight at once (concurrency) need about %d open files, and this process may open %d (ulimit -n): "+
		"lower concurrency to at most %d in all, or raise the limit (ulimit -n %d)", e.Need, e.Limit, e.Concurrency, e.Need)
}

// EnsureOpenFiles raises the process's open-file limit to what the plan's
// samples in flight need (Go starts with the soft limit at the hard one; a
// privileged process may raise the hard one too), or returns an
// *OpenFilesError when it cannot.
// models, when given, are those this process runs.
func EnsureOpenFiles(p *Plan, models ...string) error {
	return ensureOpenFiles(p, models, unix.Getrlimit, unix.Setrlimit)
}

func ensureOpenFiles(p *Plan, models []string, getrlimit, setrlimit func(int, *unix.Rlimit) error) error {
	need, perSample := p.openFiles(models)
	var lim unix.Rlimit
	if err := getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return nil //nolint:nilerr // no limit to read: nothing to check against
	}
	if lim.Cur == unix.RLIM_INFINITY || lim.Cur >= need {
		return nil
	}
	raised := unix.Rlimit{Cur: need, Max: max(lim.Max, need)}
	if setrlimit(unix.RLIMIT_NOFILE, &raised) == nil {
		return nil
	}
	if lim.Max > lim.Cur {
		raised = unix.Rlimit{Cur: lim.Max, Max: lim.Max}
		if setrlimit(unix.RLIMIT_NOFILE, &raised) == nil {
			lim.Cur = lim.Max
		}
	}
	fit := uint64(0)
	if lim.Cur > filesBase {
		fit = (lim.Cur - filesBase) / perSample
	}
	return &OpenFilesError{Need: need, Limit: lim.Cur, Concurrency: fit}
}

// LocalExhaustedError is a sample's call failing because this machine ran
// out of files (or processes): not the model's doing, so it is never a
// sample's record; the run stops with it, and the sample runs again on resume.
type LocalExhaustedError struct{ Err error }

func (e *LocalExhaustedError) Error() string {
	return fmt.Sprintf("this process ran out of open files or processes while calling a model (%v): lower concurrency, or raise the limit (ulimit -n); "+
		"the samples it stopped have no record and run again when the run is resumed", e.Err)
}

func (e *LocalExhaustedError) Unwrap() error { return e.Err }

// localExhaustion reports whether err is this machine running out of files
// or processes, whichever layer wrapped (or flattened) it.
func localExhaustion(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "too many open files") || strings.Contains(msg, "fork/exec") && strings.Contains(msg, "resource temporarily unavailable")
}
