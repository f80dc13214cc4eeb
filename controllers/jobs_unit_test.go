package controllers

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// passFor is a pass over ev at t0 for its current run.
func passFor(ev *v1alpha1.Evaluation) *pass {
	p := newPass(ev, t0)
	p.run = cluster.RunID(ev)
	return p
}

func unitReconciler() *EvaluationReconciler {
	r := &EvaluationReconciler{RunnerImage: testImage}
	initReconciler(r)
	return r
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
	}}}
}

var baseEnv = []corev1.EnvVar{
	{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	{Name: "TMPDIR", Value: "/scratch"},
}

func withEnv(extra ...corev1.EnvVar) []corev1.EnvVar {
	return append(append([]corev1.EnvVar(nil), baseEnv...), extra...)
}

func resources(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
	rl := func(cpu, mem string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		if len(l) == 0 {
			return nil
		}
		return l
	}
	return corev1.ResourceRequirements{Requests: rl(reqCPU, reqMem), Limits: rl(limCPU, limMem)}
}

// The defaults of DefaultPodResources.
var (
	defaultRunnerResources = resources("50m", "64Mi", "1", "1Gi")
	defaultInitResources   = resources("10m", "32Mi", "500m", "128Mi")
)

// restricted is the security context of every container of runner pods.
func restricted(readOnlyRoot bool) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if readOnlyRoot {
		sc.ReadOnlyRootFilesystem = ptr.To(true)
	}
	return sc
}

// podSecurity is runner pods' security context: Pod Security "restricted".
var podSecurity = &corev1.PodSecurityContext{
	RunAsNonRoot:        ptr.To(true),
	RunAsUser:           ptr.To[int64](65532),
	RunAsGroup:          ptr.To[int64](65532),
	FSGroup:             ptr.To[int64](65532),
	FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
	SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
}

// tokenMount and tokenVolume are the ServiceAccount token, mounted into the
// runner container only.
var (
	tokenMount = corev1.VolumeMount{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}
	tokenVol   = corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o644),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}}}
	scratchVol = corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
)

// judgedEvaluation has a subject model and a judge, both keyed from Secrets, a
// PVC dataset, and runner settings.
func judgedEvaluation() *v1alpha1.Evaluation {
	ev := testutil.MakeEvaluation("arith", testNS).
		InlineDataset("d", 10).
		Dataset(v1alpha1.Dataset{Name: "big", Source: v1alpha1.DatasetSource{PVC: &v1alpha1.PVCSource{ClaimName: "data", Path: "qa/data.jsonl"}}}).
		OpenAIModel("small", "http://llm.local/v1").APIKeySecret("openai", "api-key").
		AnthropicModel("judge", "http://judge.local").APIKeySecret("anthropic", "key").
		Scorer(v1alpha1.ScorerExactMatch).
		ShardSize(5).Parallelism(3).
		Obj()
	ev.Spec.Scoring = append(ev.Spec.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "judge"}})
	ev.Spec.Runner = &v1alpha1.Runner{
		Resources:    resources("", "", "", "256Mi"),
		NodeSelector: map[string]string{"pool": "eval"},
		Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "eval", Effect: corev1.TaintEffectNoSchedule}},
	}
	return ev
}

