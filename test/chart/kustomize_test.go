package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kustomizeBinary is $KUSTOMIZE, else bin/kustomize (the link the Makefile's
// pinned install maintains). A missing one fails: skipping would pass for a
// green run.
func kustomizeBinary(t *testing.T) string {
	t.Helper()
	if path, ok := envTool(t, "KUSTOMIZE"); ok {
		return path
	}
	path, err := exec.LookPath(filepath.Join(repoRoot(t), "bin", "kustomize"))
	if err != nil {
		t.Fatalf("kustomize: %v (make test-integration installs the pinned one)", err)
	}
	return path
}

// clusterScoped are the kinds config/default makes that have no namespace.
var clusterScoped = []string{
	"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}

// TestKustomizeDefault builds config/default (what `make deploy` applies) with
// the pinned kustomize, which nothing else runs before a user does: it makes
// the chart's objects (the chart's default render, with the same names) and
// the namespace the chart leaves to --create-namespace; cluster-scoped objects
// carry no namespace (kustomize v5.7 gives admission policies one,
// kubernetes-sigs/kustomize#6051); the runner image follows the manager's; and
// docs/tasks/cluster.md's table of what it creates names every object.
func TestKustomizeDefault(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	// go test's cache does not see what kustomize reads.
	if err := readAll(filepath.Join(root, "config")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kustomizeBinary(t), "build", filepath.Join(root, "config", "default"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kustomize build config/default: %v\n%s", err, stderr.String())
	}
	built := decode(t, "kustomize build config/default", stdout.Bytes())

	var names, fromKustomize []string
	for _, o := range built {
		names = append(names, o.GetName())
		if o.GetKind() != "Namespace" {
			fromKustomize = append(fromKustomize, key(o))
		}
		switch ns := o.GetNamespace(); {
		case slices.Contains(clusterScoped, o.GetKind()) && ns != "":
			t.Errorf("%s: a cluster-scoped object has namespace %q", key(o), ns)
		case !slices.Contains(clusterScoped, o.GetKind()) && ns != namespace:
			t.Errorf("%s: namespace %q, want %q (a new cluster-scoped kind belongs in clusterScoped)", key(o), ns, namespace)
		}
	}
	slices.Sort(fromKustomize)
	if diff := cmp.Diff(render(t, release, namespace, "").keys(), fromKustomize); diff != "" {
		t.Errorf("config/default and the chart's defaults make different objects (-chart +config/default):\n%s", diff)
	}

	for _, o := range built {
		if o.GetKind() == "Deployment" {
			checkRunnerImage(t, o)
		}
	}

	table := docsTable(t, filepath.Join(root, "docs", "tasks", "cluster.md"), "What `config/default` creates")
	for _, name := range names {
		if !slices.Contains(table, name) {
			t.Errorf("docs/tasks/cluster.md's table of what config/default creates does not name `%s`", name)
		}
	}
}

// checkRunnerImage: the manager's PROCTOR_RUNNER_IMAGE is its own image
// (config/default's replacements copy it, so `make deploy IMG=...` sets both).
func checkRunnerImage(t *testing.T, deploy *unstructured.Unstructured) {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		c, _ := c.(map[string]any)
		image, _ := c["image"].(string)
		env, _ := c["env"].([]any)
		for _, e := range env {
			e, _ := e.(map[string]any)
			if e["name"] == "PROCTOR_RUNNER_IMAGE" {
				if e["value"] != image {
					t.Errorf("%s: PROCTOR_RUNNER_IMAGE is %q, the container's image %q", key(deploy), e["value"], image)
				}
				return
			}
		}
	}
	t.Errorf("%s: no container sets PROCTOR_RUNNER_IMAGE", key(deploy))
}

var backticked = regexp.MustCompile("`([^`]+)`")

// docsTable returns what is in backticks in the table that follows the line
// starting with heading in the Markdown file path.
func docsTable(t *testing.T, path, heading string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, heading):
			in = true
		case in && strings.HasPrefix(line, "|"):
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				out = append(out, m[1])
			}
		case in && len(out) > 0:
			return out
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no table after %q", path, heading)
	}
	return out
}
