package controllers

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// Labels and annotations the Job controller puts on the pods of an Indexed Job.
const (
	annotationCompletionIndex = batchv1.JobCompletionIndexAnnotation
	annotationIndexFailures   = "batch.kubernetes.io/job-index-failure-count"
	// eventRegardingUID indexes Events by the UID of the object they are about.
	eventRegardingUID = "involvedObject.uid"
	// reasonFailedCreate is the Job controller's event when it cannot create a pod.
	reasonFailedCreate = "FailedCreate"
	// maxDetail bounds what a pod's own words (a termination message, a kubelet
	// message) add to status and events.
	maxDetail = 400
)

// problem is something wrong with a runner pod, or with creating one.
type problem struct {
	reason  string
	message string // names the pod (or Job), the container and what is wrong
	// stall: the pod cannot start, and nothing will change that but a fix
	// (a missing Secret key, an image that cannot be pulled, no node that fits,
	// pods refused at admission). It ends the run after spec.runner.stallTimeout.
	stall bool
	// fatal: no wait can help (a service that did not become ready within
	// its probe's budget): it ends the run at once.
	fatal bool
	// waitsForRoom: a stall that a busy cluster may end without a fix (no
	// node has room now, or the namespace's ResourceQuota is used up: other
	// pods ending or a node added make some). The run is not Stalled for it
	// while stallTimeout runs (kstatus InProgress, as a Deployment's
	// unschedulable pods are until its progress deadline): a GitOps gate
	// waiting for Ready or Stalled must not fail on a busy cluster.
	waitsForRoom bool
}

// podView is what the controller knows of a shard's pods: its newest one.
type podView struct {
	pod *corev1.Pod
	// running or pending: the newest pod, if it is not being deleted.
	running, pending bool
	problem          *problem
}

// indexPods returns the newest pod of each index of a Job's pods.
func indexPods(pods []corev1.Pod) map[int]*corev1.Pod {
	out := map[int]*corev1.Pod{}
	for i := range pods {
		pod := &pods[i]
		idx, err := strconv.Atoi(pod.Annotations[annotationCompletionIndex])
		if err != nil {
			continue
		}
		if cur := out[idx]; cur == nil || newer(pod, cur) {
			out[idx] = pod
		}
	}
	return out
}

func newer(a, b *corev1.Pod) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return a.Name > b.Name
}

// listJobPods lists the pods of the given Jobs (from the manager's cache of
// Proctor's pods), by Job name.
func (r *EvaluationReconciler) listJobPods(ctx context.Context, ns string, jobs []*batchv1.Job) (map[string][]corev1.Pod, error) {
	out := map[string][]corev1.Pod{}
	if len(jobs) == 0 {
		return out, nil
	}
	byName := map[string]*batchv1.Job{}
	for _, j := range jobs {
		byName[j.Name] = j
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{cluster.LabelManagedBy: cluster.ManagedBy}); err != nil {
		return nil, fmt.Errorf("listing runner pods: %w", err)
	}
	for _, pod := range pods.Items {
		ref := metav1.GetControllerOf(&pod)
		if ref == nil || ref.Kind != "Job" {
			continue
		}
		// By name and UID: a Job deleted and made again may leave pods behind.
		if j := byName[ref.Name]; j != nil && ref.UID == j.UID {
			out[j.Name] = append(out[j.Name], pod)
		}
	}
	return out, nil
}

// viewPod classifies a shard's newest pod.
func viewPod(pod *corev1.Pod, shard string, attempts int32) podView {
	v := podView{pod: pod}
	if pod.DeletionTimestamp != nil {
		return v // going away: the Job replaces it, or the Evaluation stops
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		v.running = true
	case corev1.PodPending, "":
		v.pending = true
		v.problem = pendingProblem(pod, shard)
	case corev1.PodFailed:
		v.problem = failedProblem(pod, shard, attempts)
	}
	return v
}

// disrupted reports whether a pod was stopped by a disruption (a preemption,
// an eviction through the API, its node lost): not its shard's failure.
func disrupted(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// pendingProblem says why a pending pod cannot start, if it cannot.
func pendingProblem(pod *corev1.Pod, shard string) *problem {
	if p := serviceProblem(pod, shard); p != nil {
		return p
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			w := cs.State.Waiting
			if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" {
				continue
			}
			reason := w.Reason
			switch reason {
			case "ErrImagePull", "ImagePullBackOff":
				reason = "ImagePullBackOff" // the kubelet alternates between the two
			}
			msg := fmt.Sprintf("pod %s (shard %s) container %s: %s", pod.Name, shard, cs.Name, w.Reason)
			if d := detail(w.Message); d != "" {
				msg += ": " + d
			}
			if cs.Image != "" && (reason == "ImagePullBackOff" || reason == "InvalidImageName" || reason == "ErrImageNeverPull") && !strings.Contains(msg, cs.Image) {
				msg += fmt.Sprintf(" (image %s)", cs.Image)
			}
			return &problem{reason: conditionReason(reason, "ContainerWaiting"), message: msg, stall: true}
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			msg := fmt.Sprintf("pod %s (shard %s) cannot be scheduled", pod.Name, shard)
			if d := detail(c.Message); d != "" {
				msg += ": " + d
			}
			if req := requests(pod); req != "" {
				msg += " (it requests " + req + ")"
			}
			return &problem{reason: "Unschedulable", message: msg, stall: true, waitsForRoom: true}
		}
	}
	return nil
}

