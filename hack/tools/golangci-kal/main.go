// Command golangci-kal is golangci-lint with kube-api-linter built in: what
// `golangci-lint custom` would build from a .custom-gcl.yml, written by hand
// because that command clones golangci-lint with git and this module only
// needs the Go module proxy. The versions are pinned in go.mod;
// hack/tools/install-golangci-lint.sh builds it into bin/ once per version.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"

	// Registers the "kubeapilinter" module plugin (linters.settings.custom in .golangci.yml).
	_ "sigs.k8s.io/kube-api-linter/pkg/plugin/base"
	// The plugin's default set of API analyzers, as the upstream plugin package imports them.
	_ "sigs.k8s.io/kube-api-linter/pkg/registration"
)

const golangciModule = "github.com/golangci/golangci-lint/v2"

func main() {
	if err := commands.Execute(buildInfo()); err != nil {
		fmt.Fprintf(os.Stderr, "golangci-lint: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}

// buildInfo reports golangci-lint's own module version, so that
// `golangci-lint version` says which release this is rather than "(devel)".
func buildInfo() commands.BuildInfo {
	info := commands.BuildInfo{Version: "unknown", Commit: "kube-api-linter", Date: "(unknown)"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.GoVersion = bi.GoVersion
	for _, dep := range bi.Deps {
		switch dep.Path {
		case golangciModule:
			info.Version = dep.Version
		case "sigs.k8s.io/kube-api-linter":
			info.Commit = "kube-api-linter " + dep.Version
		}
	}
	return info
}
