package testutil

import (
	"io/fs"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/config/crd"
)

// crdProperty is the schema the generated Evaluation CRD (config/crd/bases)
// has at path, a list of property names from spec down ("models",
// "provider"); an array's items are stepped through on the way.
func crdProperty(t testing.TB, path ...string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	b, err := fs.ReadFile(crd.Bases, "bases/proctor.dev_evaluations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &def); err != nil {
		t.Fatal(err)
	}
	s := def.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for _, p := range path {
		for s.Type == "array" {
			s = *s.Items.Schema
		}
		var ok bool
		if s, ok = s.Properties[p]; !ok {
			t.Fatalf("the CRD has no property spec.%v", path)
		}
	}
	for s.Type == "array" {
		s = *s.Items.Schema
	}
	return s
}

// CRDDescription is the description (what kubectl explain shows) of the
// generated Evaluation CRD at path (see crdProperty).
func CRDDescription(t testing.TB, path ...string) string {
	t.Helper()
	return crdProperty(t, path...).Description
}

// CRDEnum returns the enum the generated Evaluation CRD allows at path (see
// crdProperty).
func CRDEnum(t testing.TB, path ...string) []string {
	t.Helper()
	s := crdProperty(t, path...)
	if len(s.Enum) == 0 {
		t.Fatalf("the CRD has no enum at spec.%v", path)
	}
	out := make([]string, len(s.Enum))
	for i, v := range s.Enum {
		if err := yaml.Unmarshal(v.Raw, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
