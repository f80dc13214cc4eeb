package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/shard"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// startPod creates the Pod object of a shard's attempt, Running, as the Job
// controller and the kubelet would (the test API server has neither), so that
// the manager sees the shard's pod. It returns nil if it could not.
func (k *kubelet) startPod(ctx context.Context, j *batchv1.Job, index, attempt, failures int, name string) *corev1.Pod {
	pod := newJobPod(j, index, name)
	pod.Annotations["batch.kubernetes.io/job-index-failure-count"] = fmt.Sprint(failures)
	if err := k8sClient.Create(ctx, pod); err != nil {
		return nil
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "runner", Image: pod.Spec.Containers[0].Image, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}}
	if err := k8sClient.Status().Update(ctx, pod); err != nil {
		return nil
	}
	return pod
}

// endPod marks an attempt's pod finished, with the runner's exit code and
// error as its termination message.
func (k *kubelet) endPod(ctx context.Context, pod *corev1.Pod, runErr error) {
	if pod == nil || k.stopped.Load() {
		return
	}
	t := &corev1.ContainerStateTerminated{Reason: "Completed", FinishedAt: metav1.Now()}
	pod.Status.Phase = corev1.PodSucceeded
	var invalid *shard.InvalidError
	switch {
	case runErr == nil || errors.Is(runErr, kube.ErrObsolete):
	case errors.As(runErr, &invalid):
		pod.Status.Phase, t.Reason, t.ExitCode, t.Message = corev1.PodFailed, "Error", 2, runErr.Error()
	case errors.As(runErr, new(*shard.RetriesUsedError)):
		pod.Status.Phase, t.Reason, t.ExitCode, t.Message = corev1.PodFailed, "Error", cluster.ExitRetriesUsed, runErr.Error()
	default:
		pod.Status.Phase, t.Reason, t.ExitCode, t.Message = corev1.PodFailed, "Error", 1, runErr.Error()
	}
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: t}
	_ = k8sClient.Status().Update(ctx, pod)
}

// newJobPod is the pod the Job controller makes for index of Job j.
func newJobPod(j *batchv1.Job, index int, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: j.Namespace, Name: name,
			Labels:      j.Spec.Template.Labels,
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(index)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true),
			}},
		},
		Spec: *j.Spec.Template.Spec.DeepCopy(),
	}
}

// runnerJob waits for the runner Job of model m of Evaluation name.
func runnerJob(t *testing.T, ns, name, model string) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	eventually(t, 20*time.Second, "the runner Job", func() (bool, string) {
		var jobs batchv1.JobList
		if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns), client.MatchingLabels{
			cluster.LabelEvaluation: name, cluster.LabelComponent: cluster.ComponentRunner, cluster.LabelModel: model,
		}); err != nil || len(jobs.Items) == 0 {
			return false, fmt.Sprint(err)
		}
		job = &jobs.Items[0]
		return true, ""
	})
	return job
}

// podWithStatus creates a pod of index of job with a status, as the kubelet reports it.
func podWithStatus(t *testing.T, job *batchv1.Job, index int, name string, status corev1.PodStatus, edit func(*corev1.Pod)) {
	t.Helper()
	pod := newJobPod(job, index, name)
	if edit != nil {
		edit(pod)
	}
	create(t, pod)
	pod.Status = status
	if err := k8sClient.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// waitReason waits for an Evaluation's status.reason and returns the Evaluation,
// and how long it took.
func waitReason(t *testing.T, ns, name, reason string, timeout time.Duration) (*v1alpha1.Evaluation, time.Duration) {
	t.Helper()
	start := time.Now()
	var ev *v1alpha1.Evaluation
	eventually(t, timeout, name+" to say "+reason, func() (bool, string) {
		ev = getEvaluation(t, ns, name)
		return ev.Status.Reason == reason, fmt.Sprintf("phase %s reason %q message %q", ev.Status.Phase, ev.Status.Reason, ev.Status.Message)
	})
	return ev, time.Since(start)
}

func eventReasons(t *testing.T, ns, name string) []string {
	t.Helper()
	var events corev1.EventList
	if err := k8sClient.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "Evaluation" && e.InvolvedObject.Name == name {
			out = append(out, e.Reason)
		}
	}
	return out
}

