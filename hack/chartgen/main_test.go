package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestChartUpToDate: the chart holds what chartgen generates from config/ now
// (`make manifests` regenerates it), and generating twice gives the same bytes.
func TestChartUpToDate(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	again, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(files, again); diff != "" {
		t.Errorf("two runs differ (-first +second):\n%s", diff)
	}
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%v; run `make manifests`", err)
			continue
		}
		if !bytes.Equal(got, files[rel]) {
			t.Errorf("%s is stale; run `make manifests`", rel)
		}
	}
}

func TestSplitRules(t *testing.T) {
	scopes := builtinScopes()
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "namespaces", "pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"bind"}},
		{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
	}
	namespaced, cluster, err := splitRules(rules, scopes)
	if err != nil {
		t.Fatal(err)
	}
	wantNS := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "pods/log"}, Verbs: []string{"get"}},
	}
	wantCluster := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		rules[1],
		rules[2],
	}
	if diff := cmp.Diff(wantNS, namespaced); diff != "" {
		t.Errorf("namespaced (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantCluster, cluster); diff != "" {
		t.Errorf("cluster-scoped (-want +got):\n%s", diff)
	}

	// A resource of unknown scope is an error, not a guess.
	_, _, err = splitRules([]rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"get"}}}, scopes)
	if err == nil || !strings.Contains(err.Error(), "widgets") {
		t.Errorf("unknown resource: err = %v, want an error naming it", err)
	}
}

// TestCRDTemplateEscapes: Go template text in a CRD reaches the cluster as is.
func TestCRDTemplateEscapes(t *testing.T) {
	src := []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {plural: widgets}
  scope: Namespaced
  description: 'Default "{{ .Input }}".'
`)
	out, _, err := crdTemplate("x.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `Default "{{ "{{" }} .Input }}".`) {
		t.Errorf("template text not escaped:\n%s", out)
	}
}
