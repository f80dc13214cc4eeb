package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
)

func TestServicesAndHooksPodTemplate(t *testing.T) {
	probe := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"pg_isready", "-h", "127.0.0.1"}}},
		PeriodSeconds: 1, FailureThreshold: 30, SuccessThreshold: 2,
	}
	ev := testutil.MakeEvaluation("crm", testNS).InlineDataset("d", 4).
		OpenAIModel("gpt", "http://llm.local/v1").APIKeySecret("openai", "api-key").
		Scorer(v1alpha1.ScorerExactMatch).Obj()
	ev.Spec.Services = []v1alpha1.Service{{
		Name:           "crm-db",
		Image:          "registry.example/postgres:15",
		Command:        []string{"sh", "-c", "exec postgres"},
		Env:            []corev1.EnvVar{secretEnv("POSTGRES_PASSWORD", "db", "password")},
		Ports:          []v1alpha1.ServicePort{{Name: "pg", ContainerPort: 5432}},
		ReadinessProbe: probe,
	}}
	ev.Spec.Hooks = &v1alpha1.Hooks{
		Image: "registry.example/psql:15",
		Env:   []corev1.EnvVar{{Name: "PGHOST", Value: "127.0.0.1"}, secretEnv("PGPASSWORD", "db", "password")},
		Setup: &v1alpha1.Hook{Command: []string{"createdb", "crm"}},
	}
	p := passFor(ev)
	got := unitReconciler().shardJob(p, "gpt", 1).Spec.Template.Spec

	startup := probe.DeepCopy()
	startup.SuccessThreshold = 1
	want := []corev1.Container{{
		// The service, a native sidecar started first; the runner starts
		// once its startup probe (its readinessProbe) passed.
		Name:    "crm-db",
		Image:   "registry.example/postgres:15",
		Command: []string{"sh", "-c", "exec postgres"},
		Env: []corev1.EnvVar{
			{Name: "PROCTOR_SERVICE_DIR", Value: "/service"},
			secretEnv("POSTGRES_PASSWORD", "db", "password"),
		},
		Ports:                    []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}},
		ReadinessProbe:           probe,
		StartupProbe:             startup,
		RestartPolicy:            ptr.To(corev1.ContainerRestartPolicyAlways),
		Resources:                resources("50m", "128Mi", "2", "2Gi"),
		VolumeMounts:             []corev1.VolumeMount{{Name: "service-crm-db", MountPath: "/service"}},
		SecurityContext:          restricted(false),
		TerminationMessagePath:   "/dev/termination-log",
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}, wantInstallContainer(), {
		// The hooks' executor in hooks.image, with hooks.env's Secret; the
		// plain values travel with each hook.
		Name:          "hooks",
		Image:         "registry.example/psql:15",
		Command:       []string{"/proctor-bin/proctor", "agent-exec", "--socket", "/run/proctor/hooks.sock", "--workspace-root", "/hooks/workspaces"},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env: []corev1.EnvVar{
			{Name: "HOME", Value: "/hooks/home"},
			{Name: "TMPDIR", Value: "/hooks/tmp"},
			secretEnv("PGPASSWORD", "db", "password"),
		},
		Resources: defaultInitResources,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "proctor-bin", MountPath: "/proctor-bin", ReadOnly: true},
			{Name: "proctor-socket", MountPath: "/run/proctor"},
			{Name: "hooks", MountPath: "/hooks"},
		},
		SecurityContext:          restricted(false),
		TerminationMessagePath:   "/dev/termination-log",
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
	if diff := cmp.Diff(want, got.InitContainers); diff != "" {
		t.Errorf("init containers (-want +got):\n%s", diff)
	}
	runner := got.Containers[0]
	if diff := cmp.Diff([]string{"shard", "--evaluation", "crm", "--run", p.run, "--model", "gpt", "--workers=1", "--shard-retries=3", "--metrics-addr=:9464", "--hook-socket", "/run/proctor/hooks.sock"}, runner.Args); diff != "" {
		t.Errorf("runner args (-want +got):\n%s", diff)
	}
	for _, e := range runner.Env {
		if e.Name == "PGPASSWORD" || e.Name == "POSTGRES_PASSWORD" {
			t.Errorf("the runner has the services' or hooks' variable %s", e.Name)
		}
	}
	var vols []string
	for _, v := range got.Volumes {
		vols = append(vols, v.Name)
	}
	if diff := cmp.Diff([]string{"scratch", "kube-api-access", "service-crm-db", "proctor-bin", "proctor-socket", "hooks"}, vols); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}

	// Without hooks.image, an agent's hooks run in the agent's image, after it.
	ag := testutil.MakeEvaluation("crm", testNS).InlineDataset("d", 4).
		Model(v1alpha1.Model{Name: "coder", Provider: v1alpha1.ProviderAgent, Agent: &v1alpha1.Agent{Image: "registry.example/agent:2", Command: []string{"agent"}}}).
		Scorer(v1alpha1.ScorerExactMatch).Obj()
	ag.Spec.Hooks = &v1alpha1.Hooks{BeforeSample: &v1alpha1.Hook{Command: []string{"reset"}}}
	spec := unitReconciler().shardJob(passFor(ag), "coder", 1).Spec.Template.Spec
	var names []string
	for _, c := range spec.InitContainers {
		names = append(names, c.Name+"="+c.Image)
	}
	if diff := cmp.Diff([]string{"install-proctor=" + testImage, "agent=registry.example/agent:2", "hooks=registry.example/agent:2"}, names); diff != "" {
		t.Errorf("an agent's pod with hooks (-want +got):\n%s", diff)
	}
}

// TestServiceThatNeverBecomesReadyFailsTheRun: the kubelet restarts a
// sidecar whose startup probe failed; a restart before it ever started ends
// the run at once, naming the service and its probe's budget.
func TestServiceThatNeverBecomesReadyFailsTheRun(t *testing.T) {
	h, ev, run := finishedRun(t)
	job := "arith-small-" + run
	withService := func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{
			Name: "crm-db", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(5432)}}, PeriodSeconds: 2, FailureThreshold: 5},
		})
	}
	status := func(restarts int32) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{
			Name: "crm-db", RestartCount: restarts, Started: ptr.To(false),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "Error", Message: "FATAL: could not create lock file",
			}},
		}}}
	}
	// Still within its budget: nothing to say.
	pod := h.runnerPod(job, 0, "a", status(0), withService)
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("phase %s (%s) before the service was restarted", st.Phase, st.Message)
	}
	h.setPodStatus(pod.Name, status(1))
	h.mustReconcile(ev)
	st := h.eval("arith").Status
	want := "pod " + pod.Name + " (shard small/0) service crm-db did not become ready within its readinessProbe's budget " +
		"(10s: initialDelaySeconds 0 + periodSeconds 2 × failureThreshold 5); its last run ended with exit code 137 (Error): " +
		"FATAL: could not create lock file; see kubectl logs " + pod.Name + " -c crm-db --previous"
	if st.Phase != v1alpha1.PhaseFailed || st.Reason != v1alpha1.ReasonServiceNotReady || st.Message != want {
		t.Errorf("phase %s reason %s message\n%q\nwant Failed %s\n%q", st.Phase, st.Reason, st.Message, v1alpha1.ReasonServiceNotReady, want)
	}
}