// TestPodProblemsEndTheRun, against a real API server: a runner pod waiting on
// a Secret without the key shows in status within seconds (reason, message
// naming the Secret and key, Degraded, a pending shard, an event), the run
// fails after spec.runner.stallTimeout and its Job is suspended.
func TestPodProblemsEndTheRun(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "openai"}, StringData: map[string]string{"api-key": "k"}})
	ev := testutil.MakeEvaluation("nokey", ns).InlineDataset("d", 4).OpenAIModel("m", "http://127.0.0.1:1/v1").APIKeySecret("openai", "nope").
		Scorer(v1alpha1.ScorerExactMatch).Obj()
	ev.Spec.Runner = &v1alpha1.Runner{StallTimeout: &v1alpha1.Timeout{Duration: 4 * time.Second}}
	create(t, ev)
	job := runnerJob(t, ns, "nokey", "m")
	podWithStatus(t, job, 0, job.Name+"-0-abcde", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "runner", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "CreateContainerConfigError", Message: "couldn't find key nope in Secret " + ns + "/openai",
		}},
	}}}, nil)

	got, took := waitReason(t, ns, "nokey", "CreateContainerConfigError", 5*time.Second)
	t.Logf("CreateContainerConfigError in status %v after the pod reported it", took)
	if !strings.Contains(got.Status.Message, "couldn't find key nope in Secret "+ns+"/openai") || !strings.Contains(got.Status.Message, job.Name+"-0-abcde") {
		t.Errorf("message %q does not name the pod, the Secret and the key", got.Status.Message)
	}
	if c := findCondition(got, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "CreateContainerConfigError" {
		t.Errorf("Degraded = %+v", c)
	}
	if s := got.Status.Shards; s == nil || s.Pending != 1 || s.Active != 0 {
		t.Errorf("shards %+v, want 1 pending, 0 active", s)
	}

	failed := waitPhase(t, ns, "nokey", v1alpha1.PhaseFailed, 15*time.Second)
	if failed.Status.Reason != "CreateContainerConfigError" || !strings.Contains(failed.Status.Message, "no runner pod could start for 4s") {
		t.Errorf("reason %q message %q", failed.Status.Reason, failed.Status.Message)
	}
	eventually(t, 10*time.Second, "the Job suspended", func() (bool, string) {
		var j batchv1.Job
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(job), &j); err != nil {
			return false, err.Error()
		}
		return ptr.Deref(j.Spec.Suspend, false), "not suspended"
	})
	eventually(t, 10*time.Second, "the events", func() (bool, string) {
		r := eventReasons(t, ns, "nokey")
		return strings.Contains(strings.Join(r, ","), "CreateContainerConfigError") && strings.Contains(strings.Join(r, ","), "Failed"), fmt.Sprint(r)
	})
}

// TestFailedCreateIsVisible: the Job controller's FailedCreate event (a quota
// or Pod Security refusing the pods; no Job condition says it) reaches the
// Evaluation's status through the manager's filtered event cache.
func TestFailedCreateIsVisible(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	create(t, testutil.MakeEvaluation("quota", ns).InlineDataset("d", 4).OpenAIModel("m", "http://127.0.0.1:1/v1").
		Scorer(v1alpha1.ScorerExactMatch).Obj())
	job := runnerJob(t, ns, "quota", "m")
	now := metav1.Now()
	create(t, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: job.Name + ".fc"},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: ns, Name: job.Name, UID: job.UID},
		Reason:         "FailedCreate", Type: corev1.EventTypeWarning, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Message: `Error creating: pods "` + job.Name + `-0-x" is forbidden: failed quota: q: must specify limits.memory for: runner`,
		Source:  corev1.EventSource{Component: "job-controller"},
	})
	got, took := waitReason(t, ns, "quota", "FailedCreate", 5*time.Second)
	t.Logf("FailedCreate in status %v after the event", took)
	if !strings.Contains(got.Status.Message, "Job "+job.Name+" cannot create pods") || !strings.Contains(got.Status.Message, "must specify limits.memory") {
		t.Errorf("message %q", got.Status.Message)
	}
}

