package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/source"
)

// Paths and names inside runner pods.
const (
	scratchDir    = "/scratch"
	proctorBinDir = "/proctor-bin"
	runnerBinary  = "/proctor"
	runnerName    = "runner"
	agentName     = "agent"
	installName   = "install-proctor"
	// socketDir holds the agent executor's socket, in a volume of the runner
	// and agent containers.
	socketDir  = "/run/proctor"
	socketPath = socketDir + "/agent.sock"
	// agentDir is the agent container's scratch volume: HOME, TMPDIR and the
	// samples' workspaces.
	agentDir = "/agent"
	// tokenDir is where client-go's in-cluster configuration looks.
	tokenDir    = "/var/run/secrets/kubernetes.io/serviceaccount"
	tokenVolume = "kube-api-access"
	// pacerVolume holds the runner's token for the pacer.
	pacerVolume = "pacer-token"
	// podUser runs every container of runner pods (distroless "nonroot").
	podUser        = int64(65532)
	graceSeconds   = 30
	plannerRetries = 2
)

// ensureJobs creates each model's Job if absent, and keeps its suspend and
// parallelism in line with the spec (the only Job fields that may change).
func (r *EvaluationReconciler) ensureJobs(ctx context.Context, p *pass) (bool, error) {
	if p.plan == nil {
		return false, nil
	}
	for _, model := range cluster.Subjects(&p.ev.Spec) {
		n := len(p.plan.Shards(&p.ev.Spec, model))
		if n == 0 {
			continue
		}
		want := r.shardJob(p, model, n)
		var job batchv1.Job
		err := r.Get(ctx, client.ObjectKeyFromObject(want), &job)
		switch {
		case apierrors.IsNotFound(err) && p.endpointsGone:
			continue // its pods would not know where to call
		case apierrors.IsNotFound(err):
			if err := controllerutil.SetControllerReference(p.ev, want, r.Scheme); err != nil {
				return false, err
			}
			if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
				if p.refused("Job", want.Name, err) {
					return false, nil
				}
				return false, fmt.Errorf("creating Job %s: %w", want.Name, err)
			}
			job = *want
		case err != nil:
			return false, err
		case !r.ours(p, "Job", &job):
			return false, nil // never run, suspend or delete someone else's Job
		default:
			if err := r.syncJob(ctx, p, &job, want); err != nil {
				return false, err
			}
		}
		p.jobs[model] = &job
	}
	return true, nil
}

// syncJob applies the live fields of the spec to a Job. A Job Kueue admits
// is Kueue's to suspend and unsuspend, and to narrow (partial admission):
// spec.suspend (de)activates its Workload instead, and a new parallelism or
// queue reaches it only while it waits, unadmitted (Kueue moves it).
func (r *EvaluationReconciler) syncJob(ctx context.Context, p *pass, job, want *batchv1.Job) error {
	queue := job.Labels[cluster.LabelKueueQueueName]
	if kueueManaged(job) {
		if err := r.setActive(ctx, p, job, !ptr.Deref(p.ev.Spec.Suspend, false)); err != nil {
			return err
		}
		want = want.DeepCopy()
		want.Spec.Suspend = job.Spec.Suspend
		if !ptr.Deref(job.Spec.Suspend, false) {
			want.Spec.Parallelism = job.Spec.Parallelism
		} else if q := want.Labels[cluster.LabelKueueQueueName]; q != "" {
			queue = q
		}
	}
	if c := job.Spec.Completions; c != nil && want.Spec.Parallelism != nil && *want.Spec.Parallelism > *c {
		// No more pods than the Job's workers: a raised spec.parallelism
		// reaches a run's workers only up to their number, fixed at its start.
		want = want.DeepCopy()
		want.Spec.Parallelism = ptr.To(*c)
	}
	if ptr.Equal(job.Spec.Suspend, want.Spec.Suspend) && ptr.Equal(job.Spec.Parallelism, want.Spec.Parallelism) &&
		queue == job.Labels[cluster.LabelKueueQueueName] {
		return nil
	}
	patch := client.MergeFrom(job.DeepCopy())
	job.Spec.Suspend, job.Spec.Parallelism = want.Spec.Suspend, want.Spec.Parallelism
	if queue != "" {
		job.Labels[cluster.LabelKueueQueueName] = queue
	}
	if err := r.Patch(ctx, job, patch); err != nil {
		return fmt.Errorf("updating Job %s: %w", job.Name, err)
	}
	return nil
}

