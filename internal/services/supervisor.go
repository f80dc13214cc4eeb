// Package services runs an Evaluation's services (spec.services) as local
// processes, for proctor run, with the lifecycle a runner pod gives its
// sidecars: each is started before any hook or sample and must become ready
// (its readinessProbe) within its probe's budget; one that exits is started
// again, with a backoff, and the engine hears that it was down; all are
// stopped when the run ends (SIGTERM to the process group, then SIGKILL).
//
// In a runner pod the kubelet runs the services (native sidecars); Watch
// only probes them from the runner's container, which shares their network,
// so that the engine hears of one that went down.
package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/provider/agent"
)

// Config is one service, ready to start.
type Config struct {
	Name string
	// Argv is command and args; Argv[0] is looked up in PATH.
	Argv []string
	// Env is the process's environment, exactly (PROCTOR_SERVICE_DIR added).
	Env []string
	// Ports are the service's named ports, for the probe.
	Ports map[string]int32
	// Probe is its readinessProbe (exec, httpGet or tcpSocket); nil means
	// ready once started.
	Probe *corev1.Probe
}

// Options tune a Supervisor.
type Options struct {
	Log logr.Logger
	// LogDir receives each service's output, as NAME.log.
	LogDir string
	// StopGrace is how long a service has to exit after SIGTERM; default 10s.
	StopGrace time.Duration
	// RestartBackoff is the first wait before a service that exited is
	// started again, doubling up to 30s; default 1s.
	RestartBackoff time.Duration
	// Settle is how long Since keeps probing services that answer, after a
	// sample failed, before it calls the failure the sample's own; default
	// 1s, probing every quarter of it.
	Settle time.Duration
}

// Kubernetes' probe defaults.
const (
	defaultPeriod           = 10 * time.Second
	defaultProbeTimeout     = time.Second
	defaultFailureThreshold = 3
	maxRestartBackoff       = 30 * time.Second
	// healthyReset: a service that ran this long since its last start has
	// its restart backoff reset.
	healthyReset = time.Minute
	logTailLines = 8
)

// Supervisor runs services. It implements runner.Services.
type Supervisor struct {
	opts Options
	svcs []*service

	mu sync.Mutex
	// gen counts the services' outages; each records the gen of its last.
	gen uint64
	// readyCh is closed while every service is ready.
	readyCh chan struct{}

	stopping chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

var _ runner.Services = (*Supervisor)(nil)

// service is one service's state. Fields under Supervisor.mu.
type service struct {
	cfg     Config
	dir     string
	logPath string
	ready   bool
	downGen uint64
	what    string // why it was last down
	proc    *exec.Cmd
	exited  chan struct{} // closed when proc has been waited for
}

// StartupError is a service that did not become ready at the start.
type StartupError struct {
	Service string
	Reason  string
	// LogPath is the service's log; LogTail its last lines.
	LogPath, LogTail string
}

func (e *StartupError) Error() string {
	msg := fmt.Sprintf("service %s %s", e.Service, e.Reason)
	if e.LogTail != "" {
		msg += fmt.Sprintf("; its log (%s) ends:\n%s", e.LogPath, e.LogTail)
	} else if e.LogPath != "" {
		msg += fmt.Sprintf("; its log: %s", e.LogPath)
	}
	return msg
}

var errStopping = errors.New("the supervisor is stopping")

// Start starts every service and waits until each is ready, or fails: a
// service that exits, or that is not ready within its probe's budget
// (initialDelaySeconds + periodSeconds × failureThreshold), is a
// *StartupError, and every service is stopped again.
func Start(ctx context.Context, cfgs []Config, opts Options) (*Supervisor, error) {
	if opts.StopGrace == 0 {
		opts.StopGrace = 10 * time.Second
	}
	if opts.RestartBackoff == 0 {
		opts.RestartBackoff = time.Second
	}
	s := &Supervisor{opts: opts, readyCh: make(chan struct{}), stopping: make(chan struct{})}
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("services: %w", err)
	}
	for _, c := range cfgs {
		dir, err := os.MkdirTemp("", "proctor-service-"+c.Name+"-")
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("service %s: %w", c.Name, err)
		}
		logPath := filepath.Join(opts.LogDir, c.Name+".log")
		_ = os.Remove(logPath) // this run's output only
		s.svcs = append(s.svcs, &service{cfg: c, dir: dir, logPath: logPath})
	}
	// One at a time, in order: a later service may need an earlier one.
	for _, svc := range s.svcs {
		if err := s.start(svc); err != nil {
			s.Stop()
			return nil, err
		}
		if err := s.awaitReady(ctx, svc); err != nil {
			s.Stop()
			return nil, err
		}
		s.opts.Log.Info("Started a service", "service", svc.cfg.Name, "log", svc.logPath)
		s.wg.Go(func() { s.supervise(svc) })
	}
	s.mu.Lock()
	s.updateReadyLocked()
	s.mu.Unlock()
	return s, nil
}

