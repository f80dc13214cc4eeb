package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/proctor-dev/proctor/internal/local"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/results"
)

// plainInterval is how often plain progress lines are printed.
const plainInterval = 10 * time.Second

// isTerminal reports whether f is a terminal a bar can be drawn on: some
// pseudo-terminals (CI runners, script(1) without a tty) report no size, and a
// bar drawn on zero columns shows nothing at all.
func isTerminal(f *os.File) bool {
	if !term.IsTerminal(int(f.Fd())) {
		return false
	}
	w, _, err := term.GetSize(int(f.Fd()))
	return err == nil && w > 0
}

var _ local.Display = (*progress)(nil)

// progress shows how far a run is: a bar per model and dataset on a terminal,
// a line per model and dataset every few seconds otherwise.
type progress struct {
	mode      string // bar, plain or none
	out       io.Writer
	verbosity int // of the run's log
	started   time.Time
	pairs     []*pairProgress
	byKey     map[[2]string]*pairProgress
	// limits are the samples a second each model's declared request limit
	// allows; paces measure each model's (Start makes them).
	limits map[string]float64
	paces  map[string]*pace

	bars *mpb.Progress
	quit chan struct{}
	wg   sync.WaitGroup

	// throttle says whether a model is being rate limited (the engine's
	// Throttle), so a run that is only waiting says why; nil shows nothing.
	throttle func(model string) runner.ThrottleStatus
}

type pairProgress struct {
	model   string
	label   string
	total   int64
	initial int64 // done before this run started
	done    atomic.Int64
	errored atomic.Int64
	printed int64 // what the last plain line showed
	bar     *mpb.Bar
	// finished is when the last sample finished (Unix nanoseconds), so a done
	// pair's rate stops ageing.
	finished atomic.Int64
}

func newProgress(mode string, s streams, pairs []results.Pair, dir *results.Dir, limits map[string]float64, verbosity int) *progress {
	if mode == "auto" {
		mode = "plain"
		if s.errIsTerminal {
			mode = "bar"
		}
	}
	p := &progress{mode: mode, out: s.errOut, verbosity: verbosity, byKey: map[[2]string]*pairProgress{}, quit: make(chan struct{}),
		limits: limits, paces: map[string]*pace{}}
	for _, pr := range pairs {
		done, errored := dir.Counts(pr.Model, pr.Dataset)
		pp := &pairProgress{model: pr.Model, label: terminalSafe(pr.Model + "/" + pr.Dataset), total: int64(pr.Total), initial: int64(done), printed: -1}
		pp.done.Store(int64(done))
		pp.errored.Store(int64(errored))
		p.pairs = append(p.pairs, pp)
		p.byKey[[2]string{pr.Model, pr.Dataset}] = pp
	}
	return p
}

// logWriter is where logs go so they do not tear the bars.
func (p *progress) logWriter() io.Writer {
	if p.mode == "bar" {
		p.ensureBars()
		return p.bars
	}
	return p.out
}

func (p *progress) ensureBars() {
	if p.bars != nil {
		return
	}
	p.bars = mpb.New(mpb.WithOutput(p.out), mpb.WithRefreshRate(200*time.Millisecond), mpb.WithWidth(40))
}

// Log is the run's logger, writing where it does not tear the bars.
func (p *progress) Log() logr.Logger { return newLogger(p.logWriter(), p.verbosity) }

// Start begins showing progress; throttle says whether a model is being rate limited.
func (p *progress) Start(throttle func(model string) runner.ThrottleStatus) {
	p.throttle = throttle
	p.started = time.Now()
	for _, pp := range p.pairs {
		if p.paces[pp.model] == nil {
			p.paces[pp.model] = newPace(p.started, p.limits[pp.model])
		}
	}
	switch p.mode {
	case "bar":
		p.ensureBars()
		for _, pp := range p.pairs {
			pp.bar = p.bars.AddBar(pp.total,
				mpb.PrependDecorators(
					decor.Name(pp.label, decor.WCSyncSpaceR),
					decor.CountersNoUnit("%d/%d", decor.WCSyncSpace),
				),
				mpb.AppendDecorators(
					decor.Percentage(decor.WCSyncSpace),
					decor.Any(func(decor.Statistics) string { return p.detail(pp) }, decor.WCSyncSpace),
				),
			)
			pp.bar.SetCurrent(pp.initial)
		}
	case "plain":
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			t := time.NewTicker(plainInterval)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					p.printLines(false)
				case <-p.quit:
					return
				}
			}
		}()
	}
}