// shardJob is the Indexed Job that runs a model's shards: one completion
// index per worker (cluster.Workers), worker w evaluating shards w, w+W, ...
// one after another (cluster.WorkerShards), so that a pod's start-up is paid
// once per worker, not once per shard.
func (r *EvaluationReconciler) shardJob(p *pass, model string, shards int) *batchv1.Job {
	ev, spec := p.ev, &p.ev.Spec
	labels := cluster.Labels(ev.Name, p.run, cluster.ComponentRunner)
	labels[cluster.LabelModel] = model
	workers := cluster.Workers(*spec.Parallelism, shards)
	retries := r.Options.ShardRetries
	pod := r.podTemplate(p, maps.Clone(labels), cluster.ShardArgs(ev.Name, p.run, model, workers, retries), model)
	// Each of a worker's shards may fail on retries+1 pods before the next
	// pod fails it for good (cluster.ExitRetriesUsed): the Job's count of a
	// worker's failures must not end it first.
	perWorker := int32((shards + workers - 1) / workers)
	job := &batchv1.Job{
		ObjectMeta: objectMeta(ev.Namespace, cluster.JobName(ev.Name, model, p.run), labels),
		Spec: batchv1.JobSpec{
			Completions:          ptr.To(int32(workers)),
			Parallelism:          ptr.To(int32(workers)),
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			BackoffLimitPerIndex: ptr.To((retries + 1) * perWorker),
			// A worker that failed for good (on one of its shards) fails the
			// run: the Job stops at once instead of running the other shards
			// of a run that cannot succeed.
			MaxFailedIndexes: ptr.To(int32(0)),
			// A replacement pod starts only once the old one is gone, so a
			// worker's shards never have two writers.
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{
					// Evictions and preemptions are not the shard's fault.
					Action:          batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
				},
				{
					// Invalid input, a hook that failed for good (setup, or a
					// slot that stayed broken past hooks.repairTimeout), or a
					// shard that used up its retries: retrying cannot help.
					Action: batchv1.PodFailurePolicyActionFailIndex,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						ContainerName: ptr.To(runnerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn,
						Values: []int32{cluster.ExitInvalid, cluster.ExitHookFailed, cluster.ExitRetriesUsed},
					},
				},
			}},
			Suspend:  ptr.To(spec.Suspend != nil && *spec.Suspend),
			Template: pod,
		},
	}
	r.queued(spec, job)
	return job
}

// plannerJob is the Job that counts the samples of url and pvc datasets.
func (r *EvaluationReconciler) plannerJob(p *pass) *batchv1.Job {
	ev := p.ev
	labels := cluster.Labels(ev.Name, p.run, cluster.ComponentPlanner)
	pod := r.podTemplate(p, maps.Clone(labels), cluster.PlanArgs(ev.Name, p.run, r.Options.StorageBudget), "")
	job := &batchv1.Job{
		ObjectMeta: objectMeta(ev.Namespace, cluster.PlannerJobName(ev.Name, p.run), labels),
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(plannerRetries)),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action: batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr.To(runnerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{cluster.ExitInvalid},
				},
			}}},
			Template: pod,
		},
	}
	r.queued(&ev.Spec, job)
	return job
}

