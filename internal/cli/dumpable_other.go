//go:build !linux

package cli

// setNonDumpable does nothing outside Linux, where /proc/PID/environ is not
// how a process's environment is read.
func setNonDumpable() error { return nil }