func TestShardJobGolden(t *testing.T) {
	ev := judgedEvaluation()
	p := passFor(ev)
	run := p.run
	labels := map[string]string{
		"app.kubernetes.io/managed-by": "proctor",
		"proctor.dev/evaluation":       "arith",
		"proctor.dev/run":              run,
		"proctor.dev/component":        "runner",
		"proctor.dev/model":            "small",
	}
	want := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "arith-small-" + run, Labels: labels},
		Spec: batchv1.JobSpec{
			// 4 shards, 3 at once: 3 workers, one of which runs 2 shards
			// (3 retries each).
			Completions:          ptr.To[int32](3),
			Parallelism:          ptr.To[int32](3),
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			BackoffLimitPerIndex: ptr.To[int32](8),
			MaxFailedIndexes:     ptr.To[int32](0),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{
					Action:          batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
				},
				{
					Action: batchv1.PodFailurePolicyActionFailIndex,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						ContainerName: ptr.To("runner"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{2, 3, 4},
					},
				},
			}},
			Suspend: ptr.To(false),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "arith-runner",
					AutomountServiceAccountToken:  ptr.To(false),
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To[int64](30),
					NodeSelector:                  map[string]string{"pool": "eval"},
					Tolerations:                   []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "eval", Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:    "runner",
						Image:   testImage,
						Command: []string{"/proctor"},
						Args:    []string{"shard", "--evaluation", "arith", "--run", run, "--model", "small", "--workers=3", "--shard-retries=3", "--metrics-addr=:9464"},
						Ports:   []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9464, Protocol: corev1.ProtocolTCP}},
						Env: withEnv(
							secretEnv("PROCTOR_API_KEY_SMALL", "openai", "api-key"),
							secretEnv("PROCTOR_API_KEY_JUDGE", "anthropic", "key"),
						),
						// The memory limit is the spec's (Kubernetes requests as
						// much); cpu has the defaults.
						Resources: resources("50m", "", "1", "256Mi"),
						VolumeMounts: []corev1.VolumeMount{
							{Name: "scratch", MountPath: "/scratch"},
							tokenMount,
							{Name: "dataset-1", MountPath: "/datasets/data", ReadOnly: true},
						},
						TerminationMessagePath:   "/dev/termination-log",
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext:          restricted(true),
					}},
					Volumes: []corev1.Volume{
						scratchVol,
						tokenVol,
						{Name: "dataset-1", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: true}}},
					},
					SecurityContext: podSecurity,
				},
			},
		},
	}
	got := unitReconciler().shardJob(p, "small", 4)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("shardJob mismatch (-want +got):\n%s", diff)
	}
}

func TestPlannerJobGolden(t *testing.T) {
	ev := testutil.MakeEvaluation("arith", testNS).
		Dataset(v1alpha1.Dataset{Name: "web", Source: v1alpha1.DatasetSource{URL: "https://example.org/qa.jsonl"}}).
		OpenAIModel("small", "http://llm.local/v1").APIKeySecret("openai", "api-key").
		Scorer(v1alpha1.ScorerExactMatch).
		RunnerImage("registry.example/proctor:2").
		Obj()
	p := passFor(ev)
	run := p.run
	labels := map[string]string{
		"app.kubernetes.io/managed-by": "proctor",
		"proctor.dev/evaluation":       "arith",
		"proctor.dev/run":              run,
		"proctor.dev/component":        "planner",
	}
	want := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "arith-" + run + "-plan", Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](2),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action: batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr.To("runner"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{2},
				},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "arith-runner",
					AutomountServiceAccountToken:  ptr.To(false),
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To[int64](30),
					Containers: []corev1.Container{{
						Name:    "runner",
						Image:   "registry.example/proctor:2",
						Command: []string{"/proctor"},
						Args:    []string{"plan", "--evaluation", "arith", "--run", run, "--storage-budget=67108864"},
						// The planner only counts: it gets no API key.
						Env:                      withEnv(),
						Resources:                defaultRunnerResources,
						VolumeMounts:             []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, tokenMount},
						TerminationMessagePath:   "/dev/termination-log",
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext:          restricted(true),
					}},
					Volumes:         []corev1.Volume{scratchVol, tokenVol},
					SecurityContext: podSecurity,
				},
			},
		},
	}
	got := unitReconciler().plannerJob(p)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plannerJob mismatch (-want +got):\n%s", diff)
	}
}

