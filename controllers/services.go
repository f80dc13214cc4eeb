package controllers

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// Paths and names of services and hooks in runner pods.
const (
	// serviceDir is each service's own scratch volume (PROCTOR_SERVICE_DIR).
	serviceDir = "/service"
	hooksName  = "hooks"
	// hooksDir is the hooks container's scratch volume: HOME, TMPDIR and the
	// hooks' workspaces.
	hooksDir   = "/hooks"
	hookSocket = socketDir + "/hooks.sock"
)

// serviceContainers are a model pod's services (spec.services): native
// sidecars, started in order before the runner, each only once its startup
// probe (its readinessProbe) passed, so that the runner starts with every
// service up; stopped after the runner ends. Each has an emptyDir of its own
// at PROCTOR_SERVICE_DIR.
func (r *EvaluationReconciler) serviceContainers(spec *v1alpha1.EvaluationSpec) ([]corev1.Container, []corev1.Volume) {
	var cs []corev1.Container
	var vs []corev1.Volume
	for i := range spec.Services {
		s := &spec.Services[i]
		volume := "service-" + s.Name
		env := append([]corev1.EnvVar{{Name: "PROCTOR_SERVICE_DIR", Value: serviceDir}}, deepCopyEnv(s.Env)...)
		var resources corev1.ResourceRequirements
		if s.Resources != nil {
			resources = *s.Resources
		}
		c := corev1.Container{
			Name:          s.Name,
			Image:         s.Image,
			Command:       s.Command,
			Args:          s.Args,
			Env:           env,
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Resources:     withDefaults(resources, r.Options.Resources.Agent),
			VolumeMounts:  []corev1.VolumeMount{{Name: volume, MountPath: serviceDir}},
			// A service's image writes where it will (a database's sockets and
			// lock files): its root stays writable, and no other container sees it.
			SecurityContext:          restrictedContainer(false),
			TerminationMessagePath:   corev1.TerminationMessagePathDefault,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}
		for _, p := range s.Ports {
			c.Ports = append(c.Ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: corev1.ProtocolTCP})
		}
		if p := s.ReadinessProbe; p != nil {
			c.ReadinessProbe = p.DeepCopy()
			// The same probe gates the runner's start: the kubelet starts the
			// next container once a sidecar's startup probe passed. Its
			// budget is the readinessProbe's; past it the kubelet restarts
			// the service, which the controller reports (ServiceNotReady).
			c.StartupProbe = p.DeepCopy()
			c.StartupProbe.SuccessThreshold = 1
		}
		cs = append(cs, c)
		vs = append(vs, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	return cs, vs
}

// hooksContainer runs spec.hooks for the runner: `proctor agent-exec` (copied
// in by the install container) in hooks.image, or the agent's, with
// hooks.env, which no other container has. A native sidecar, as the agent's.
func (r *EvaluationReconciler) hooksContainer(h *v1alpha1.Hooks, m *v1alpha1.Model) corev1.Container {
	image := h.Image
	if image == "" && m != nil && m.Agent != nil {
		image = m.Agent.Image
	}
	return executorContainer(hooksName, image, hookSocket, hooksDir, fromPod(h.Env),
		withDefaults(corev1.ResourceRequirements{}, r.Options.Resources.Init))
}

func deepCopyEnv(env []corev1.EnvVar) []corev1.EnvVar {
	out := make([]corev1.EnvVar, len(env))
	for i := range env {
		env[i].DeepCopyInto(&out[i])
	}
	return out
}

// serviceProblem says why a pending pod's service (a native sidecar of
// spec.services) did not become ready: the kubelet restarts a sidecar whose
// startup probe failed failureThreshold times, or that exited, so a restart
// before it ever started means its probe's budget is spent. Waiting cannot
// help: the problem is fatal.
func serviceProblem(pod *corev1.Pod, shard string) *problem {
	services := map[string]*corev1.Container{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && c.Name != agentName && c.Name != hooksName {
			services[c.Name] = c
		}
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		c := services[cs.Name]
		if c == nil || cs.RestartCount == 0 || (cs.Started != nil && *cs.Started) {
			continue
		}
		msg := fmt.Sprintf("pod %s (shard %s) service %s did not become ready", pod.Name, shard, cs.Name)
		if p := c.StartupProbe; p != nil {
			period := p.PeriodSeconds
			if period == 0 {
				period = 10
			}
			threshold := p.FailureThreshold
			if threshold == 0 {
				threshold = 3
			}
			msg += fmt.Sprintf(" within its readinessProbe's budget (%ds: initialDelaySeconds %d + periodSeconds %d × failureThreshold %d)",
				p.InitialDelaySeconds+period*threshold, p.InitialDelaySeconds, period, threshold)
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			msg += fmt.Sprintf("; its last run ended with exit code %d (%s)", t.ExitCode, orDefault(t.Reason, "Error"))
			if d := detail(t.Message); d != "" {
				msg += ": " + d
			}
		}
		msg += fmt.Sprintf("; see kubectl logs %s -c %s --previous", pod.Name, cs.Name)
		return &problem{reason: v1alpha1.ReasonServiceNotReady, message: msg, fatal: true}
	}
	return nil
}
