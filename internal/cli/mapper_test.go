package cli

import (
	"io/fs"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/config/crd"
)

// TestPodKindsAsTheCRDsSay: the pods' mapper, which asks no API server,
// names Proctor's kinds by their CRDs' plurals and scopes, and the
// built-in ones by theirs.
func TestPodKindsAsTheCRDsSay(t *testing.T) {
	files, err := fs.Glob(crd.Bases, "bases/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("the CRDs: %v (%d files)", err, len(files))
	}
	type want struct {
		resource string
		scope    meta.RESTScopeName
	}
	wants := map[string]want{
		"ConfigMap": {"configmaps", meta.RESTScopeNameNamespace},
		"Secret":    {"secrets", meta.RESTScopeNameNamespace},
	}
	for _, f := range files {
		b, err := fs.ReadFile(crd.Bases, f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		scope := meta.RESTScopeNameNamespace
		if crd.Spec.Scope == apiextensionsv1.ClusterScoped {
			scope = meta.RESTScopeNameRoot
		}
		wants[crd.Spec.Names.Kind] = want{crd.Spec.Names.Plural, scope}
	}
	m := staticPodMapper()
	for _, k := range podKinds {
		w, ok := wants[k.gvk.Kind]
		if !ok {
			t.Errorf("%s: no CRD and not a kind this test knows", k.gvk)
			continue
		}
		if k.gvk.Group == v1alpha1.GroupVersion.Group && k.gvk.Version != v1alpha1.GroupVersion.Version {
			t.Errorf("%s: not the served version %s", k.gvk, v1alpha1.GroupVersion.Version)
		}
		mapping, err := m.RESTMapping(k.gvk.GroupKind(), k.gvk.Version)
		if err != nil {
			t.Errorf("%s: %v", k.gvk, err)
			continue
		}
		if got := mapping.Resource.Resource; got != w.resource {
			t.Errorf("%s maps to resource %q, want %q", k.gvk, got, w.resource)
		}
		if got := mapping.Scope.Name(); got != w.scope {
			t.Errorf("%s maps to scope %q, want %q", k.gvk, got, w.scope)
		}
	}
}
