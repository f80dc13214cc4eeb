package controllers

import (
	"context"
	"fmt"
	"maps"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// eventRegarding indexes events by their object's UID.
func eventRegarding(obj client.Object) []string {
	e, ok := obj.(*corev1.Event)
	if !ok || e.InvolvedObject.UID == "" {
		return nil
	}
	return []string{string(e.InvolvedObject.UID)}
}

// evaluationOfJobChild maps a runner pod to the Evaluation that owns its Job.
func (r *EvaluationReconciler) evaluationOfJobChild(ctx context.Context, obj client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "Job" {
		return nil
	}
	return r.evaluationOfJob(ctx, obj.GetNamespace(), ref.Name)
}

// evaluationOfJobEvent maps a Job's event to the Evaluation that owns the Job.
func (r *EvaluationReconciler) evaluationOfJobEvent(ctx context.Context, obj client.Object) []reconcile.Request {
	e, ok := obj.(*corev1.Event)
	if !ok || e.InvolvedObject.Kind != "Job" {
		return nil
	}
	return r.evaluationOfJob(ctx, e.InvolvedObject.Namespace, e.InvolvedObject.Name)
}

func (r *EvaluationReconciler) evaluationOfJob(ctx context.Context, ns, name string) []reconcile.Request {
	var job batchv1.Job
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job); err != nil {
		return nil // not one of Proctor's (the cache holds only those), or gone
	}
	ref := metav1.GetControllerOf(&job)
	if ref == nil || ref.Kind != "Evaluation" || ref.APIVersion != v1alpha1.GroupVersion.String() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: ref.Name}}}
}

// TrimPod keeps of a runner pod what the controller reads (its identity,
// labels, annotations and owner, its containers' names, resources, restart
// policies (which tell a sidecar) and startup probes (a service's budget), and
// its status), for the manager's cache: a pod's spec (environment, volumes, the
// agent's init container's command) is most of its size, and a cluster may hold
// thousands of runner pods. It is a cache transform: obj is changed in place.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	trim := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy, StartupProbe: c.StartupProbe}
		}
		return out
	}
	pod.Spec = corev1.PodSpec{InitContainers: trim(pod.Spec.InitContainers), Containers: trim(pod.Spec.Containers)}
	return pod, nil
}

// podJudgement is what the controller reads of a pod's status: a change to
// anything else (a probe's time, an IP, a restart count) needs no reconcile.
func podJudgement(pod *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|%t", pod.Status.Phase, pod.Status.Reason, pod.Status.Message, pod.DeletionTimestamp != nil)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled || c.Type == corev1.DisruptionTarget {
			fmt.Fprintf(&b, "|%s=%s:%s:%s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			fmt.Fprintf(&b, "|%s:", cs.Name)
			switch s := cs.State; {
			case s.Waiting != nil:
				fmt.Fprintf(&b, "w:%s:%s", s.Waiting.Reason, s.Waiting.Message)
			case s.Terminated != nil:
				fmt.Fprintf(&b, "t:%s:%d:%s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
			case s.Running != nil:
				b.WriteString("r")
			}
		}
	}
	return b.String()
}

// podJudgementChanged passes pod updates that may change how the controller
// judges the pod, so that a cluster's many pod updates do not each cost a
// reconcile.
var podJudgementChanged = predicate.Funcs{UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*corev1.Pod)
	cur, okNew := e.ObjectNew.(*corev1.Pod)
	if !okOld || !okNew {
		return true
	}
	return podJudgement(old) != podJudgement(cur) || !maps.Equal(old.Annotations, cur.Annotations)
}}