// wantInstallContainer is the init container that copies proctor into the
// volume of the agent's and the hooks' executors.
func wantInstallContainer() corev1.Container {
	return corev1.Container{
		Name:            "install-proctor",
		Image:           testImage,
		Command:         []string{"/proctor", "install", "/proctor-bin/proctor"},
		Resources:       defaultInitResources,
		VolumeMounts:    []corev1.VolumeMount{{Name: "proctor-bin", MountPath: "/proctor-bin"}},
		SecurityContext: restricted(true),
		// Why a pod failed reaches the Evaluation's status.
		TerminationMessagePath:   "/dev/termination-log",
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

func TestAgentPodTemplate(t *testing.T) {
	ev := testutil.MakeEvaluation("agents", testNS).
		InlineDataset("d", 4).
		Model(v1alpha1.Model{
			Name: "coder", Provider: v1alpha1.ProviderAgent,
			APIKey: &v1alpha1.APIKey{Env: "ANTHROPIC_API_KEY", SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "anthropic"}, Key: "key",
			}},
			Agent: &v1alpha1.Agent{
				Image:   "registry.example/agents/cli:1.0",
				Command: []string{"agent-cli", "-p", "{{ .Prompt }}"},
				Env: []corev1.EnvVar{
					{Name: "PLAIN", Value: "given through the spec, not the pod"},
					secretEnv("GH_TOKEN", "github", "token"),
					{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				},
				Resources: ptr.To(resources("", "1Gi", "", "")),
			},
		}).
		OpenAIModel("judge", "http://judge.local/v1").APIKeySecret("openai", "api-key").
		Scorer(v1alpha1.ScorerContains).
		Obj()
	ev.Spec.Scoring = append(ev.Spec.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "judge"}})
	p := passFor(ev)
	got := unitReconciler().shardJob(p, "coder", 1).Spec.Template.Spec

	want := corev1.PodSpec{
		ServiceAccountName:            "agents-runner",
		AutomountServiceAccountToken:  ptr.To(false),
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](30),
		InitContainers: []corev1.Container{wantInstallContainer(), {
			// The agent's own container: a native sidecar whose PID 1 is the
			// executor, with the agent's key and agent.env valueFrom entries.
			Name:          "agent",
			Image:         "registry.example/agents/cli:1.0",
			Command:       []string{"/proctor-bin/proctor", "agent-exec", "--socket", "/run/proctor/agent.sock", "--workspace-root", "/agent/workspaces"},
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Env: []corev1.EnvVar{
				{Name: "HOME", Value: "/agent/home"},
				{Name: "TMPDIR", Value: "/agent/tmp"},
				secretEnv("ANTHROPIC_API_KEY", "anthropic", "key"),
				secretEnv("GH_TOKEN", "github", "token"),
				{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			},
			// agent.resources' memory request, the rest the defaults.
			Resources: resources("50m", "1Gi", "2", "2Gi"),
			VolumeMounts: []corev1.VolumeMount{
				{Name: "proctor-bin", MountPath: "/proctor-bin", ReadOnly: true},
				{Name: "proctor-socket", MountPath: "/run/proctor"},
				{Name: "agent", MountPath: "/agent"},
			},
			// Agent images may write to their own filesystem.
			SecurityContext:          restricted(false),
			TerminationMessagePath:   "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
		Containers: []corev1.Container{{
			// The runner: the runner image, the judge's key, the token.
			Name:      "runner",
			Image:     testImage,
			Command:   []string{"/proctor"},
			Args:      []string{"shard", "--evaluation", "agents", "--run", p.run, "--model", "coder", "--workers=1", "--shard-retries=3", "--metrics-addr=:9464", "--agent-socket", "/run/proctor/agent.sock"},
			Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9464, Protocol: corev1.ProtocolTCP}},
			Env:       withEnv(secretEnv("PROCTOR_API_KEY_JUDGE", "openai", "api-key")),
			Resources: defaultRunnerResources,
			VolumeMounts: []corev1.VolumeMount{
				{Name: "scratch", MountPath: "/scratch"},
				tokenMount,
				{Name: "proctor-socket", MountPath: "/run/proctor"},
			},
			SecurityContext:          restricted(true),
			TerminationMessagePath:   "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
		Volumes: []corev1.Volume{
			scratchVol,
			tokenVol,
			{Name: "proctor-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "proctor-socket", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		SecurityContext: podSecurity,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent pod spec mismatch (-want +got):\n%s", diff)
	}
}

func TestPodTemplateVariants(t *testing.T) {
	cases := []struct {
		name      string
		runner    *v1alpha1.Runner
		wantImage string
		wantSA    string
	}{
		{name: "defaults", wantImage: testImage, wantSA: "arith-runner"},
		{name: "empty runner", runner: &v1alpha1.Runner{}, wantImage: testImage, wantSA: "arith-runner"},
		{name: "image override", runner: &v1alpha1.Runner{Image: "mirror.example/proctor:1"}, wantImage: "mirror.example/proctor:1", wantSA: "arith-runner"},
		{name: "service account override", runner: &v1alpha1.Runner{ServiceAccountName: "team-sa"}, wantImage: testImage, wantSA: "team-sa"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 3).OpenAIModel("small", "http://llm.local/v1").Scorer(v1alpha1.ScorerExactMatch).Obj()
			ev.Spec.Runner = tc.runner
			p := passFor(ev)
			for _, job := range []*batchv1.Job{unitReconciler().shardJob(p, "small", 1), unitReconciler().plannerJob(p)} {
				spec := job.Spec.Template.Spec
				if got := spec.Containers[0].Image; got != tc.wantImage {
					t.Errorf("%s: image = %q, want %q", job.Name, got, tc.wantImage)
				}
				if spec.ServiceAccountName != tc.wantSA {
					t.Errorf("%s: serviceAccountName = %q, want %q", job.Name, spec.ServiceAccountName, tc.wantSA)
				}
			}
		})
	}
}