// podTemplate is a runner pod: the proctor binary running args in the runner
// image, as a non-root user with nothing but what it needs. For an agent
// model the agent runs beside it in its own container of the agent's image (a
// native sidecar, into which an init container copies the proctor binary):
// `proctor agent-exec` there runs each sample the runner sends over a Unix
// socket. The containers share no process namespace, and only the runner has
// the ServiceAccount's token and the judges' keys; only the agent has its own
// key and agent.env. model is "" for the planner.
func (r *EvaluationReconciler) podTemplate(p *pass, labels map[string]string, args []string, model string) corev1.PodTemplateSpec {
	spec := &p.ev.Spec
	rs := spec.Runner
	if rs == nil {
		rs = &v1alpha1.Runner{}
	}
	runnerImage := r.RunnerImage
	if rs.Image != "" {
		runnerImage = rs.Image
	}
	sa := cluster.RunnerServiceAccount(p.ev)
	defaults := r.Options.Resources

	c := corev1.Container{
		Name:    runnerName,
		Image:   runnerImage,
		Command: []string{runnerBinary},
		Args:    args,
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "TMPDIR", Value: scratchDir},
		},
		Resources: withDefaults(rs.Resources, defaults.Runner),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "scratch", MountPath: scratchDir},
			{Name: tokenVolume, MountPath: tokenDir, ReadOnly: true},
		},
		// proctor writes its fatal error there; without one (killed, OOM), the
		// kubelet takes the end of the log. The controller puts it in status.
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// proctor writes only to its scratch volume.
		SecurityContext: restrictedContainer(true),
	}
	volumes := []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		tokenVolumeFor(),
	}
	var initContainers []corev1.Container

	if model == "" {
		c.Env = append(c.Env, plannerKeyEnv(spec)...)
	} else {
		m := findModel(spec, model)
		agent := m != nil && m.Agent != nil
		// Its metrics (cluster.ShardArgs serves them), for a PodMonitor.
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: cluster.MetricsPortName, ContainerPort: cluster.MetricsPort, Protocol: corev1.ProtocolTCP})
		c.Env = append(c.Env, r.keyEnv(spec, model, !agent)...)
		c.Env = append(c.Env, agentEndpointKeyEnv(m, p.agentEndpoints)...)
		c.Env = append(c.Env, r.tracingEnv(spec)...)
		if u := r.Options.PacerURL; u != "" {
			// The pacer, and a token only it accepts (its audience).
			c.Env = append(c.Env, corev1.EnvVar{Name: cluster.EnvPacerURL, Value: u})
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: pacerVolume, MountPath: cluster.PacerTokenDir, ReadOnly: true})
			volumes = append(volumes, corev1.Volume{Name: pacerVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: ptr.To(int32(0o644)),
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: cluster.PacerAudience, Path: cluster.PacerTokenFile, ExpirationSeconds: ptr.To(int64(3607)),
				}}},
			}}})
		}
		// Services first: the agent and the hooks start once they are up.
		services, serviceVolumes := r.serviceContainers(spec)
		initContainers = append(initContainers, services...)
		volumes = append(volumes, serviceVolumes...)
		if agent || spec.Hooks != nil {
			// The executors' binary and sockets.
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "proctor-socket", MountPath: socketDir})
			initContainers = append(initContainers, r.installContainer(runnerImage))
			volumes = append(volumes,
				corev1.Volume{Name: "proctor-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				corev1.Volume{Name: "proctor-socket", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			)
		}
		if agent {
			c.Args = append(c.Args, "--"+cluster.FlagAgentSocket, socketPath)
			initContainers = append(initContainers, r.agentContainer(m))
			volumes = append(volumes, corev1.Volume{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
		if spec.Hooks != nil {
			c.Args = append(c.Args, "--"+cluster.FlagHookSocket, hookSocket)
			initContainers = append(initContainers, r.hooksContainer(spec.Hooks, m))
			volumes = append(volumes, corev1.Volume{Name: hooksName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
	}

	for i := range spec.Datasets {
		d := &spec.Datasets[i]
		if k, ok := source.Of(&d.Source).(source.Mounted); ok {
			v, m := k.Volume(d, fmt.Sprintf("dataset-%d", i))
			volumes = append(volumes, v)
			c.VolumeMounts = append(c.VolumeMounts, m)
		}
	}

	return corev1.PodTemplateSpec{
		ObjectMeta: objectMeta("", "", labels),
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			// The token is mounted into the runner container only (tokenVolume):
			// the agent's container must not act as the runner.
			AutomountServiceAccountToken:  ptr.To(false),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(graceSeconds)),
			NodeSelector:                  rs.NodeSelector,
			Tolerations:                   rs.Tolerations,
			PriorityClassName:             priorityClassName(spec),
			InitContainers:                initContainers,
			Containers:                    []corev1.Container{c},
			Volumes:                       volumes,
			// Pod Security "restricted" with any image: agent images often have
			// no USER (root), so the user is set here.
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr.To(true),
				RunAsUser:           ptr.To(podUser),
				RunAsGroup:          ptr.To(podUser),
				FSGroup:             ptr.To(podUser),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
}

// installContainer copies the proctor binary into a volume, for the
// executors of the agent's and the hooks' containers.
func (r *EvaluationReconciler) installContainer(runnerImage string) corev1.Container {
	return corev1.Container{
		Name:                     installName,
		Image:                    runnerImage,
		Command:                  []string{runnerBinary, "install", proctorBinDir + runnerBinary},
		Resources:                withDefaults(corev1.ResourceRequirements{}, r.Options.Resources.Init),
		VolumeMounts:             []corev1.VolumeMount{{Name: "proctor-bin", MountPath: proctorBinDir}},
		SecurityContext:          restrictedContainer(true),
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// agentContainer is the agent's own container, a native sidecar
// (restartPolicy Always) that runs from before the runner starts to after it
// ends, when the kubelet stops it. Its PID 1 is the executor, which reaps the
// orphans of the agents it runs.
func (r *EvaluationReconciler) agentContainer(m *v1alpha1.Model) corev1.Container {
	var env []corev1.EnvVar
	if k := m.APIKey; k != nil && k.SecretKeyRef != nil {
		// The agent reads its key under the name the model declares.
		env = append(env, corev1.EnvVar{Name: k.Env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: k.SecretKeyRef.DeepCopy()}})
	}
	var resources corev1.ResourceRequirements
	if m.Agent.Resources != nil {
		resources = *m.Agent.Resources
	}
	return executorContainer(agentName, m.Agent.Image, socketPath, agentDir, append(env, fromPod(m.Agent.Env)...),
		withDefaults(resources, r.Options.Resources.Agent))
}

// executorContainer is a native sidecar (started before the runner, stopped
// after it) whose PID 1 is `proctor agent-exec` on socket, in image: the
// agent's container, or the hooks'. dir is its scratch volume, mounted under
// the container's name: HOME, TMPDIR (the image's are rarely writable by the
// pod's user) and the workspaces. env follows HOME and TMPDIR.
func executorContainer(name, image, socket, dir string, env []corev1.EnvVar, resources corev1.ResourceRequirements) corev1.Container {
	return corev1.Container{
		Name:          name,
		Image:         image,
		Command:       []string{proctorBinDir + runnerBinary, "agent-exec", "--socket", socket, "--workspace-root", dir + "/workspaces"},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env:           append([]corev1.EnvVar{{Name: "HOME", Value: dir + "/home"}, {Name: "TMPDIR", Value: dir + "/tmp"}}, env...),
		Resources:     resources,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "proctor-bin", MountPath: proctorBinDir, ReadOnly: true},
			{Name: "proctor-socket", MountPath: socketDir},
			{Name: name, MountPath: dir},
		},
		// Its image may write anywhere in its own filesystem, which no other
		// container sees: its root stays writable.
		SecurityContext:          restrictedContainer(false),
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// fromPod are the entries of env whose values the pod sets (valueFrom): the
// others travel with each request through the executor.
func fromPod(env []corev1.EnvVar) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range env {
		if e.ValueFrom != nil {
			out = append(out, *e.DeepCopy())
		}
	}
	return out
}

// restrictedContainer is the security context of every container of runner
// pods: what Pod Security "restricted" asks (with the pod's), and a read-only
// root filesystem where the image is ours.
func restrictedContainer(readOnlyRoot bool) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if readOnlyRoot {
		sc.ReadOnlyRootFilesystem = ptr.To(true)
	}
	return sc
}

// tokenVolumeFor is the ServiceAccount token volume Kubernetes mounts into
// every container of a pod that does not opt out, made by hand so that only
// the runner container mounts it: a bound token, the cluster's CA and the
// namespace, which client-go's in-cluster configuration reads.
func tokenVolumeFor() corev1.Volume {
	return corev1.Volume{Name: tokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			// 3607 s, as Kubernetes' own: the kubelet renews the token well before.
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3607))}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}}}
}

