package controllers

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/spend"
)

// DefaultStallTimeout is spec.runner.stallTimeout's default.
const DefaultStallTimeout = v1alpha1.DefaultStallTimeout

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
			return &problem{reason: "Unschedulable", message: msg, stall: true}
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
	return &problem{reason: reasonFailedCreate, message: msg, stall: true}, nil
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

// eventRegarding indexes events by their object's UID.
func eventRegarding(obj client.Object) []string {
	e, ok := obj.(*corev1.Event)
	if !ok || e.InvolvedObject.UID == "" {
		return nil
	}
	return []string{string(e.InvolvedObject.UID)}
}

// stallTimeout is spec.runner.stallTimeout, defaulted.
func stallTimeout(spec *v1alpha1.EvaluationSpec) time.Duration {
	if spec.Runner != nil && spec.Runner.StallTimeout != nil && spec.Runner.StallTimeout.Duration > 0 {
		return spec.Runner.StallTimeout.Duration
	}
	return DefaultStallTimeout
}

// judgeHealth turns the problems the pass found into the Degraded state: the
// first problem names the reason (stalls first: they are what blocks the run),
// and a stall while no shard runs ends the run once it has lasted
// spec.runner.stallTimeout (counted from when the run became Degraded, which
// status keeps across restarts of the manager).
func (r *EvaluationReconciler) judgeHealth(p *pass) {
	p.healthObserved = true
	if len(p.problems) == 0 {
		return
	}
	first := p.problems[0]
	for _, pr := range p.problems {
		if pr.fatal {
			p.stalled = &pr
			first = pr
			break
		}
	}
	for _, pr := range p.problems {
		if pr.stall && !first.fatal {
			first = pr
			break
		}
	}
	d := first
	if n := len(p.problems) - 1; n > 0 {
		d.message += fmt.Sprintf(" (and %d more pod problem(s))", n)
	}
	if first.stall && !p.anyRunning {
		timeout := stallTimeout(&p.ev.Spec)
		since := p.now
		if c := meta.FindStatusCondition(p.ev.Status.Conditions, v1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue && p.ev.Status.Run == p.run {
			since = c.LastTransitionTime.Time
		}
		deadline := since.Add(timeout)
		if !p.now.Before(deadline) {
			p.stalled = &problem{reason: first.reason, stall: true,
				message: fmt.Sprintf("%s; no runner pod could start for %s (spec.runner.stallTimeout)", first.message, timeout)}
		} else {
			d.message += fmt.Sprintf("; the run fails at %s unless a runner pod starts (spec.runner.stallTimeout %s)",
				deadline.UTC().Format(time.RFC3339), timeout)
			p.requeueAfter(deadline.Sub(p.now))
		}
	}
	p.degraded = &d
}

// livePlanError reads the plan ConfigMap from the API server and returns the
// error the planner wrote into it, if any.
func (r *EvaluationReconciler) livePlanError(ctx context.Context, p *pass) (string, error) {
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.ev.Namespace, Name: cluster.PlanName(p.ev.Name, p.run)}, cm)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the plan ConfigMap: %w", err)
	}
	_, failed, _ := cluster.ParsePlan(cm.Annotations)
	return failed, nil
}

// observePlanner looks at the planner Job's pod: a failed Job fails the run,
// naming why its pod failed; a pod that cannot start makes the run Degraded,
// and fails it after spec.runner.stallTimeout. It reports whether the run ended.
func (r *EvaluationReconciler) observePlanner(ctx context.Context, p *pass, job *batchv1.Job) (bool, error) {
	podsByJob, err := r.listJobPods(ctx, job.Namespace, []*batchv1.Job{job})
	if err != nil {
		return false, err
	}
	pods := podsByJob[job.Name]
	var newest *corev1.Pod
	for i := range pods {
		if newest == nil || newer(&pods[i], newest) {
			newest = &pods[i]
		}
	}
	var view podView
	if newest != nil {
		view = viewPod(newest, "planner", 0)
		p.anyRunning = view.running
	}
	if jobFinished(job, batchv1.JobFailed) {
		// The planner says why it failed in the plan ConfigMap, which the cache
		// may not hold yet when it holds the Job's end: read it live.
		failed, err := r.livePlanError(ctx, p)
		switch {
		case err != nil:
			return false, err
		case failed != "":
			p.fail(v1alpha1.ReasonPlanningFailed, "planning failed: %s", failed)
		case view.problem != nil:
			p.fail(v1alpha1.ReasonPlanningFailed, "the planner Job %s failed: %s", job.Name, view.problem.message)
		default:
			p.fail(v1alpha1.ReasonPlanningFailed, "the planner Job %s failed; see its pod's log", job.Name)
		}
		return true, nil
	}
	if view.problem != nil {
		p.problems = append(p.problems, *view.problem)
	}
	fc, err := r.failedCreate(ctx, job, pods)
	if err != nil {
		return false, err
	}
	if fc != nil {
		p.problems = append(p.problems, *fc)
	}
	r.judgeHealth(p)
	if p.stalled != nil {
		p.fail(p.stalled.reason, "%s", p.stalled.message)
		return true, nil
	}
	return false, nil
}