func TestShardJobSuspendAndParallelism(t *testing.T) {
	cases := []struct {
		shards, workers, retries int32
	}{
		{shards: 9, workers: 7, retries: 8}, // 2 shards for some workers: 4 failures each
		{shards: 3, workers: 3, retries: 4}, // never more workers than shards
		{shards: 70, workers: 7, retries: 40},
	}
	for _, tc := range cases {
		for _, suspend := range []bool{false, true} {
			ev := testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 3).OpenAIModel("small", "http://llm.local/v1").
				Scorer(v1alpha1.ScorerExactMatch).Parallelism(7).Suspend(suspend).Obj()
			job := unitReconciler().shardJob(passFor(ev), "small", int(tc.shards))
			if got := *job.Spec.Suspend; got != suspend {
				t.Errorf("suspend=%v: Job suspend = %v", suspend, got)
			}
			if got := *job.Spec.Parallelism; got != tc.workers {
				t.Errorf("%d shards: Job parallelism = %d, want %d", tc.shards, got, tc.workers)
			}
			if got := *job.Spec.Completions; got != tc.workers {
				t.Errorf("%d shards: Job completions = %d, want %d (one per worker)", tc.shards, got, tc.workers)
			}
			if got := *job.Spec.BackoffLimitPerIndex; got != tc.retries {
				t.Errorf("%d shards: backoffLimitPerIndex = %d, want %d (3 retries of each of a worker's shards)", tc.shards, got, tc.retries)
			}
			if args := job.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, fmt.Sprintf("--workers=%d", tc.workers)) {
				t.Errorf("%d shards: runner args %q do not say --workers=%d", tc.shards, args, tc.workers)
			}
		}
	}
}

