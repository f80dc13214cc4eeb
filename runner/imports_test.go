package runner

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRunnerHasNoKubernetes keeps the runner what the design says it is: the
// engine and its parts, usable without a cluster. No package under runner/
// may reach Kubernetes (k8s.io, sigs.k8s.io) or the API types, directly or
// not; the API's types reach the runner converted (internal/compile,
// internal/apiconv).
func TestRunnerHasNoKubernetes(t *testing.T) {
	const module = "github.com/proctor-dev/proctor/"
	out, err := exec.Command("go", "list", "-deps", "-test=false", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"runner/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") || strings.HasPrefix(dep, module+"api/") ||
			strings.HasPrefix(dep, module+"internal/") || strings.HasPrefix(dep, module+"controllers") {
			t.Errorf("a runner package depends on %s: the runner has no Kubernetes and no API types", dep)
		}
	}
}