// PodResources are the default requests and limits of the containers of
// runner pods, for what an Evaluation leaves unset (the manager's flags).
type PodResources struct {
	// Runner is the runner container's (spec.runner.resources).
	Runner corev1.ResourceRequirements
	// Agent is the agent container's (agent.resources).
	Agent corev1.ResourceRequirements
	// Init is the init container's that installs proctor into agent pods.
	Init corev1.ResourceRequirements
}

// DefaultPodResources are small requests, so that many runner pods fit a
// small cluster, and limits that leave room: a runner streams its data (a
// million samples in ~110 MiB), an agent CLI may need a few hundred MiB per
// sample in flight.
func DefaultPodResources() PodResources {
	rr := func(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(reqCPU), corev1.ResourceMemory: resource.MustParse(reqMem)},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limCPU), corev1.ResourceMemory: resource.MustParse(limMem)},
		}
	}
	return PodResources{
		Runner: rr("50m", "64Mi", "1", "1Gi"),
		Agent:  rr("50m", "128Mi", "2", "2Gi"),
		Init:   rr("10m", "32Mi", "500m", "128Mi"),
	}
}

// defaults sets DefaultPodResources when none were given at all; the manager
// always gives them (its flags), so that one group can be made empty.
func (pr *PodResources) defaults() {
	for _, rr := range []corev1.ResourceRequirements{pr.Runner, pr.Agent, pr.Init} {
		if len(rr.Requests) > 0 || len(rr.Limits) > 0 {
			return
		}
	}
	*pr = DefaultPodResources()
}

