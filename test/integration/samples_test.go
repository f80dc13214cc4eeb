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
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
			evaluations := 0
			for {
				var obj unstructured.Unstructured
				if err := r.Decode(&obj.Object); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				if len(obj.Object) == 0 {
					continue
				}
				if obj.GetKind() == "Evaluation" {
					evaluations++
				}
				obj.SetNamespace(ns)
				if err := k8sClient.Create(context.Background(), &obj, client.DryRunAll); err != nil {
					t.Errorf("%s %s refused: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
			if evaluations == 0 && !strings.Contains(f, "kustomization") {
				t.Error("no Evaluation in the sample")
			}
		})
	}
}
