package controllers

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// securityEvaluation has an API model, an agent model with a key and
// agent.env from Secrets, a judge, and a url dataset (so that it is planned by
// a planner pod).
func securityEvaluation() *v1alpha1.Evaluation {
	ev := testutil.MakeEvaluation("sec", testNS).
		Dataset(v1alpha1.Dataset{Name: "web", Source: v1alpha1.DatasetSource{URL: "https://example.org/qa.jsonl"}}).
		OpenAIModel("small", "http://llm.local/v1").APIKeySecret("openai", "api-key").
		Model(v1alpha1.Model{
			Name: "coder", Provider: v1alpha1.ProviderAgent,
			APIKey: &v1alpha1.APIKey{Env: "ANTHROPIC_API_KEY", SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "anthropic"}, Key: "key",
			}},
			Agent: &v1alpha1.Agent{
				Image: "busybox:1.35.0", Command: []string{"sh", "-c", "echo hi"},
				Env: []corev1.EnvVar{secretEnv("GH_TOKEN", "github", "token"), {Name: "MODE", Value: "fast"}},
			},
		}).
		OpenAIModel("judge", "http://judge.local/v1").APIKeySecret("judge", "api-key").
		Scorer(v1alpha1.ScorerContains).
		Obj()
	ev.Spec.Scoring = append(ev.Spec.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "judge"}})
	return ev
}

// securityPods are the pod specs of securityEvaluation: its API model's
// shard, its agent's shard and its planner.
func securityPods(t *testing.T) map[string]corev1.PodSpec {
	t.Helper()
	p := passFor(securityEvaluation())
	r := unitReconciler()
	return map[string]corev1.PodSpec{
		"api model": r.shardJob(p, "small", 1).Spec.Template.Spec,
		"agent":     r.shardJob(p, "coder", 1).Spec.Template.Spec,
		"planner":   r.plannerJob(p).Spec.Template.Spec,
	}
}

func allContainers(spec corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

// TestRunnerPodsPassPodSecurityRestricted: Kubernetes' own Pod Security
// checker admits every runner pod at the "restricted" level, whatever user the
// images declare (busybox declares none).
func TestRunnerPodsPassPodSecurityRestricted(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	level := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	for name, spec := range securityPods(t) {
		t.Run(name, func(t *testing.T) {
			results := evaluator.EvaluatePod(level, &metav1.ObjectMeta{Name: "pod", Namespace: testNS}, &spec)
			if agg := policy.AggregateCheckResults(results); !agg.Allowed {
				t.Errorf("Pod Security restricted refuses the pod: %s", agg.ForbiddenDetail())
			}
		})
	}
	// The checker does refuse: the agent pod run as the image's user (root, for
	// busybox).
	spec := securityPods(t)["agent"]
	spec.SecurityContext.RunAsNonRoot, spec.SecurityContext.RunAsUser = nil, nil
	if agg := policy.AggregateCheckResults(evaluator.EvaluatePod(level, &metav1.ObjectMeta{Name: "pod"}, &spec)); agg.Allowed {
		t.Error("Pod Security restricted admits a pod that may run as root")
	}
}

// TestRunnerPodsAreLockedDown: what Pod Security checks, and what it does not:
// every container has requests and limits, a read-only root where the image
// is ours; no shared process namespace; the ServiceAccount token is mounted
// into the runner container only; an agent's key and agent.env Secrets are in
// the agent's container only, the judges' keys in the runner's only.
func TestRunnerPodsAreLockedDown(t *testing.T) {
	for name, spec := range securityPods(t) {
		t.Run(name, func(t *testing.T) {
			if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
				t.Error("the pod shares one process namespace")
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the ServiceAccount token is mounted into every container")
			}
			if spec.HostPID || spec.HostIPC || spec.HostNetwork {
				t.Error("the pod shares the host's namespaces")
			}
			if diff := cmp.Diff(podSecurity, spec.SecurityContext); diff != "" {
				t.Errorf("pod security context (-want +got):\n%s", diff)
			}
			for _, c := range allContainers(spec) {
				ours := c.Name != "agent"
				if diff := cmp.Diff(restricted(ours), c.SecurityContext); diff != "" {
					t.Errorf("container %s: security context (-want +got):\n%s", c.Name, diff)
				}
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if _, ok := c.Resources.Requests[r]; !ok {
						t.Errorf("container %s requests no %s", c.Name, r)
					}
					if _, ok := c.Resources.Limits[r]; !ok {
						t.Errorf("container %s has no %s limit", c.Name, r)
					}
				}
				token := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == tokenVolume || strings.HasPrefix(m.MountPath, "/var/run/secrets")
				})
				if token != (c.Name == "runner") {
					t.Errorf("container %s mounts the token: %v", c.Name, token)
				}
			}
		})
	}

	keys := func(c corev1.Container) []string {
		var out []string
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, e.Name+"<-"+e.ValueFrom.SecretKeyRef.Name)
			}
		}
		return out
	}
	pods := securityPods(t)
	for _, tt := range []struct {
		pod, container string
		want           []string
	}{
		{"api model", "runner", []string{"PROCTOR_API_KEY_SMALL<-openai", "PROCTOR_API_KEY_JUDGE<-judge"}},
		{"agent", "install-proctor", nil},
		{"agent", "agent", []string{"ANTHROPIC_API_KEY<-anthropic", "GH_TOKEN<-github"}},
		{"agent", "runner", []string{"PROCTOR_API_KEY_JUDGE<-judge"}},
		{"planner", "runner", nil},
	} {
		i := slices.IndexFunc(allContainers(pods[tt.pod]), func(c corev1.Container) bool { return c.Name == tt.container })
		if i < 0 {
			t.Errorf("%s pod: no container %s", tt.pod, tt.container)
			continue
		}
		if diff := cmp.Diff(tt.want, keys(allContainers(pods[tt.pod])[i])); diff != "" {
			t.Errorf("%s pod, container %s: Secrets in its environment (-want +got):\n%s", tt.pod, tt.container, diff)
		}
	}
}