// withDefaults fills in from def the requests and limits that set leaves
// unset, so that every container has both (a ResourceQuota may demand them),
// keeping each request within its limit. A resource with a limit but no
// request is left so: Kubernetes then requests the limit.
func withDefaults(set, def corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *set.DeepCopy()
	names := map[corev1.ResourceName]bool{}
	for n := range def.Requests {
		names[n] = true
	}
	for n := range def.Limits {
		names[n] = true
	}
	for n := range names {
		req, hasReq := out.Requests[n]
		_, hasLim := out.Limits[n]
		switch {
		case !hasReq && !hasLim:
			if q, ok := def.Requests[n]; ok {
				if out.Requests == nil {
					out.Requests = corev1.ResourceList{}
				}
				out.Requests[n] = q.DeepCopy()
			}
			if q, ok := def.Limits[n]; ok {
				if out.Limits == nil {
					out.Limits = corev1.ResourceList{}
				}
				out.Limits[n] = q.DeepCopy()
			}
		case hasReq && !hasLim:
			if q, ok := def.Limits[n]; ok {
				if q.Cmp(req) < 0 {
					q = req // a request past the default limit is the limit
				}
				if out.Limits == nil {
					out.Limits = corev1.ResourceList{}
				}
				out.Limits[n] = q.DeepCopy()
			}
		}
	}
	return out
}