// detail is "N errored, R/s, ETA D" for a pair, and "throttled for T" while
// the server rate limits its model.
func (p *progress) detail(pp *pairProgress) string {
	done := pp.done.Load()
	s := fmt.Sprintf("%d errored", pp.errored.Load())
	if st := p.throttleOf(pp); st.Throttled() && done < pp.total {
		s += ", " + throttleText(st, time.Now())
	}
	end := time.Now()
	if f := pp.finished.Load(); f != 0 && done >= pp.total {
		end = time.Unix(0, f)
	}
	elapsed := end.Sub(p.started).Seconds()
	if n := done - pp.initial; n > 0 && elapsed > 0 {
		s += fmt.Sprintf(", %.1f/s", float64(n)/elapsed)
		if eta, ok := p.eta(pp, end); ok {
			s += ", ETA " + eta.Round(time.Second).String()
		}
	}
	return s
}

// eta is how long pp has left: its model takes its datasets in order, so
// what the model has left up to pp's end, at the model's pace (the last
// minute's, bounded by its declared limit).
func (p *progress) eta(pp *pairProgress, now time.Time) (time.Duration, bool) {
	if pp.done.Load() >= pp.total {
		return 0, false
	}
	pc := p.paces[pp.model]
	if pc == nil {
		return 0, false
	}
	rate := pc.rate(now)
	if rate <= 0 {
		return 0, false
	}
	var left int64
	for _, o := range p.pairs {
		if o.model == pp.model {
			left += max(0, o.total-o.done.Load())
		}
		if o == pp {
			break
		}
	}
	return time.Duration(float64(left) / rate * float64(time.Second)), true
}

func (p *progress) printLines(final bool) {
	for _, pp := range p.pairs {
		done := pp.done.Load()
		if done == pp.printed && !final && !p.throttleOf(pp).Throttled() {
			continue
		}
		pp.printed = done
		pct := 100.0
		if pp.total > 0 {
			pct = 100 * float64(done) / float64(pp.total)
		}
		fmt.Fprintf(p.out, "%s: %d/%d (%.0f%%), %s\n", pp.label, done, pp.total, pct, p.detail(pp))
	}
}

func (p *progress) throttleOf(pp *pairProgress) runner.ThrottleStatus {
	if p.throttle == nil {
		return runner.ThrottleStatus{}
	}
	return p.throttle(pp.model)
}

// throttleText is "throttled (429) for 35s, retry-after 20s left".
func throttleText(st runner.ThrottleStatus, now time.Time) string {
	s := fmt.Sprintf("throttled (429) for %v", now.Sub(st.Since).Round(time.Second))
	if left := st.Until.Sub(now); left > 0 {
		s += fmt.Sprintf(", retry-after %v left", left.Round(time.Second))
	}
	return s
}

// SampleFinished implements runner.Observer.
func (p *progress) SampleFinished(model, dataset string, rec *results.Record) {
	pp := p.byKey[[2]string{model, dataset}]
	if pp == nil {
		return
	}
	pp.done.Add(1)
	now := time.Now()
	pp.finished.Store(now.UnixNano())
	if pc := p.paces[model]; pc != nil {
		pc.add(now)
	}
	if rec.Error != "" {
		pp.errored.Add(1)
	}
	if pp.bar != nil {
		pp.bar.Increment()
	}
}

// Note prints a message without disturbing the display.
func (p *progress) Note(msg string) {
	fmt.Fprintln(p.logWriter(), msg)
}

// Stop ends the display.
func (p *progress) Stop() {
	switch p.mode {
	case "bar":
		for _, pp := range p.pairs {
			if pp.bar != nil && !pp.bar.Completed() {
				pp.bar.Abort(false)
			}
		}
		p.bars.Wait()
	case "plain":
		close(p.quit)
		p.wg.Wait()
		p.printLines(true)
	}
}