// TestOOMKilledShardFailsTheRun: a shard whose last pod was OOMKilled and whose
// index failed ends the run Failed, saying so and naming the memory limit.
func TestOOMKilledShardFailsTheRun(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	ev := testutil.MakeEvaluation("oom", ns).InlineDataset("d", 4).OpenAIModel("m", "http://127.0.0.1:1/v1").
		Scorer(v1alpha1.ScorerExactMatch).Obj()
	ev.Spec.Runner = &v1alpha1.Runner{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Mi")}}}
	create(t, ev)
	job := runnerJob(t, ns, "oom", "m")
	if job.Spec.MaxFailedIndexes == nil || *job.Spec.MaxFailedIndexes != 0 {
		t.Errorf("maxFailedIndexes = %v, want 0: a failed shard fails the Job at once", job.Spec.MaxFailedIndexes)
	}
	podWithStatus(t, job, 0, job.Name+"-0-oom", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "runner", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}},
	}}}, func(p *corev1.Pod) { p.Annotations["batch.kubernetes.io/job-index-failure-count"] = "3" })
	got, _ := waitReason(t, ns, "oom", "OOMKilled", 5*time.Second)
	if got.Status.Phase != v1alpha1.PhaseRunning || !strings.Contains(got.Status.Message, "memory limit 8Mi") {
		t.Errorf("before the Job ends: phase %s message %q", got.Status.Phase, got.Status.Message)
	}
	// The Job controller fails the index, then the Job.
	var j batchv1.Job
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(job), &j); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	j.Status.StartTime = &now
	j.Status.FailedIndexes = ptr.To("0")
	j.Status.Failed = 4
	j.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "MaxFailedIndexesExceeded", LastTransitionTime: now, LastProbeTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "MaxFailedIndexesExceeded", LastTransitionTime: now, LastProbeTime: now},
	}
	if err := k8sClient.Status().Update(context.Background(), &j); err != nil {
		t.Fatal(err)
	}
	failed := waitPhase(t, ns, "oom", v1alpha1.PhaseFailed, 10*time.Second)
	if failed.Status.Reason != "OOMKilled" || !strings.Contains(failed.Status.Message, "m/0 (d samples 0-3): pod "+job.Name+"-0-oom (shard m/0) container runner was OOMKilled (exit code 137, memory limit 8Mi) (attempt 4)") {
		t.Errorf("reason %q message %q", failed.Status.Reason, failed.Status.Message)
	}
}

// TestQuotaOnConfigMapsShows: a ResourceQuota that leaves no room for the
// run's ConfigMaps stops it before anything runs; the status says so at once
// (reason FailedCreate, naming the object and the quota, Degraded, Stalled,
// an event), where the manager's log alone used to, for minutes; the run
// fails after spec.runner.stallTimeout, and goes on once the quota allows it.
func TestQuotaOnConfigMapsShows(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	// No kube-controller-manager here: the quota's use is set by hand, as its
	// quota controller would.
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-quota"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("0")}}}
	create(t, q)
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{"count/configmaps": resource.MustParse("0")}}
	if err := k8sClient.Status().Update(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	startManager(t, ns)
	startKubelet(t, ns)
	ev := testutil.MakeEvaluation("boxed", ns).InlineDataset("d", 4).OpenAIModel("m", url).Scorer(v1alpha1.ScorerExactMatch).Obj()
	ev.Spec.Runner = &v1alpha1.Runner{StallTimeout: &v1alpha1.Timeout{Duration: 20 * time.Second}}
	create(t, ev)
	got, took := waitReason(t, ns, "boxed", v1alpha1.ReasonFailedCreate, 20*time.Second)
	t.Logf("the refusal showed in %v: %s", took, got.Status.Message)
	if !strings.Contains(got.Status.Message, "exceeded quota: cm-quota") || got.Status.Phase != v1alpha1.PhasePending {
		t.Errorf("phase %s, message %q: want Pending naming the quota", got.Status.Phase, got.Status.Message)
	}
	for _, c := range []string{v1alpha1.ConditionDegraded, v1alpha1.ConditionStalled} {
		if cond := findCondition(got, c); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonFailedCreate {
			t.Errorf("condition %s = %+v", c, cond)
		}
	}
	// Events follow the status write.
	eventually(t, 10*time.Second, "a FailedCreate event", func() (bool, string) {
		got := eventReasons(t, ns, "boxed")
		return slices.Contains(got, v1alpha1.ReasonFailedCreate), fmt.Sprint(got)
	})
	waitPhase(t, ns, "boxed", v1alpha1.PhaseFailed, 60*time.Second)
}