// keyEnv gives a shard's runner container the API keys of the judge models it
// calls and, with own (not for an agent, whose key is in its own container),
// of its model, from their Secrets, each under its own variable.
func (r *EvaluationReconciler) keyEnv(spec *v1alpha1.EvaluationSpec, model string, own bool) []corev1.EnvVar {
	names := []string{model}
	for j := range spec.JudgeModels() {
		names = append(names, j)
	}
	slices.Sort(names[1:])
	if !own {
		names = slices.DeleteFunc(names, func(n string) bool { return n == model })
	}
	return modelKeyEnv(spec, slices.Compact(names))
}

// plannerKeyEnv gives the planner the keys of the models it counts prompts
// for, when the run is estimated: every model but agents (not estimated).
func plannerKeyEnv(spec *v1alpha1.EvaluationSpec) []corev1.EnvVar {
	if !apiconv.WantsEstimate(spec) {
		return nil
	}
	var names []string
	for i := range spec.Models {
		if spec.Models[i].Provider != v1alpha1.ProviderAgent {
			names = append(names, spec.Models[i].Name)
		}
	}
	return modelKeyEnv(spec, names)
}

// modelKeyEnv are the variables holding the keys (from their Secrets) of the
// named models.
func modelKeyEnv(spec *v1alpha1.EvaluationSpec, names []string) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, n := range names {
		m := findModel(spec, n)
		if m == nil || m.APIKey == nil || m.APIKey.SecretKeyRef == nil {
			continue
		}
		env = append(env, corev1.EnvVar{
			Name:      cluster.APIKeyEnv(n),
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: m.APIKey.SecretKeyRef.DeepCopy()},
		})
	}
	return env
}

// agentEndpointKeyEnv gives the runner container of an agent's pod the keys
// of the ModelEndpoints the agent calls, for its proxies: the agent's own
// container gets only placeholders.
func agentEndpointKeyEnv(m *v1alpha1.Model, specs map[string]*v1alpha1.ModelEndpointSpec) []corev1.EnvVar {
	if m == nil || m.Agent == nil {
		return nil
	}
	var env []corev1.EnvVar
	for _, a := range m.Agent.Endpoints {
		spec := specs[a.EndpointRef.Name]
		if spec == nil || spec.APIKey == nil || spec.APIKey.SecretKeyRef == nil {
			continue
		}
		env = append(env, corev1.EnvVar{
			Name:      cluster.EndpointKeyEnv(a.EndpointRef.Name),
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: spec.APIKey.SecretKeyRef.DeepCopy()},
		})
	}
	return env
}

func findModel(spec *v1alpha1.EvaluationSpec, name string) *v1alpha1.Model {
	for i := range spec.Models {
		if spec.Models[i].Name == name {
			return &spec.Models[i]
		}
	}
	return nil
}

// tracingEnv tells a shard's runner where its traces go, in the standard
// OTLP variables (the runner reads them as any OpenTelemetry SDK would):
// spec.tracing's endpoint, else the manager's; none, none. The headers
// (credentials) come from their Secret, never through the spec.
func (r *EvaluationReconciler) tracingEnv(spec *v1alpha1.EvaluationSpec) []corev1.EnvVar {
	endpoint, protocol := r.Options.TracesEndpoint, r.Options.TracesProtocol
	t := spec.Tracing
	if t != nil && t.Endpoint != "" {
		endpoint, protocol = t.Endpoint, ""
	}
	if t != nil && t.Protocol != "" {
		protocol = string(t.Protocol)
	}
	if endpoint == "" {
		return nil
	}
	env := []corev1.EnvVar{{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: endpoint}}
	if protocol != "" {
		env = append(env, corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Value: protocol})
	}
	if t != nil && t.HeadersSecretRef != nil {
		env = append(env, corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_HEADERS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: t.HeadersSecretRef.DeepCopy()}})
	}
	return env
}

// priorityClassName is the runner pods' PriorityClass (spec.scheduling), by
// which the scheduler and Kueue order and preempt them.
func priorityClassName(spec *v1alpha1.EvaluationSpec) string {
	if s := spec.Scheduling; s != nil {
		return s.PriorityClassName
	}
	return ""
}