// keepEnded keeps a run that ended as it ended: its status is not derived
// again, none of its Jobs is created or resumed, and those still running (a
// run that stalled) are suspended, so that their pods go away. Only a spec edit
// that starts a new run starts anything again.
func (r *EvaluationReconciler) keepEnded(ctx context.Context, p *pass) (bool, error) {
	st := &p.ev.Status
	if st.Run != p.run || (st.Phase != v1alpha1.PhaseSucceeded && st.Phase != v1alpha1.PhaseFailed) {
		return true, nil
	}
	if regate(p.ev) {
		// spec.baseline or spec.gate changed since the run was judged: the
		// pass goes on to Finish, which compares and gates its records again.
		return true, nil
	}
	if st.Phase == v1alpha1.PhaseSucceeded {
		p.finished = true
	} else {
		reason := v1alpha1.ReasonFailed
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFailed); c != nil && c.Reason != "" {
			reason = c.Reason
		}
		if reason == v1alpha1.ReasonBudgetExceeded && budgetRaised(p.ev) {
			// The run goes on: its Jobs are resumed, and its shards get
			// allowances of what the budget now leaves.
			p.event(corev1.EventTypeNormal, v1alpha1.ReasonResumed, "spec.budget was raised: the run resumes")
			return true, nil
		}
		p.fail(reason, "%s", st.Message)
	}
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(p.ev.Namespace), client.MatchingLabels{
		cluster.LabelEvaluation: cluster.LabelValue(p.ev.Name), cluster.LabelRun: p.run,
	}); err != nil {
		return false, err
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if cluster.Owned("Job", j, p.ev) != nil {
			continue
		}
		if jobFinished(j, batchv1.JobComplete) || jobFinished(j, batchv1.JobFailed) || ptr.Deref(j.Spec.Suspend, false) || j.DeletionTimestamp != nil {
			continue
		}
		patch := client.MergeFrom(j.DeepCopy())
		j.Spec.Suspend = ptr.To(true)
		if err := r.Patch(ctx, j, patch); err != nil {
			return false, fmt.Errorf("stopping Job %s of the ended run: %w", j.Name, err)
		}
	}
	return false, nil
}

// regate reports whether an ended run is to be compared and gated again: it
// succeeded, missed its gate or lost its baseline, and spec.baseline or
// spec.gate is not what it was judged with.
func regate(ev *v1alpha1.Evaluation) bool {
	st := &ev.Status
	if st.Gated == cluster.GateHash(&ev.Spec) {
		return false
	}
	return st.Phase == v1alpha1.PhaseSucceeded || st.Reason == v1alpha1.ReasonRegressionDetected || st.Reason == v1alpha1.ReasonBaselineNotFound
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

// budgetRaised reports whether spec.budget now allows more than it did when
// it stopped the run (status.spend holds the limits it had then), in a
// dimension that stopped it.
func budgetRaised(ev *v1alpha1.Evaluation) bool {
	was := ev.Status.Spend
	if was == nil {
		return false
	}
	now, err := cluster.SpendLimit(ev.Spec.Budget)
	if err != nil {
		return false
	}
	if was.MaxCost != "" {
		old, err := spend.ParseDollars(was.MaxCost)
		if err == nil && (now.Cost == 0 || now.Cost > old) {
			return true
		}
	}
	return was.MaxTokens > 0 && (now.Tokens == 0 || now.Tokens > was.MaxTokens)
}
