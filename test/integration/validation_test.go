package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/test/validation"
)

// TestValidationAdmission runs the shared table of test/validation against the API
// server: what the local loader refuses, admission refuses too, with a message
// naming the problem, and what it accepts is accepted.
func TestValidationAdmission(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "validation-"}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })

	// create creates the manifest as kubectl apply would, unknown fields refused.
	create := func(t *testing.T, name, manifest string) error {
		t.Helper()
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		obj.SetNamespace(ns.Name)
		return k8sClient.Create(ctx, &obj, client.FieldValidation(metav1.FieldValidationStrict))
	}

	t.Run("Valid", func(t *testing.T) {
		if err := create(t, "valid", validation.Valid); err != nil {
			t.Fatalf("refused: %v", err)
		}
	})
	for _, c := range validation.Accepted {
		t.Run(c.Name, func(t *testing.T) {
			if err := create(t, c.Name, c.Manifest); err != nil {
				t.Errorf("refused: %v\n%s", err, c.Manifest)
			}
		})
	}
	for _, set := range [][]validation.Case{validation.Cases, validation.Differences} {
		for _, c := range set {
			t.Run(c.Name, func(t *testing.T) {
				err := create(t, c.Name, c.Manifest)
				switch {
				case c.Admission == "" && err != nil:
					t.Errorf("refused, want accepted: %v", err)
				case c.Admission == "":
				case err == nil:
					t.Errorf("accepted, want a refusal containing %q\n%s", c.Admission, c.Manifest)
				case !strings.Contains(err.Error(), c.Admission):
					t.Errorf("refused with\n\t%v\nwant it to contain\n\t%s", err, c.Admission)
				}
			})
		}
	}
}

// TestValidationDescriptions checks that the schema the API server serves
// explains fields, as kubectl explain shows them.
func TestValidationDescriptions(t *testing.T) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: "evaluations.proctor.dev"}, &crd); err != nil {
		t.Fatal(err)
	}
	var schema *apiextensionsv1.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" && v.Schema != nil {
			schema = v.Schema.OpenAPIV3Schema
		}
	}
	if schema == nil {
		t.Fatal("no v1alpha1 schema")
	}
	for _, path := range [][]string{
		{"spec", "models", "rateLimit"},
		{"spec", "models", "rateLimit", "requestsPerMinute"},
		{"spec", "models", "agent", "files"},
		{"spec", "datasets", "source", "file"},
		{"spec", "datasets", "source", "configMap", "name"},
		{"spec", "scoring", "judge", "model"},
		{"spec", "retry", "initialBackoff"},
	} {
		s := schema
		for _, p := range path {
			if s.Type == "array" && s.Items != nil && s.Items.Schema != nil {
				s = s.Items.Schema
			}
			next, ok := s.Properties[p]
			if !ok {
				t.Fatalf("%s: no property %q", strings.Join(path, "."), p)
			}
			s = &next
		}
		if strings.TrimSpace(s.Description) == "" {
			t.Errorf("%s: no description", strings.Join(path, "."))
		}
	}
}
