package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// warnings collects the warnings the API server sends a client.
type warnings struct {
	mu   sync.Mutex
	said []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.said = append(w.said, text)
}

// take returns the warnings since the last take.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	said := w.said
	w.said = nil
	return said
}

// inlineEvaluation is an Evaluation whose datasets hold sizes[i] samples inline.
func inlineEvaluation(ns, name string, sizes ...int) *unstructured.Unstructured {
	var datasets strings.Builder
	for i, n := range sizes {
		fmt.Fprintf(&datasets, "  - name: d%d\n    source:\n      inline:\n", i)
		for j := range n {
			fmt.Fprintf(&datasets, "      - {id: s%d, input: \"What is %d+1?\", expected: \"%d\"}\n", j, j, j+1)
		}
	}
	var obj unstructured.Unstructured
	if err := yaml.Unmarshal(fmt.Appendf(nil, `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: %s, namespace: %s}
spec:
  datasets:
%s  models:
  - {name: m, provider: openai, model: gpt-4o-mini, apiKey: {env: OPENAI_API_KEY}}
  scoring: [{type: exact_match}]
`, name, ns, datasets.String()), &obj.Object); err != nil {
		panic(err)
	}
	return &obj
}

// TestLargeInlineDatasetsWarn installs config/policy (the chart renders the
// same policy: test/chart) and applies Evaluations as kubectl would: more than
// 1,000 samples inline, in one dataset or across several, draw a warning that
// says how many and what to use instead; nothing is refused, and the
// manager's status writes are not checked.
func TestLargeInlineDatasetsWarn(t *testing.T) {
	ctx := context.Background()
	objs := readManifests(t, filepath.Join(root, "config", "policy", "large_inline_datasets.yaml"))
	if len(objs) != 2 {
		t.Fatalf("config/policy/large_inline_datasets.yaml holds %d objects, want a policy and its binding", len(objs))
	}
	var binding *unstructured.Unstructured
	for _, obj := range objs {
		// Named as kustomize's namePrefix would, apart from other tests' objects.
		obj.SetName("test-" + obj.GetName())
		if obj.GetKind() == "ValidatingAdmissionPolicyBinding" {
			binding = obj
			if err := unstructured.SetNestedField(obj.Object, obj.GetName(), "spec", "policyName"); err != nil {
				t.Fatal(err)
			}
		}
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj) })
	}
	if binding == nil {
		t.Fatal("config/policy/large_inline_datasets.yaml has no ValidatingAdmissionPolicyBinding")
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-"}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	var heard warnings
	wc := rest.CopyConfig(cfg)
	wc.WarningHandlerWithContext = &heard
	c, err := client.New(wc, client.Options{Scheme: k8sClient.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	// The API server applies a new policy within a second or so: dry runs
	// until it warns.
	eventually(t, 30*time.Second, "the policy in force", func() (bool, string) {
		heard.take()
		if err := c.Create(ctx, inlineEvaluation(ns.Name, "probe", 1001), client.DryRunAll); err != nil {
			return false, err.Error()
		}
		return len(heard.take()) > 0, "no warning yet"
	})

	const want = "spec.datasets hold %d samples inline (more than 1000)"
	for _, tc := range []struct {
		name  string
		sizes []int
		warn  int // the samples the warning counts; 0: no warning
	}{
		{"one-large", []int{1001}, 1001},
		{"two-that-add-up", []int{600, 401}, 1001},
		{"at-the-threshold", []int{1000}, 0},
		{"small", []int{3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			heard.take()
			ev := inlineEvaluation(ns.Name, tc.name, tc.sizes...)
			if err := c.Create(ctx, ev); err != nil {
				t.Fatalf("refused: %v", err)
			}
			got := heard.take()
			switch {
			case tc.warn == 0 && len(got) > 0:
				t.Errorf("warnings %q, want none", got)
			case tc.warn > 0 && (len(got) != 1 || !strings.Contains(got[0], fmt.Sprintf(want, tc.warn)) || !strings.Contains(got[0], "configMap")):
				t.Errorf("warnings %q, want one saying %q and naming a configMap source", got, fmt.Sprintf(want, tc.warn))
			}
			// A status write (the manager's) is not the spec: no warning.
			if err := unstructured.SetNestedField(ev.Object, "Pending", "status", "phase"); err != nil {
				t.Fatal(err)
			}
			if err := c.Status().Update(ctx, ev); err != nil {
				t.Fatalf("status update: %v", err)
			}
			if got := heard.take(); len(got) > 0 {
				t.Errorf("a status write drew warnings %q", got)
			}
		})
	}

	// The chart binds the policy in its watchNamespaces only (test/chart
	// pins the selector): an Evaluation elsewhere draws no warning.
	t.Run("watched-namespaces-only", func(t *testing.T) {
		other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-other-"}}
		if err := k8sClient.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), other) })
		patch := fmt.Appendf(nil, `{"spec": {"matchResources": {"namespaceSelector": {"matchExpressions": [
			{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [%q]}]}}}}`, ns.Name)
		if err := k8sClient.Patch(ctx, binding, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the binding limited to "+ns.Name, func() (bool, string) {
			heard.take()
			if err := c.Create(ctx, inlineEvaluation(other.Name, "probe", 1001), client.DryRunAll); err != nil {
				return false, err.Error()
			}
			return len(heard.take()) == 0, "still warned in " + other.Name
		})
		heard.take()
		if err := c.Create(ctx, inlineEvaluation(ns.Name, "watched", 1001), client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if got := heard.take(); len(got) != 1 {
			t.Errorf("in the watched namespace %s: warnings %q, want one", ns.Name, got)
		}
	})
}
