package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSamplesAreAccepted: every manifest in config/samples passes the API
// server's validation (server-side dry run), so the samples users start from
// keep up with the schema and its rules.
func TestSamplesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "proctor_*.yaml"))
	if err != nil || len(files) < 8 {
		t.Fatalf("found %d samples (%v), want at least 8", len(files), err)
	}
	ns := newNamespace(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			evaluations := 0
			for _, obj := range readManifests(t, f) {
				if obj.GetKind() == "Evaluation" {
					evaluations++
				}
				obj.SetNamespace(ns)
				if err := k8sClient.Create(context.Background(), obj, client.DryRunAll); err != nil {
					t.Errorf("%s %s refused: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
			if evaluations == 0 && !strings.Contains(f, "kustomization") {
				t.Error("no Evaluation in the sample")
			}
		})
	}
}

// readManifests decodes the objects of a YAML file of one or more documents
// (empty ones skipped), failing the test on any it cannot read.
func readManifests(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var obj unstructured.Unstructured
		if err := r.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, &obj)
		}
	}
}