func TestKeyEnv(t *testing.T) {
	key := func(secret string) *v1alpha1.APIKey {
		return &v1alpha1.APIKey{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "k"}}
	}
	judge := func(m string) v1alpha1.Scorer {
		return v1alpha1.Scorer{Type: v1alpha1.ScorerJudge, Name: "judge-" + m, Judge: &v1alpha1.Judge{Model: m}}
	}
	cases := []struct {
		name    string
		models  []v1alpha1.Model
		scoring []v1alpha1.Scorer
		model   string
		want    []corev1.EnvVar
	}{
		{
			name:   "no key: a local server",
			models: []v1alpha1.Model{{Name: "small", Provider: v1alpha1.ProviderOpenAI}},
			model:  "small",
		},
		{
			name:   "own key, dashes become underscores",
			models: []v1alpha1.Model{{Name: "gpt-mini", Provider: v1alpha1.ProviderOpenAI, APIKey: key("openai")}},
			model:  "gpt-mini",
			want:   []corev1.EnvVar{secretEnv("PROCTOR_API_KEY_GPT_MINI", "openai", "k")},
		},
		{
			name:   "apiKey with env only gives no variable",
			models: []v1alpha1.Model{{Name: "small", Provider: v1alpha1.ProviderOpenAI, APIKey: &v1alpha1.APIKey{Env: "OPENAI_API_KEY"}}},
			model:  "small",
		},
		{
			name: "judges' keys follow the model's, sorted",
			models: []v1alpha1.Model{
				{Name: "small", Provider: v1alpha1.ProviderOpenAI, APIKey: key("s")},
				{Name: "zeta", Provider: v1alpha1.ProviderOpenAI, APIKey: key("z")},
				{Name: "alpha", Provider: v1alpha1.ProviderAnthropic, APIKey: key("a")},
				{Name: "other", Provider: v1alpha1.ProviderOpenAI, APIKey: key("o")},
			},
			scoring: []v1alpha1.Scorer{judge("zeta"), judge("alpha")},
			model:   "small",
			want: []corev1.EnvVar{
				secretEnv("PROCTOR_API_KEY_SMALL", "s", "k"),
				secretEnv("PROCTOR_API_KEY_ALPHA", "a", "k"),
				secretEnv("PROCTOR_API_KEY_ZETA", "z", "k"),
			},
		},
		{
			name: "a judge without a key adds nothing",
			models: []v1alpha1.Model{
				{Name: "small", Provider: v1alpha1.ProviderOpenAI},
				{Name: "judge", Provider: v1alpha1.ProviderOpenAI},
			},
			scoring: []v1alpha1.Scorer{judge("judge")},
			model:   "small",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &v1alpha1.EvaluationSpec{Models: tc.models, Scoring: tc.scoring}
			got := unitReconciler().keyEnv(spec, tc.model, true)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("keyEnv mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTracingEnv: a shard's runner is told where its traces go in the
// standard OTLP variables: the Evaluation's endpoint, else the manager's;
// the headers (credentials) from their Secret only.
func TestTracingEnv(t *testing.T) {
	env := func(kv ...string) []corev1.EnvVar {
		var out []corev1.EnvVar
		for i := 0; i < len(kv); i += 2 {
			out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	headers := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "langfuse"}, Key: "otlp-headers"}
	for _, tc := range []struct {
		name               string
		endpoint, protocol string // the manager's
		tracing            *v1alpha1.Tracing
		want               []corev1.EnvVar
	}{
		{name: "none anywhere"},
		{name: "content alone sends nothing", tracing: &v1alpha1.Tracing{CaptureContent: true}},
		{
			name: "the manager's", endpoint: "http://collector:4318", protocol: "http/protobuf",
			want: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
		},
		{
			name: "the spec's endpoint, not the manager's protocol", endpoint: "http://collector:4317", protocol: "grpc",
			tracing: &v1alpha1.Tracing{Endpoint: "https://mlflow.example:5000"},
			want:    env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://mlflow.example:5000"),
		},
		{
			name: "the spec's protocol to the manager's endpoint", endpoint: "http://collector:4317", protocol: "http/protobuf",
			tracing: &v1alpha1.Tracing{Protocol: v1alpha1.TracingProtocolGRPC},
			want:    env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
		},
		{
			name:    "headers from their Secret",
			tracing: &v1alpha1.Tracing{Endpoint: "https://cloud.langfuse.com/api/public/otel", HeadersSecretRef: headers},
			want: append(env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://cloud.langfuse.com/api/public/otel"),
				corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_HEADERS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: headers}}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := unitReconciler()
			r.Options.TracesEndpoint, r.Options.TracesProtocol = tc.endpoint, tc.protocol
			got := r.tracingEnv(&v1alpha1.EvaluationSpec{Tracing: tc.tracing})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("tracingEnv (-want +got):\n%s", diff)
			}
		})
	}
}

// No runner pod ever carries a literal API key: every variable but TMPDIR
// comes from a reference.
func TestRunnerPodsCarryNoLiteralSecrets(t *testing.T) {
	ev := judgedEvaluation()
	p := passFor(ev)
	r := unitReconciler()
	for _, job := range []*batchv1.Job{r.shardJob(p, "small", 2), r.plannerJob(p)} {
		for _, c := range append(job.Spec.Template.Spec.InitContainers, job.Spec.Template.Spec.Containers...) {
			for _, e := range c.Env {
				if e.Value != "" && e.Name != "TMPDIR" {
					t.Errorf("%s/%s: env %s has a literal value %q", job.Name, c.Name, e.Name, e.Value)
				}
				if strings.HasPrefix(e.Name, "PROCTOR_API_KEY_") && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s/%s: %s is not read from a Secret", job.Name, c.Name, e.Name)
				}
			}
		}
	}
}

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
