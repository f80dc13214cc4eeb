package compile_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// TestCheckCompilesHooksWithoutTheirContainer: the controller's check of a
// spec with hooks (whose env comes from Secrets) compiles them as the pods
// will, without the hooks' container.
func TestCheckCompilesHooksWithoutTheirContainer(t *testing.T) {
	ev := testutil.MakeEvaluation("crm", "ns").InlineDataset("d", 2).
		Model(v1alpha1.Model{Name: "coder", Provider: v1alpha1.ProviderAgent, Agent: &v1alpha1.Agent{Image: "a:1", Command: []string{"agent"},
			Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}}}}).
		Scorer(v1alpha1.ScorerExactMatch).Obj()
	ev.Spec.Hooks = &v1alpha1.Hooks{
		Env:          []corev1.EnvVar{{Name: "PGPASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}},
		BeforeSample: &v1alpha1.Hook{Command: []string{"psql", "-d", "crm_{{ .Slot }}", "-c", "{{ .Sample.input }}"}},
	}
	v1alpha1.SetDefaults(&ev.Spec)
	if _, err := compile.Check(context.Background(), ev, compile.Env{DataDir: t.TempDir()}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	// A template naming a field the data lacks is found then, naming the hook.
	ev.Spec.Hooks.BeforeSample.Command[3] = "{{ .Sample.entities }}"
	_, err := compile.Check(context.Background(), ev, compile.Env{DataDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "spec.hooks.beforeSample: dataset \"d\" sample") || !strings.Contains(err.Error(), "entities") {
		t.Errorf("Check: %v, want the hook's template error", err)
	}
}
