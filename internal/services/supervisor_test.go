package services

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/proctor-dev/proctor/runner"
)

// The test binary is its own service: TestMain runs helperService when
// SERVICE_MODE is set.
func TestMain(m *testing.M) {
	if mode := os.Getenv("SERVICE_MODE"); mode != "" {
		helperService(mode)
		return
	}
	os.Exit(m.Run())
}

// helperService listens on SERVICE_PORT after SERVICE_DELAY; mode "exit"
// exits at once with status 3, "crash-once" exits 1.5s after it listens
// unless its directory holds a mark of an earlier crash.
func helperService(mode string) {
	fmt.Println("starting", mode)
	if mode == "exit" {
		fmt.Println("FATAL: data directory is not empty")
		os.Exit(3)
	}
	d, _ := time.ParseDuration(os.Getenv("SERVICE_DELAY"))
	time.Sleep(d)
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("SERVICE_PORT"))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	go acceptAndClose(ln)
	mark := filepath.Join(os.Getenv("PROCTOR_SERVICE_DIR"), "crashed")
	if _, err := os.Stat(mark); mode == "crash-once" && err != nil {
		time.Sleep(1500 * time.Millisecond)
		_ = os.WriteFile(mark, nil, 0o644)
		os.Exit(2)
	}
	select {}
}

// acceptAndClose takes every connection to ln and closes it, until ln closes.
func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

func helper(t *testing.T, mode string, delay time.Duration, port int32) Config {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Name:  "db",
		Argv:  []string{self},
		Env:   []string{"SERVICE_MODE=" + mode, "SERVICE_DELAY=" + delay.String(), "SERVICE_PORT=" + strconv.Itoa(int(port))},
		Ports: map[string]int32{"pg": port},
		Probe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("pg")}},
			PeriodSeconds: 1, FailureThreshold: 3,
		},
	}
}

func opts(t *testing.T) Options {
	return Options{Log: testr.New(t), LogDir: t.TempDir(), RestartBackoff: 50 * time.Millisecond, StopGrace: time.Second}
}

func TestStartWaitsForReadiness(t *testing.T) {
	port := freePort(t)
	s, err := Start(context.Background(), []Config{helper(t, "serve", 1500*time.Millisecond, port)}, opts(t))
	if err != nil {
		t.Fatal(err)
	}
	// Ready means listening.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("Start returned before the service listened: %v", err)
	}
	c.Close()
	if err := s.Since(s.Mark()); err != nil {
		t.Errorf("Since: %v", err)
	}
	s.Stop()
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		c.Close()
		t.Error("the service still listens after Stop")
	}
}

func TestStartFailsOnAServiceThatExits(t *testing.T) {
	o := opts(t)
	_, err := Start(context.Background(), []Config{helper(t, "exit", 0, freePort(t))}, o)
	var se *StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Start: %v, want a *StartupError", err)
	}
	for _, want := range []string{"service db exited (status 3) before it was ready", "FATAL: data directory is not empty", filepath.Join(o.LogDir, "db.log")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestStartFailsWithinTheProbeBudget(t *testing.T) {
	port := freePort(t)
	start := time.Now()
	_, err := Start(context.Background(), []Config{helper(t, "serve", time.Hour, port)}, opts(t))
	if err == nil || !strings.Contains(err.Error(), "service db did not become ready within 3s (initialDelaySeconds 0 + periodSeconds 1 × failureThreshold 3): tcpSocket probe") {
		t.Fatalf("Start: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Start took %s to give up on a 3s budget", d)
	}
}

// TestCrashedServiceIsRestarted: samples in flight hear of the outage, and
// WaitReady waits for the service to be back.
func TestCrashedServiceIsRestarted(t *testing.T) {
	port := freePort(t)
	s, err := Start(context.Background(), []Config{helper(t, "crash-once", 0, port)}, opts(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	mark := s.Mark()
	deadline := time.Now().Add(10 * time.Second)
	for s.Since(mark) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the crash was never reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var se *runner.ServiceError
	if err := s.Since(mark); !errors.As(err, &se) || err.Error() != "service db exited (status 2)" {
		t.Errorf("Since: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if err := s.Since(s.Mark()); err != nil {
		t.Errorf("after the restart, Since: %v", err)
	}
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Errorf("the restarted service does not listen: %v", err)
	} else {
		c.Close()
	}
}

// TestSinceProbesAtOnce: a sample that fails the moment its service goes
// down hears of it, though the next periodic probe is a while away.
func TestSinceProbesAtOnce(t *testing.T) {
	s, ln := watchListener(t, opts(t))
	mark := s.Mark()
	if err := s.Since(mark); err != nil {
		t.Fatalf("Since while up: %v", err)
	}
	ln.Close()
	err := s.Since(mark)
	var se *runner.ServiceError
	if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), "service db was not ready (tcpSocket probe: ") {
		t.Errorf("Since after the service closed: %v", err)
	}
}

// TestSinceWaitsForAServiceGoingDown: a sample failed while its service was
// dying but still accepted connections (a killed server's children hold its
// socket for a moment); probing again over the settle window finds the
// service down, and the failure is blamed on it, not on the sample.
func TestSinceWaitsForAServiceGoingDown(t *testing.T) {
	o := opts(t)
	o.Settle = 2 * time.Second
	s, ln := watchListener(t, o)
	mark := s.Mark()
	time.AfterFunc(300*time.Millisecond, func() { ln.Close() })
	var se *runner.ServiceError
	if err := s.Since(mark); !errors.As(err, &se) {
		t.Errorf("Since while the service went down: %v, want it named", err)
	}
}

// watchListener watches a service "db" listening on a port of this process,
// probed over TCP once an hour (so only Since probes it), once it is ready.
func watchListener(t *testing.T, o Options) (*Supervisor, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	go acceptAndClose(ln)
	s := Watch([]Config{{Name: "db", Probe: &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}},
		PeriodSeconds: 3600,
	}}}, o)
	t.Cleanup(s.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	return s, ln
}

// TestRestartWaitsForTheGroupToBeGone: a service killed with -9 leaves what
// it forked running (PostgreSQL's backends, holding its shared memory);
// before it is started again, its whole process group is stopped, as a
// container's restart would.
func TestRestartWaitsForTheGroupToBeGone(t *testing.T) {
	dir := t.TempDir()
	script := fmt.Sprintf(`echo $$ >> %[1]s/main; sleep 600 & echo $! >> %[1]s/child; wait`, dir)
	cfg := Config{Name: "db", Argv: []string{"sh", "-c", script},
		Probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1, FailureThreshold: 3}}
	s, err := Start(context.Background(), []Config{cfg}, opts(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	pids := func(f string) []int {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		var out []int
		for _, l := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(l)
			out = append(out, n)
		}
		return out
	}
	var main, child []int
	for deadline := time.Now().Add(5 * time.Second); len(child) == 0; time.Sleep(10 * time.Millisecond) {
		if main, child = pids("main"), pids("child"); time.Now().After(deadline) {
			t.Fatal("the service did not start its child")
		}
	}
	if err := syscall.Kill(main[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(pids("main")) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the service was not restarted")
		}
	}
	// By the time it started again, the old child was gone.
	if alive(child[0]) {
		t.Errorf("the killed service's child %d still runs after its restart", child[0])
	}
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}
