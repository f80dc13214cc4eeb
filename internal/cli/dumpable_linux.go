package cli

import "golang.org/x/sys/unix"

// setNonDumpable makes this process non-dumpable: processes of the same user,
// such as the agents a local run starts, can then neither read its memory or
// /proc/PID/environ (where API keys are) nor ptrace it. Children are dumpable
// again after exec, as the kernel resets the flag, so the agents are not
// affected.
func setNonDumpable() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
