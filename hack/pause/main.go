//go:build linux

// Command pause is the sandbox ("pause") container of a pod, as Kubernetes'
// own pause: it holds the pod's namespaces open by doing nothing until asked
// to stop. As PID 1 of a pod that shares its process namespace it also
// inherits orphans, so it reaps them on SIGCHLD lest they stay zombies.
//
// hack/build-images.sh builds it statically into the image localhost/pause.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		// The real pause warns too: reaping only helps as PID 1.
		fmt.Fprintln(os.Stderr, "pause: warning: not running as PID 1")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child. Signals coalesce, so one SIGCHLD may stand
// for several children: wait until none is left that has exited.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