// failedProblem says why a pod failed. attempts counts the pods its index ran.
func failedProblem(pod *corev1.Pod, shard string, attempts int32) *problem {
	var p problem
	var disruption *corev1.PodCondition
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			disruption = &pod.Status.Conditions[i]
		}
	}
	switch {
	case disruption != nil && pod.Status.Reason == "":
		// Preempted, evicted through the API, its node lost: not the shard's
		// fault, and not counted against its retries.
		p.reason = conditionReason(disruption.Reason, "Disrupted")
		p.message = fmt.Sprintf("pod %s (shard %s) was stopped (%s)", pod.Name, shard, orDefault(disruption.Reason, "disrupted"))
		if d := detail(disruption.Message); d != "" {
			p.message += ": " + d
		}
		p.message += "; the shard runs again"
	case pod.Status.Reason != "":
		// Evicted, DeadlineExceeded, a node's admission refusing it...
		p.reason = conditionReason(pod.Status.Reason, "PodFailed")
		p.message = fmt.Sprintf("pod %s (shard %s) %s", pod.Name, shard, pod.Status.Reason)
		if d := detail(pod.Status.Message); d != "" {
			p.message += ": " + d
		}
	default:
		cs, t := terminated(pod)
		if t == nil {
			p.reason = "PodFailed"
			p.message = fmt.Sprintf("pod %s (shard %s) failed", pod.Name, shard)
			if d := detail(pod.Status.Message); d != "" {
				p.message += ": " + d
			}
			break
		}
		switch {
		case t.Reason == "OOMKilled":
			p.reason = "OOMKilled"
			p.message = fmt.Sprintf("pod %s (shard %s) container %s was OOMKilled (exit code %d", pod.Name, shard, cs, t.ExitCode)
			if lim := memoryLimit(pod, cs); lim != "" {
				p.message += ", memory limit " + lim
			}
			p.message += ")"
		case t.ExitCode == cluster.ExitInvalid && cs == runnerName:
			p.reason = "ConfigurationError"
			p.message = fmt.Sprintf("pod %s (shard %s) stopped on a configuration error (exit code %d), which no retry can fix", pod.Name, shard, t.ExitCode)
		case t.ExitCode == cluster.ExitRetriesUsed && cs == runnerName:
			p.reason = v1alpha1.ReasonShardsFailed
			p.message = fmt.Sprintf("pod %s (shard %s) found the shard's retries used up (exit code %d)", pod.Name, shard, t.ExitCode)
		case t.ExitCode == cluster.ExitHookFailed && cs == runnerName:
			p.reason = v1alpha1.ReasonHookFailed
			p.message = fmt.Sprintf("pod %s (shard %s) stopped on a hook that failed (exit code %d)", pod.Name, shard, t.ExitCode)
		default:
			p.reason = conditionReason(t.Reason, "RunnerFailed")
			if t.Reason == "Error" || t.Reason == "" {
				p.reason = "RunnerFailed"
			}
			p.message = fmt.Sprintf("pod %s (shard %s) container %s failed (%s, exit code %d", pod.Name, shard, cs, orDefault(t.Reason, "Error"), t.ExitCode)
			if t.Signal != 0 {
				p.message += fmt.Sprintf(", signal %d", t.Signal)
			}
			p.message += ")"
			if lower := strings.ToLower(t.Message); t.ExitCode == 137 || strings.Contains(lower, "oom") || strings.Contains(lower, "out of memory") {
				if lim := memoryLimit(pod, cs); lim != "" {
					p.message += " with memory limit " + lim
				}
			}
		}
		if d := detail(t.Message); d != "" {
			p.message += ": " + d
		}
	}
	if attempts > 0 {
		p.message += fmt.Sprintf(" (attempt %d)", attempts)
	}
	return &p
}

// terminated returns the container whose failure failed the pod: a failed init
// container; else a sidecar (the agent's container) that was OOMKilled, which
// took the agents with it and so failed the runner; else the runner.
func terminated(pod *corev1.Pod) (string, *corev1.ContainerStateTerminated) {
	sidecars := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
		}
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && !sidecars[cs.Name] {
			return cs.Name, t
		}
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if !sidecars[cs.Name] {
			continue
		}
		// The kubelet restarts a sidecar that died: its death is in its last
		// state, unless the pod ended first.
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.Reason == "OOMKilled" {
				return cs.Name, t
			}
		}
	}
	var first *corev1.ContainerStatus
	for i, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && (t.ExitCode != 0 || t.Reason == "OOMKilled") {
			if cs.Name == runnerName {
				return cs.Name, t
			}
			if first == nil {
				first = &pod.Status.ContainerStatuses[i]
			}
		}
	}
	if first != nil {
		return first.Name, first.State.Terminated
	}
	return "", nil
}