// TestResourceDefaults: what the spec sets is kept, what it leaves unset comes
// from the defaults, and no request ends up above its limit.
func TestResourceDefaults(t *testing.T) {
	def := resources("50m", "64Mi", "1", "1Gi")
	withStorage := resources("", "", "", "")
	withStorage.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
	for _, tt := range []struct {
		name string
		set  corev1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		{"nothing set", corev1.ResourceRequirements{}, def},
		{"everything set", resources("1", "1Gi", "2", "2Gi"), resources("1", "1Gi", "2", "2Gi")},
		{"a request above the default limit is the limit", resources("", "1000Gi", "", ""), resources("50m", "1000Gi", "1", "1000Gi")},
		{"a request below the default limit", resources("200m", "", "", ""), resources("200m", "64Mi", "1", "1Gi")},
		// Kubernetes requests the limit; a default request could exceed it.
		{"a limit alone", resources("", "", "", "8Mi"), resources("50m", "", "1", "8Mi")},
		{"other resources kept", withStorage, corev1.ResourceRequirements{
			Requests: def.Requests,
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := tt.set.DeepCopy()
			got := withDefaults(tt.set, def)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("withDefaults (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(set, &tt.set); diff != "" {
				t.Errorf("withDefaults changed the spec's resources (-before +after):\n%s", diff)
			}
		})
	}
}

// TestResourcesOfRunnerPods: spec.runner.resources is the runner container's
// and agent.resources the agent's, each completed from the manager's
// defaults; the init container has the defaults.
func TestResourcesOfRunnerPods(t *testing.T) {
	ev := securityEvaluation()
	ev.Spec.Runner = &v1alpha1.Runner{Resources: resources("", "", "500m", "")}
	ev.Spec.Models[1].Agent.Resources = ptr.To(resources("1", "4Gi", "", ""))
	r := unitReconciler()
	r.Options.Resources = PodResources{
		Runner: resources("10m", "10Mi", "100m", "100Mi"),
		Agent:  resources("20m", "20Mi", "200m", "200Mi"),
		Init:   resources("30m", "30Mi", "300m", "300Mi"),
	}
	spec := r.shardJob(passFor(ev), "coder", 1).Spec.Template.Spec
	got := map[string]corev1.ResourceRequirements{}
	for _, c := range allContainers(spec) {
		got[c.Name] = c.Resources
	}
	want := map[string]corev1.ResourceRequirements{
		"install-proctor": resources("30m", "30Mi", "300m", "300Mi"),
		"agent":           resources("1", "4Gi", "1", "4Gi"),
		"runner":          resources("", "10Mi", "500m", "100Mi"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("containers' resources (-want +got):\n%s", diff)
	}
}
