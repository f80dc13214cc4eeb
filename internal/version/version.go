// Package version holds the build's version, stamped by the Makefile with
// -ldflags "-X github.com/proctor-dev/proctor/internal/version.Version=...".
package version

// Version is the release or git description of this build.
var Version = "dev"