// start starts svc's process.
func (s *Supervisor) start(svc *service) error {
	out, err := os.OpenFile(svc.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("service %s: %w", svc.cfg.Name, err)
	}
	cmd := exec.Command(svc.cfg.Argv[0], svc.cfg.Argv[1:]...)
	cmd.Dir = svc.dir
	cmd.Env = append(append([]string{}, svc.cfg.Env...), "PROCTOR_SERVICE_DIR="+svc.dir)
	cmd.Stdout, cmd.Stderr = out, out
	// A process group of its own, so that stopping reaches what it forked;
	// Pdeathsig: it dies with proctor, even by kill -9.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Started as a child the agents' reaper leaves to this Wait.
	done, err := agent.StartChild(cmd)
	if err != nil {
		out.Close()
		return &StartupError{Service: svc.cfg.Name, Reason: "could not be started: " + err.Error()}
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		done()
		out.Close()
		close(exited)
	}()
	s.mu.Lock()
	svc.proc, svc.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

// awaitReady probes a just-started svc until it is ready, within its
// probe's budget.
func (s *Supervisor) awaitReady(ctx context.Context, svc *service) error {
	p := svc.cfg.Probe
	_, exited := s.process(svc)
	if p == nil {
		s.setReady(svc, true, "")
		return nil
	}
	period, threshold := probePeriod(p), probeThreshold(p)
	budget := time.Duration(p.InitialDelaySeconds)*time.Second + period*time.Duration(threshold)
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	wait := time.Duration(p.InitialDelaySeconds) * time.Second
	var last error
	for {
		select {
		case <-exited:
			return s.startupError(svc, "exited ("+exitStatus(svc)+") before it was ready")
		case <-deadline.C:
			return s.startupError(svc, fmt.Sprintf("did not become ready within %s (initialDelaySeconds %d + periodSeconds %d × failureThreshold %d): %v",
				budget, p.InitialDelaySeconds, int(period/time.Second), threshold, last))
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stopping:
			return errStopping
		case <-time.After(wait):
		}
		if last = s.probe(ctx, svc); last == nil {
			s.setReady(svc, true, "")
			return nil
		}
		wait = period
	}
}

func (s *Supervisor) startupError(svc *service, reason string) error {
	return &StartupError{Service: svc.cfg.Name, Reason: reason, LogPath: svc.logPath, LogTail: logTail(svc.logPath)}
}

// supervise watches a ready svc until the supervisor stops: it probes it,
// and starts it again when it exits.
func (s *Supervisor) supervise(svc *service) {
	backoff := s.opts.RestartBackoff
	for {
		_, exited := s.process(svc)
		started := time.Now()
		s.watch(svc, exited)
		select {
		case <-s.stopping:
			return
		default:
		}
		status := exitStatus(svc)
		s.setReady(svc, false, "exited ("+status+")")
		// What it forked goes with it before it starts again.
		s.kill(svc)
		if time.Since(started) > healthyReset {
			backoff = s.opts.RestartBackoff
		}
		s.opts.Log.Info("Restarting a service that exited", "service", svc.cfg.Name, "status", status, "in", backoff.String())
		select {
		case <-s.stopping:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxRestartBackoff)
		if err := s.start(svc); err != nil {
			s.opts.Log.Error(err, "Failed to restart a service", "service", svc.cfg.Name)
			continue
		}
		err := s.awaitReady(context.Background(), svc)
		switch {
		case err == nil:
			s.opts.Log.Info("Restarted a service", "service", svc.cfg.Name)
		case errors.Is(err, errStopping):
			return
		default:
			s.opts.Log.Error(err, "A restarted service did not become ready", "service", svc.cfg.Name)
			s.kill(svc)
		}
	}
}

// watch probes a running svc every period, until its process exits or the
// supervisor stops. A failure makes it not ready, a success ready again.
func (s *Supervisor) watch(svc *service, exited <-chan struct{}) {
	p := svc.cfg.Probe
	var tick <-chan time.Time
	if p != nil {
		t := time.NewTicker(probePeriod(p))
		defer t.Stop()
		tick = t.C
	}
	first := make(chan time.Time, 1)
	first <- time.Time{} // a watched service is probed at once
	if exited != nil {
		first = nil // a started one was just found ready
	}
	for {
		select {
		case <-exited:
			return
		case <-s.stopping:
			return
		case <-first:
			first = nil
		case <-tick:
		}
		agent.ReapOrphans()
		// One failed probe counts: a sample that failed while it did is
		// the service's (failureThreshold is the budget to start, spent).
		if err := s.probe(context.Background(), svc); err != nil {
			s.setReady(svc, false, "was not ready ("+err.Error()+")")
			continue
		}
		s.setReady(svc, true, "")
	}
}

// setReady records svc's readiness; going down is an outage, which Since
// reports to samples that began before it.
func (s *Supervisor) setReady(svc *service, ready bool, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if svc.ready && !ready {
		s.gen++
		svc.downGen, svc.what = s.gen, what
		s.opts.Log.Info("A service went down", "service", svc.cfg.Name, "what", what)
	} else if !ready && what != "" {
		svc.what = what
	}
	svc.ready = ready
	s.updateReadyLocked()
}

func (s *Supervisor) updateReadyLocked() {
	all := true
	for _, svc := range s.svcs {
		all = all && svc.ready
	}
	select {
	case <-s.readyCh:
		if !all {
			s.readyCh = make(chan struct{})
		}
	default:
		if all {
			close(s.readyCh)
		}
	}
}

// Mark implements runner.Services.
func (s *Supervisor) Mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// Since implements runner.Services. It probes the services that are up
// first: a sample fails at the moment its service does, before the next
// periodic probe would tell. A service going down may still answer for a
// moment (a killed server's children keep its socket open: connections are
// accepted, then closed), so it probes again for opts.Settle before it says
// no service went down.
func (s *Supervisor) Since(mark uint64) error {
	settle := s.opts.Settle
	if settle == 0 {
		settle = time.Second
	}
	const probes = 4
	for i := 0; ; i++ {
		s.probeNow()
		if err := s.downSince(mark); err != nil || i == probes || !s.probed() {
			return err
		}
		select {
		case <-time.After(settle / probes):
		case <-s.stopping:
			return s.downSince(mark)
		}
	}
}

// downSince names a service that is down, or went down since mark.
func (s *Supervisor) downSince(mark uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, svc := range s.svcs {
		if !svc.ready || svc.downGen > mark {
			return &runner.ServiceError{Service: svc.cfg.Name, What: svc.what}
		}
	}
	return nil
}

// probed reports whether some service has a probe to ask again.
func (s *Supervisor) probed() bool {
	for _, svc := range s.svcs {
		if svc.cfg.Probe != nil {
			return true
		}
	}
	return false
}

// probeNow probes at once every service that is up and has a probe, and
// records those that fail as down.
func (s *Supervisor) probeNow() {
	var wg sync.WaitGroup
	for _, svc := range s.svcs {
		s.mu.Lock()
		up := svc.ready && svc.cfg.Probe != nil
		s.mu.Unlock()
		if !up {
			continue
		}
		wg.Go(func() {
			if err := s.probe(context.Background(), svc); err != nil {
				s.setReady(svc, false, "was not ready ("+err.Error()+")")
			}
		})
	}
	wg.Wait()
}

// WaitReady implements runner.Services.
func (s *Supervisor) WaitReady(ctx context.Context) error {
	s.mu.Lock()
	ch := s.readyCh
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Watch probes services that others run (a runner pod's sidecars) until
// Stop: each is ready after a probe succeeds, and down after one fails. A probe must be one this process can run from beside
// the services: httpGet or tcpSocket; nil counts a service as always ready.
func Watch(cfgs []Config, opts Options) *Supervisor {
	s := &Supervisor{opts: opts, readyCh: make(chan struct{}), stopping: make(chan struct{})}
	for _, c := range cfgs {
		svc := &service{cfg: c, ready: c.Probe == nil, what: "was not ready yet"}
		s.svcs = append(s.svcs, svc)
		if c.Probe != nil {
			s.wg.Go(func() { s.watch(svc, nil) })
		}
	}
	s.mu.Lock()
	s.updateReadyLocked()
	s.mu.Unlock()
	return s
}

// Stop stops every service: SIGTERM to its process group, SIGKILL after
// the grace period. It removes their directories. Watched services are only
// no longer probed.
func (s *Supervisor) Stop() {
	s.stopOnce.Do(s.stop)
}

func (s *Supervisor) stop() {
	close(s.stopping)
	s.wg.Wait()
	var wg sync.WaitGroup
	for _, svc := range s.svcs {
		wg.Go(func() {
			s.terminate(svc)
			if svc.dir != "" {
				_ = os.RemoveAll(svc.dir)
			}
		})
	}
	wg.Wait()
}

func (s *Supervisor) terminate(svc *service) {
	cmd, exited := s.process(svc)
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(s.opts.StopGrace):
		s.opts.Log.Info("Killed a service that did not stop within its grace period", "service", svc.cfg.Name, "grace", s.opts.StopGrace.String())
	}
	s.kill(svc)
}

// runChild runs cmd as a child the agents' reaper leaves alone.
func runChild(cmd *exec.Cmd) error {
	done, err := agent.StartChild(cmd)
	if err != nil {
		return err
	}
	defer done()
	return cmd.Wait()
}

// kill kills svc's whole process group (what it forked too) and waits for
// all of it to be gone, as a container's restart would: the leftovers of a
// killed server (PostgreSQL's backends, holding its shared memory) would
// make its next start fail.
func (s *Supervisor) kill(svc *service) {
	cmd, exited := s.process(svc)
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	for deadline := time.Now().Add(10 * time.Second); groupAlive(cmd.Process.Pid) && time.Now().Before(deadline); {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// process is svc's current process, and the channel closed once it has
// been waited for; nil for a watched service.
func (s *Supervisor) process(svc *service) (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return svc.proc, svc.exited
}

// probe runs svc's readiness probe once.
func (s *Supervisor) probe(ctx context.Context, svc *service) error {
	p := svc.cfg.Probe
	timeout := defaultProbeTimeout
	if p.TimeoutSeconds > 0 {
		timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.Exec != nil:
		argv := p.Exec.Command
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = svc.dir
		cmd.Env = append(append([]string{}, svc.cfg.Env...), "PROCTOR_SERVICE_DIR="+svc.dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := runChild(cmd)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("exec probe %v timed out after %s", argv, timeout)
			}
			msg := strings.TrimSpace(out.String())
			if len(msg) > 200 {
				msg = msg[len(msg)-200:]
			}
			return fmt.Errorf("exec probe %v: %w %s", argv, err, msg)
		}
		return nil
	case p.TCPSocket != nil:
		addr := net.JoinHostPort(host(p.TCPSocket.Host), strconv.Itoa(int(port(svc, p.TCPSocket.Port))))
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("tcpSocket probe: %w", err)
		}
		return conn.Close()
	case p.HTTPGet != nil:
		g := p.HTTPGet
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host(g.Host), strconv.Itoa(int(port(svc, g.Port)))), g.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("httpGet probe: %w", err)
		}
		for _, h := range g.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("httpGet probe: %w", err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("httpGet probe %s: %s", url, resp.Status)
		}
		return nil
	}
	return errors.New("the probe has no handler a local run can use")
}

func host(h string) string {
	if h == "" {
		return "127.0.0.1"
	}
	return h
}

func port(svc *service, p intstr.IntOrString) int32 {
	if p.Type == intstr.String {
		return svc.cfg.Ports[p.StrVal]
	}
	return p.IntVal
}

func probePeriod(p *corev1.Probe) time.Duration {
	if p.PeriodSeconds > 0 {
		return time.Duration(p.PeriodSeconds) * time.Second
	}
	return defaultPeriod
}

func probeThreshold(p *corev1.Probe) int {
	if p != nil && p.FailureThreshold > 0 {
		return int(p.FailureThreshold)
	}
	return defaultFailureThreshold
}

// exitStatus says how svc's process ended.
func exitStatus(svc *service) string {
	cmd := svc.proc
	if cmd == nil || cmd.ProcessState == nil {
		return "unknown status"
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("signal %d: %s", int(ws.Signal()), ws.Signal())
	}
	return "status " + strconv.Itoa(cmd.ProcessState.ExitCode())
}

// logTail is the last lines of a log file.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// groupAlive reports whether a process of group pgid is alive (a zombie
// holds nothing).
func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		st := string(b)
		i := strings.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(st[i+1:])
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}
