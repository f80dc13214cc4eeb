package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/compile"
)

// Paths inside runner pods.
const (
	scratchDir     = "/scratch"
	datasetRoot    = "/datasets"
	proctorBinDir  = "/proctor-bin"
	runnerBinary   = "/proctor"
	runnerName     = "runner"
	exitCodeFinal  = 2 // invalid input: retrying cannot help
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
		case apierrors.IsNotFound(err):
			if err := controllerutil.SetControllerReference(p.ev, want, r.Scheme); err != nil {
				return false, err
			}
			if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
				return false, fmt.Errorf("creating Job %s: %w", want.Name, err)
			}
			job = *want
		case err != nil:
			return false, err
		case !r.ours(p, "Job", &job):
			return false, nil // never run, suspend or delete someone else's Job
		default:
			if err := r.syncJob(ctx, &job, want); err != nil {
				return false, err
			}
		}
		p.jobs[model] = &job
	}
	return true, nil
}

// syncJob applies the live fields of the spec to a Job.
func (r *EvaluationReconciler) syncJob(ctx context.Context, job, want *batchv1.Job) error {
	if ptr.Equal(job.Spec.Suspend, want.Spec.Suspend) && ptr.Equal(job.Spec.Parallelism, want.Spec.Parallelism) {
		return nil
	}
	patch := client.MergeFrom(job.DeepCopy())
	job.Spec.Suspend, job.Spec.Parallelism = want.Spec.Suspend, want.Spec.Parallelism
	if err := r.Patch(ctx, job, patch); err != nil {
		return fmt.Errorf("updating Job %s: %w", job.Name, err)
	}
	return nil
}

// shardJob is the Indexed Job that runs a model's shards: completion index i
// evaluates shard i.
func (r *EvaluationReconciler) shardJob(p *pass, model string, shards int) *batchv1.Job {
	ev, spec := p.ev, &p.ev.Spec
	labels := cluster.Labels(ev.Name, p.run, cluster.ComponentRunner)
	labels[cluster.LabelModel] = model
	pod := r.podTemplate(p, maps.Clone(labels), []string{"shard", "--evaluation", ev.Name, "--run", p.run, "--model", model}, model)
	return &batchv1.Job{
		ObjectMeta: objectMeta(ev.Namespace, cluster.JobName(ev.Name, model, p.run), labels),
		Spec: batchv1.JobSpec{
			Completions:          ptr.To(int32(shards)),
			Parallelism:          ptr.To(*spec.Parallelism),
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			BackoffLimitPerIndex: ptr.To(r.Options.ShardRetries),
			// A shard that failed for good fails the run: the Job stops at once
			// instead of running the other shards of a run that cannot succeed.
			MaxFailedIndexes: ptr.To(int32(0)),
			// A replacement pod starts only once the old one is gone, so a shard
			// never has two writers.
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{
					// Evictions and preemptions are not the shard's fault.
					Action:          batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
				},
				{
					// Invalid input: retrying cannot help.
					Action: batchv1.PodFailurePolicyActionFailIndex,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						ContainerName: ptr.To(runnerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{exitCodeFinal},
					},
				},
			}},
			Suspend:  ptr.To(spec.Suspend != nil && *spec.Suspend),
			Template: pod,
		},
	}
}

// plannerJob is the Job that counts the samples of url and pvc datasets.
func (r *EvaluationReconciler) plannerJob(p *pass) *batchv1.Job {
	ev := p.ev
	labels := cluster.Labels(ev.Name, p.run, cluster.ComponentPlanner)
	args := []string{"plan", "--evaluation", ev.Name, "--run", p.run, fmt.Sprintf("--storage-budget=%d", max(0, r.Options.StorageBudget))}
	pod := r.podTemplate(p, maps.Clone(labels), args, "")
	return &batchv1.Job{
		ObjectMeta: objectMeta(ev.Namespace, cluster.PlannerJobName(ev.Name, p.run), labels),
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(plannerRetries)),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action: batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr.To(runnerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{exitCodeFinal},
				},
			}}},
			Template: pod,
		},
	}
}

// podTemplate is a runner pod: the proctor binary running args. For an agent
// model the container is the agent's image, into which an init container copies
// the binary. model is "" for the planner.
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
	sa := cluster.RunnerName(p.ev.Name)
	if rs.ServiceAccountName != "" {
		sa = rs.ServiceAccountName
	}

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
		Resources:    rs.Resources,
		VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: scratchDir}},
		// proctor writes its fatal error there; without one (killed, OOM), the
		// kubelet takes the end of the log. The controller puts it in status.
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	volumes := []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	var initContainers []corev1.Container
	var shareProcesses *bool

	if model != "" {
		c.Env = append(c.Env, r.keyEnv(spec, model)...)
		if m := findModel(spec, model); m != nil && m.Agent != nil {
			// The agent's image runs proctor, which runs the agent CLI beside it.
			c.Image = m.Agent.Image
			c.Command = []string{proctorBinDir + runnerBinary}
			// proctor would be PID 1 and leave the orphans of killed agents as
			// zombies; with one process namespace the pod's pause process, which
			// reaps them, is PID 1.
			shareProcesses = ptr.To(true)
			for _, e := range m.Agent.Env {
				if e.ValueFrom != nil {
					c.Env = append(c.Env, e)
				}
			}
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "proctor-bin", MountPath: proctorBinDir})
			volumes = append(volumes, corev1.Volume{Name: "proctor-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			initContainers = append(initContainers, corev1.Container{
				Name:                     "install-proctor",
				Image:                    runnerImage,
				Command:                  []string{runnerBinary, "install", proctorBinDir + runnerBinary},
				VolumeMounts:             []corev1.VolumeMount{{Name: "proctor-bin", MountPath: proctorBinDir}},
				SecurityContext:          c.SecurityContext.DeepCopy(),
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			})
		} else {
			c.SecurityContext.RunAsNonRoot = ptr.To(true)
		}
	} else {
		c.SecurityContext.RunAsNonRoot = ptr.To(true)
	}

	for i, d := range spec.Datasets {
		if d.Source.PVC == nil {
			continue
		}
		name := fmt.Sprintf("dataset-%d", i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: d.Source.PVC.ClaimName, ReadOnly: true},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: datasetRoot + "/" + d.Source.PVC.ClaimName, ReadOnly: true})
	}

	return corev1.PodTemplateSpec{
		ObjectMeta: objectMeta("", "", labels),
		Spec: corev1.PodSpec{
			ServiceAccountName:            sa,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(graceSeconds)),
			NodeSelector:                  rs.NodeSelector,
			Tolerations:                   rs.Tolerations,
			InitContainers:                initContainers,
			ShareProcessNamespace:         shareProcesses,
			Containers:                    []corev1.Container{c},
			Volumes:                       volumes,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
}

// keyEnv gives a shard's pod the API keys of its model and of the judge models
// it calls, from their Secrets, each under its own variable.
func (r *EvaluationReconciler) keyEnv(spec *v1alpha1.EvaluationSpec, model string) []corev1.EnvVar {
	names := []string{model}
	for j := range spec.JudgeModels() {
		names = append(names, j)
	}
	slices.Sort(names[1:])
	var env []corev1.EnvVar
	for _, n := range slices.Compact(names) {
		m := findModel(spec, n)
		if m == nil || m.APIKey == nil || m.APIKey.SecretKeyRef == nil {
			continue
		}
		env = append(env, corev1.EnvVar{
			Name:      compile.APIKeyEnv(n),
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: m.APIKey.SecretKeyRef.DeepCopy()},
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