func memoryLimit(pod *corev1.Pod, container string) string {
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		if c.Name == container {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
				return q.String()
			}
		}
	}
	return ""
}

// requests describes what the pod's containers that run together (the runner,
// and the agent's container beside it) ask for, for Unschedulable.
func requests(pod *corev1.Pod) string {
	total := corev1.ResourceList{}
	add := func(c corev1.Container) {
		for name, q := range c.Resources.Requests {
			sum := total[name]
			sum.Add(q)
			total[name] = sum
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	var parts []string
	for name, q := range total {
		parts = append(parts, fmt.Sprintf("%s %s", name, q.String()))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// conditionReason makes s a valid condition reason, else returns def.
func conditionReason(s, def string) string {
	if len(s) <= 1024 && reasonPattern.MatchString(s) {
		return s
	}
	return def
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// detail shortens what a pod or the kubelet says to its last non-empty line
// (a termination message may be the tail of a log), at most maxDetail bytes.
func detail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	line := ""
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			line = l
			break
		}
	}
	line = strings.Join(strings.Fields(line), " ")
	// The words may be an agent's or a model server's: no terminal escapes, no
	// reordering of what kubectl describe shows.
	line = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError || unicode.Is(unicode.Bidi_Control, r) {
			return '?'
		}
		return r
	}, line)
	if len(line) > maxDetail {
		cut := maxDetail
		for cut > 0 && !utf8Start(line[cut]) {
			cut--
		}
		line = line[:cut] + "..."
	}
	return line
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// failedCreate returns the Job controller's complaint that it cannot create a
// Job's pods, if it complained since the newest of them was created: a
// ResourceQuota or Pod Security refusing them, typically. The Job shows it only
// as an event.
func (r *EvaluationReconciler) failedCreate(ctx context.Context, job *batchv1.Job, pods []corev1.Pod) (*problem, error) {
	if jobFinished(job, batchv1.JobComplete) || jobFinished(job, batchv1.JobFailed) || ptr.Deref(job.Spec.Suspend, false) {
		return nil, nil
	}
	var events corev1.EventList
	if err := r.List(ctx, &events, client.InNamespace(job.Namespace), client.MatchingFields{eventRegardingUID: string(job.UID)}); err != nil {
		return nil, fmt.Errorf("listing the events of Job %s: %w", job.Name, err)
	}
	var newestPod time.Time
	for i := range pods {
		if t := pods[i].CreationTimestamp.Time; t.After(newestPod) {
			newestPod = t
		}
	}
	var last *corev1.Event
	var lastAt time.Time
	for i := range events.Items {
		e := &events.Items[i]
		if e.Reason != reasonFailedCreate {
			continue
		}
		if at := eventTime(e); last == nil || at.After(lastAt) {
			last, lastAt = e, at
		}
	}
	if last == nil || !lastAt.After(newestPod) {
		return nil, nil
	}
	msg := fmt.Sprintf("Job %s cannot create pods", job.Name)
	if d := detail(strings.TrimPrefix(last.Message, "Error creating: ")); d != "" {
		msg += ": " + d
	}
	return &problem{reason: reasonFailedCreate, message: msg, stall: true, waitsForRoom: quotaFreesUp(last.Message)}, nil
}

// quotaFreesUp reports whether a pod a ResourceQuota refused fits in it once
// other pods of the namespace end (the Job controller then creates it): the
// quota's limit holds what the pod requests, only not beside what is in use.
// The quota admission's words are "exceeded quota: NAME, requested: R, used:
// U, limited: L", each list "resource=quantity,...". A pod larger than the
// limit, a quota demanding limits the pod lacks ("failed quota"), or words
// not understood need a fix. A quota whose usage its controller has not
// counted yet ("status unknown for quota", right after it is made) waits too.
func quotaFreesUp(message string) bool {
	if strings.Contains(message, "status unknown for quota: ") {
		return true
	}
	_, rest, ok := strings.Cut(message, "exceeded quota: ")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, ", requested: ")
	if !ok {
		return false
	}
	requested, rest, ok := strings.Cut(rest, ", used: ")
	if !ok {
		return false
	}
	_, limited, ok := strings.Cut(rest, ", limited: ")
	if !ok {
		return false
	}
	want, limit := quantities(requested), quantities(limited)
	if len(want) == 0 {
		return false
	}
	for name, q := range want {
		l, ok := limit[name]
		if !ok || q.Cmp(l) > 0 {
			return false
		}
	}
	return true
}

// quantities parses "name=quantity,..." (nil if any part is not that).
func quantities(list string) map[string]resource.Quantity {
	out := map[string]resource.Quantity{}
	for item := range strings.SplitSeq(strings.TrimSpace(list), ",") {
		name, value, ok := strings.Cut(item, "=")
		q, err := resource.ParseQuantity(value)
		if !ok || err != nil {
			return nil
		}
		out[name] = q
	}
	return out
}

// eventTime is when an event (of either events API) was last seen.
func eventTime(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, c := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time, e.EventTime.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}
