package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// process is a program a test started (weed, jaeger, prometheus), killed
// when the test ends.
type process struct {
	// exited is closed once the program exited, with its error in err: a
	// readiness loop and the cleanup may both wait for it.
	exited chan struct{}
	err    error
}

// startProcess runs bin with args, its output into logFile, until the test
// ends; the test fails if it cannot start.
func startProcess(tb testing.TB, logFile, bin string, args ...string) *process {
	tb.Helper()
	log, err := os.Create(logFile)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s: %v", bin, err)
	}
	p := &process{exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		tb.Logf("%s stopped (%v)", filepath.Base(bin), p.err)
		log.Close()
	})
	return p
}
