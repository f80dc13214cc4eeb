package controllers

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
)

// TestTrimPodKeepsWhatHealthReads: the manager caches runner pods trimmed
// (TrimPod); every judgement of a pod is the same on the trimmed copy.
func TestTrimPodKeepsWhatHealthReads(t *testing.T) {
	limits := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Mi")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("1000Gi")},
	}
	base := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: testNS, Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{annotationCompletionIndex: "0"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "install-proctor", Image: "proctor", Command: []string{"/proctor", "install", "..."}},
				{Name: "agent", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: limits}},
			Containers: []corev1.Container{{Name: runnerName, Image: "proctor", Resources: limits,
				Env: []corev1.EnvVar{{Name: "X", Value: strings.Repeat("v", 1000)}}}},
			Volumes: []corev1.Volume{{Name: "work"}},
		},
	}
	statuses := map[string]corev1.PodStatus{
		"oom": {Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: runnerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}},
		"unschedulable": {Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient memory."}}},
		"secret key": waitingPod("CreateContainerConfigError", "couldn't find key nope in Secret ns/openai"),
		"exit 2": {Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: runnerName,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Message: "spec.models[0]: bad"}}}}},
		"running": podRunning,
		// The sidecar is recognised by its restart policy.
		"agent OOMKilled": {Phase: corev1.PodFailed,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "agent", LastTerminationState: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: runnerName,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "agent executor gone"}}}}},
		"agent stopped": {Phase: corev1.PodFailed,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 143}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: runnerName,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "boom"}}}}},
	}
	for name, status := range statuses {
		pod := base.DeepCopy()
		pod.Status = status
		want := viewPod(pod.DeepCopy(), "small/0", 1)
		got, err := TrimPod(pod.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		trimmed := got.(*corev1.Pod)
		if diff := cmp.Diff(want, viewPod(trimmed, "small/0", 1), cmp.AllowUnexported(podView{}, problem{}), cmpopts.IgnoreFields(podView{}, "pod")); diff != "" {
			t.Errorf("%s: the trimmed pod is judged otherwise (-whole +trimmed):\n%s", name, diff)
		}
		if len(trimmed.Spec.Containers[0].Env) != 0 || len(trimmed.Spec.Volumes) != 0 || trimmed.ManagedFields != nil {
			t.Errorf("%s: TrimPod kept the environment, volumes or managed fields", name)
		}
	}
}

// TestPodJudgementChanged: pod updates reconcile only when they may change
// what the controller makes of the pod.
func TestPodJudgementChanged(t *testing.T) {
	base := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"a": "1"}}, Status: podCreating}
	cases := []struct {
		name string
		edit func(*corev1.Pod)
		want bool
	}{
		{"nothing", func(*corev1.Pod) {}, false},
		{"an IP and a start time", func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.9"; p.Status.StartTime = &metav1.Time{} }, false},
		{"running", func(p *corev1.Pod) { p.Status = podRunning }, true},
		{"a waiting reason", func(p *corev1.Pod) {
			p.Status = waitingPod("CreateContainerConfigError", "couldn't find key nope in Secret ns/openai")
		}, true},
		{"unschedulable", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		}, true},
		{"an annotation", func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "2"} }, true},
		{"being deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }, true},
	}
	for _, tc := range cases {
		cur := base.DeepCopy()
		tc.edit(cur)
		if got := podJudgementChanged.Update(ctrlevent.UpdateEvent{ObjectOld: base, ObjectNew: cur}); got != tc.want {
			t.Errorf("%s: reconcile = %v, want %v", tc.name, got, tc.want)
		}
	}
}
