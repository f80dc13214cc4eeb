package local

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLocalRunsHaveNoControllerRuntime keeps `proctor run` apart from the
// controller: a local run reads the API's types and the contract's names
// (internal/cluster), never a cluster through controller-runtime's client,
// which lives in internal/cluster/kube and the controller.
func TestLocalRunsHaveNoControllerRuntime(t *testing.T) {
	const module = "github.com/proctor-dev/proctor/"
	out, err := exec.Command("go", "list", "-deps", "-test=false", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"internal/local").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list found %d packages for internal/local: %v", len(deps), deps)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "sigs.k8s.io/controller-runtime") || dep == module+"internal/cluster/kube" || strings.HasPrefix(dep, module+"controllers") {
			t.Errorf("a local run depends on %s: it must not need controller-runtime or the controller", dep)
		}
	}
}
