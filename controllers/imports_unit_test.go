package controllers

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportBoundary keeps the controller on its side of the contract: it
// speaks to runner pods only through internal/cluster (names, layouts, the
// budget and plan protocols) and the API types, never through the pod program,
// the compiler or the engine that calls models.
func TestImportBoundary(t *testing.T) {
	const module = "github.com/proctor-dev/proctor/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"controllers").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"internal/shard", "internal/compile", "internal/local", "internal/cli", "internal/evalfile",
		"runner", "runner/provider/openai", "runner/provider/anthropic", "runner/provider/agent",
		"runner/score", "runner/cache", "runner/retry", "runner/tmpl",
	}
	deps := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		deps[strings.TrimPrefix(d, module)] = true
	}
	for _, f := range forbidden {
		if deps[f] {
			t.Errorf("controllers imports %s (directly or not): the controller–pod contract lives in internal/cluster", f)
		}
	}
}
