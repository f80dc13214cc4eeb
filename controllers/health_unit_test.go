package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// setJobUID gives a Job the UID the API server would have (the fake client
// gives none), so that events can name it.
func (h *harness) setJobUID(name string, uid types.UID) *batchv1.Job {
	h.t.Helper()
	j := &batchv1.Job{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: name}, j); err != nil {
		h.t.Fatal(err)
	}
	j.UID = uid
	if err := h.c.Update(h.ctx, j); err != nil {
		h.t.Fatal(err)
	}
	return j
}

// failedCreateEvent is the Job controller's event when admission refuses a pod.
func failedCreateEvent(job *batchv1.Job, at time.Time, message string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: testNS, Name: job.Name + ".fc", CreationTimestamp: metav1.NewTime(at)},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: testNS, Name: job.Name, UID: job.UID},
		Reason:         "FailedCreate", Type: corev1.EventTypeWarning, Message: message,
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
	}
}

// withAgentContainer gives a pod the init containers of an agent pod: proctor's
// installer and the agent's container, a sidecar.
func withAgentContainer(p *corev1.Pod) {
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "install-proctor"}, corev1.Container{
		Name: "agent", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}},
	})
}

func condition(st v1alpha1.EvaluationStatus, t string) *metav1.Condition {
	return meta.FindStatusCondition(st.Conditions, t)
}

// Every reason a runner pod can be stuck or fail for shows in status at once:
// status.reason (kubectl get's REASON), status.message naming the pod, the
// container and the object at fault, the Degraded condition, Progressing false
// while nothing runs, shard counts that match the pods, and a Warning event
// after the status write.
func TestPodProblemsAreVisible(t *testing.T) {
	unschedulable := unschedulablePod("0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
	evicted := corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: ephemeral-storage."}
	preempted := failedPod("Error", 143, "")
	preempted.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler", Message: "Preempted by a higher priority pod"}}
	deadline := corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"}
	initPull := corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{
		Name: "install-proctor", Image: "registry.example/proctor:nope",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: `failed to pull and unpack image "registry.example/proctor:nope": not found`}},
	}}}
	// An agent pod: proctor installed, the agent's container (a sidecar) next.
	installed := corev1.ContainerStatus{Name: "install-proctor", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}
	agentWaiting := func(reason, message string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{installed, {
			Name: "agent", Image: "registry.example/agent:1", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
		}}}
	}
	// The agent's container died and was restarted; the runner's agents went
	// with it, and it failed; the kubelet stopped the agent's container then.
	agentEnded := func(last *corev1.ContainerStateTerminated, stopped int32) corev1.PodStatus {
		st := failedPod("Error", 1, "provider unavailable: agent executor at /run/proctor/agent.sock: connection reset by peer\n")
		st.InitContainerStatuses = []corev1.ContainerStatus{installed, {
			Name: "agent", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", ExitCode: stopped}},
			LastTerminationState: corev1.ContainerState{Terminated: last},
		}}
		if stopped != 0 {
			st.InitContainerStatuses[1].State.Terminated.Reason = "Error"
		}
		return st
	}
	agentOOM := agentEnded(&corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}, 0)
	agentStopped := agentEnded(nil, 143)
	cases := []struct {
		name    string
		pod     *corev1.PodStatus // nil: no pod, a FailedCreate event
		refusal string            // that event's message, if not a quota demanding limits
		edit    func(*corev1.Pod)
		reason  string
		message []string
		stall   bool
		// room: the stall waits for room on a node or in the namespace's
		// quota (not Stalled, kstatus InProgress, while stallTimeout runs).
		room    bool
		pending int32
	}{
		{
			name: "a Secret without the key", pod: ptr.To(waitingPod("CreateContainerConfigError", "couldn't find key nope in Secret ns/openai")),
			reason: "CreateContainerConfigError", stall: true, pending: 1,
			message: []string{"pod arith-small-RUN-0-a (shard small/0) container runner: CreateContainerConfigError: couldn't find key nope in Secret ns/openai"},
		},
		{
			name: "an image that cannot be pulled", pod: ptr.To(waitingPod("ErrImagePull", "failed to pull and unpack image \"registry.example/runner:1\": not found")),
			reason: "ImagePullBackOff", stall: true, pending: 1,
			message: []string{"pod arith-small-RUN-0-a", "container runner: ErrImagePull", "registry.example/runner:1", "not found"},
		},
		{
			name: "an agent image that cannot be pulled", pod: ptr.To(agentWaiting("ErrImagePull", "failed to pull and unpack image \"registry.example/agent:1\": not found")),
			edit:   withAgentContainer,
			reason: "ImagePullBackOff", stall: true, pending: 1,
			message: []string{"pod arith-small-RUN-0-a", "container agent: ErrImagePull", "registry.example/agent:1", "not found"},
		},
		{
			name: "agent image pull back-off", pod: ptr.To(agentWaiting("ImagePullBackOff", "Back-off pulling image \"registry.example/agent:1\"")),
			edit:   withAgentContainer,
			reason: "ImagePullBackOff", stall: true, pending: 1,
			message: []string{"container agent: ImagePullBackOff: Back-off pulling image \"registry.example/agent:1\""},
		},
		{
			name: "the runner image of the init container", pod: &initPull,
			reason: "ImagePullBackOff", stall: true, pending: 1,
			message: []string{"container install-proctor: ErrImagePull", "registry.example/proctor:nope"},
		},
		{
			name: "a container that cannot be created", pod: ptr.To(waitingPod("CreateContainerError", "failed to reserve container name")),
			reason: "CreateContainerError", stall: true, pending: 1,
			message: []string{"container runner: CreateContainerError: failed to reserve container name"},
		},
		{
			name: "no node can hold it", pod: &unschedulable, reason: "Unschedulable", stall: true, room: true, pending: 1,
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1000Gi")}
			},
			message: []string{"pod arith-small-RUN-0-a (shard small/0) cannot be scheduled: 0/1 nodes are available: 1 Insufficient memory", "it requests memory 1000Gi"},
		},
		{
			name: "pods refused at admission", reason: "FailedCreate", stall: true,
			message: []string{`Job arith-small-RUN cannot create pods: pods "arith-small-RUN-0-x" is forbidden: failed quota: q: must specify limits.memory for: runner`},
		},
		{
			// Other pods of the namespace use the quota; once they end, the
			// Job controller creates the pod.
			name: "pods over the namespace's quota until others end", reason: "FailedCreate", stall: true, room: true,
			refusal: `Error creating: pods "arith-small-RUN-0-x" is forbidden: exceeded quota: compute, requested: limits.memory=1Gi,requests.cpu=50m, used: limits.memory=1Gi,requests.cpu=50m, limited: limits.memory=1536Mi,requests.cpu=2`,
			message: []string{`Job arith-small-RUN cannot create pods: pods "arith-small-RUN-0-x" is forbidden: exceeded quota: compute, requested: limits.memory=1Gi`},
		},
		{
			// No pod ending makes room for it.
			name: "a pod larger than the namespace's quota", reason: "FailedCreate", stall: true,
			refusal: `Error creating: pods "arith-small-RUN-0-x" is forbidden: exceeded quota: small, requested: limits.memory=1Gi, used: limits.memory=0, limited: limits.memory=512Mi`,
			message: []string{`Job arith-small-RUN cannot create pods: pods "arith-small-RUN-0-x" is forbidden: exceeded quota: small, requested: limits.memory=1Gi`},
		},
		{
			name: "OOMKilled, retried", pod: ptr.To(failedPod("OOMKilled", 137, "")), reason: "OOMKilled",
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Mi")}
				p.Annotations["batch.kubernetes.io/job-index-failure-count"] = "1"
			},
			message: []string{"pod arith-small-RUN-0-a (shard small/0) container runner was OOMKilled (exit code 137, memory limit 8Mi) (attempt 2)"},
		},
		{
			name: "the agent's container OOMKilled", pod: &agentOOM, reason: "OOMKilled", edit: withAgentContainer,
			message: []string{"pod arith-small-RUN-0-a (shard small/0) container agent was OOMKilled (exit code 137, memory limit 2Gi) (attempt 1)"},
		},
		{
			// Its exit when the kubelet stopped it is not the failure.
			name: "the agent's container stopped after the runner failed", pod: &agentStopped, reason: "RunnerFailed", edit: withAgentContainer,
			message: []string{"container runner failed (Error, exit code 1): provider unavailable: agent executor at /run/proctor/agent.sock: connection reset by peer (attempt 1)"},
		},
		{
			name: "a runner error, with its termination message", pod: ptr.To(failedPod("Error", 1, "proctor: reading the plan: connection refused\n")), reason: "RunnerFailed",
			message: []string{"container runner failed (Error, exit code 1): proctor: reading the plan: connection refused (attempt 1)"},
		},
		{name: "preempted", pod: &preempted, reason: "PreemptionByScheduler",
			message: []string{"pod arith-small-RUN-0-a (shard small/0) was stopped (PreemptionByScheduler): Preempted by a higher priority pod; the shard runs again"}},
		{name: "evicted", pod: &evicted, reason: "Evicted", message: []string{"pod arith-small-RUN-0-a (shard small/0) Evicted: The node was low on resource: ephemeral-storage."}},
		{name: "past its deadline", pod: &deadline, reason: "DeadlineExceeded", message: []string{"DeadlineExceeded: Pod was active on the node longer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, ev, run := finishedRun(t)
			jobName := "arith-small-" + run
			if tc.pod != nil {
				edit := func(*corev1.Pod) {}
				if tc.edit != nil {
					edit = tc.edit
				}
				h.runnerPod(jobName, 0, "a", *tc.pod, edit)
			} else {
				job := h.setJobUID(jobName, "job-uid")
				refusal := `Error creating: pods "arith-small-RUN-0-x" is forbidden: failed quota: q: must specify limits.memory for: runner`
				if tc.refusal != "" {
					refusal = tc.refusal
				}
				h.create(failedCreateEvent(job, t0.Add(time.Second), strings.ReplaceAll(refusal, "RUN", run)))
			}
			h.clock.Step(2 * time.Second)
			writes := h.statusWrites()
			res := h.mustReconcile(ev)
			st := h.eval("arith").Status
			if h.statusWrites() != writes+1 {
				t.Errorf("status was not written at once")
			}
			if st.Phase != v1alpha1.PhaseRunning || st.Reason != tc.reason {
				t.Errorf("phase %q reason %q, want Running %q", st.Phase, st.Reason, tc.reason)
			}
			for _, m := range tc.message {
				m = strings.ReplaceAll(m, "RUN", run)
				if !strings.Contains(st.Message, m) {
					t.Errorf("status.message %q\ndoes not say %q", st.Message, m)
				}
			}
			c := condition(st, v1alpha1.ConditionDegraded)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != tc.reason || c.Message != st.Message || c.ObservedGeneration != 1 {
				t.Errorf("Degraded condition = %+v, want True %s with status.message", c, tc.reason)
			}
			// Nothing runs: Progressing says why instead of "shards are running".
			if c := condition(st, v1alpha1.ConditionProgressing); c == nil || c.Status != metav1.ConditionFalse || c.Reason != tc.reason {
				t.Errorf("Progressing = %+v, want False %s", c, tc.reason)
			}
			if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 2, Pending: tc.pending}, st.Shards); diff != "" {
				t.Errorf("shard counts (-want +got):\n%s", diff)
			}
			// What kstatus and kubectl wait read: nothing runs, so the run
			// is Stalled, unless its pods only wait for room, or its failed
			// pod is retried by the Job.
			checkStalled(t, st, tc.stall && !tc.room, tc.reason)
			if tc.stall {
				want := "; the run fails at " + t0.Add(2*time.Second+DefaultStallTimeout).Format(time.RFC3339) + " unless a runner pod starts (spec.runner.stallTimeout 5m0s)"
				if !strings.HasSuffix(st.Message, want) {
					t.Errorf("a stall's message %q does not end with its deadline %q", st.Message, want)
				}
				if res.RequeueAfter != DefaultStallTimeout {
					t.Errorf("RequeueAfter = %v, want the stall timeout", res.RequeueAfter)
				}
			} else if strings.Contains(st.Message, "stallTimeout") {
				t.Errorf("a failure that is retried has no stall deadline: %q", st.Message)
			}
			want := []recordedEvent{{Type: corev1.EventTypeWarning, Reason: tc.reason, Action: tc.reason, Note: st.Message}}
			if diff := cmp.Diff(want, h.rec.take()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"status update", "event " + tc.reason}, h.log.all()[len(h.log.all())-2:]); diff != "" {
				t.Errorf("the event does not follow the status write (-want +got):\n%s", diff)
			}
			// The same problem again: no write, no event.
			h.clock.Step(time.Second)
			h.mustReconcile(ev)
			if h.statusWrites() != writes+1 || len(h.rec.take()) != 0 {
				t.Errorf("an unchanged problem was written or announced again")
			}
		})
	}
}

// A stall (here a Secret without the key) that lasts spec.runner.stallTimeout
// while no shard runs ends the run Failed with the reason; its Jobs are then
// suspended, so no pod waits forever, and it stays Failed. Editing
// stallTimeout changes the deadline without starting a new run.
func TestStallEndsTheRun(t *testing.T) {
	h, ev, run := finishedRun(t)
	job := "arith-small-" + run
	pod := h.runnerPod(job, 0, "a", waitingPod("CreateContainerConfigError", "couldn't find key nope in Secret ns/openai"))
	h.runnerPod(job, 1, "b", podCreating)
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Reason != "CreateContainerConfigError" || st.Shards.Pending != 2 {
		t.Fatalf("reason %q shards %+v", st.Reason, st.Shards)
	}

	// A shorter stallTimeout: the same run, an earlier deadline.
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) {
		s.Runner = &v1alpha1.Runner{StallTimeout: &v1alpha1.Timeout{Duration: 30 * time.Second}}
	})
	if got := cluster.RunID(ev); got != run {
		t.Fatalf("editing stallTimeout changed the run: %s, was %s", got, run)
	}
	h.clock.Step(29 * time.Second)
	res := h.mustReconcile(ev)
	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhaseRunning || st.Run != run || res.RequeueAfter != time.Second {
		t.Fatalf("after 29s of 30s: phase %s run %s requeue %v (message %q)", st.Phase, st.Run, res.RequeueAfter, st.Message)
	}
	if !strings.Contains(st.Message, "the run fails at "+t0.Add(30*time.Second).Format(time.RFC3339)) {
		t.Errorf("message %q does not give the new deadline", st.Message)
	}
	h.rec.take()

	h.clock.Step(time.Second)
	h.mustReconcile(ev)
	st = h.eval("arith").Status
	wantMsg := "pod " + pod.Name + " (shard small/0) container runner: CreateContainerConfigError: couldn't find key nope in Secret ns/openai; " +
		"no runner pod could start for 30s (spec.runner.stallTimeout)"
	if st.Phase != v1alpha1.PhaseFailed || st.Reason != "CreateContainerConfigError" || st.Message != wantMsg {
		t.Errorf("phase %q reason %q message %q\nwant Failed CreateContainerConfigError %q", st.Phase, st.Reason, st.Message, wantMsg)
	}
	if c := condition(st, v1alpha1.ConditionFailed); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "CreateContainerConfigError" {
		t.Errorf("Failed condition = %+v", c)
	}
	if st.ResultsConfigMap == "" || st.CompletionTime == nil {
		t.Errorf("the ended run's results were not gathered: %+v", st)
	}
	if got := reasons(h.rec.take()); !cmp.Equal([]string{v1alpha1.ReasonFailed}, got) {
		t.Errorf("events %v, want Failed", got)
	}

	// The next pass stops the Jobs, and keeps the run as it ended.
	writes := h.statusWrites()
	h.mustReconcile(ev)
	if j := h.jobs()[job]; !ptr.Deref(j.Spec.Suspend, false) {
		t.Errorf("the stalled run's Job was not stopped")
	}
	h.setPodStatus(pod.Name, podRunning) // too late
	h.clock.Step(time.Minute)
	h.mustReconcile(ev)
	if got := h.eval("arith").Status; got.Phase != v1alpha1.PhaseFailed || h.statusWrites() != writes {
		t.Errorf("an ended run changed: phase %s, %d more writes", got.Phase, h.statusWrites()-writes)
	}
	// The suspended Job's pods go away: that is the end, not a recovery.
	var pods corev1.PodList
	if err := h.c.List(h.ctx, &pods, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if err := h.c.Delete(h.ctx, &pods.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	h.mustReconcile(ev)
	st = h.eval("arith").Status
	if c := condition(st, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Degraded after the ended run's pods went = %+v; want it still explaining the end", c)
	}
	if got := reasons(h.rec.take()); len(got) != 0 {
		t.Errorf("events after the ended run's pods went: %v; want none (no Recovered)", got)
	}
	// A live edit does not resume it either.
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Parallelism = ptr.To[int32](1) })
	h.mustReconcile(ev)
	if j := h.jobs()[job]; !ptr.Deref(j.Spec.Suspend, false) || h.eval("arith").Status.Phase != v1alpha1.PhaseFailed {
		t.Errorf("a live edit resumed the ended run")
	}
}

// Pods that wait for room on a node leave the run Reconciling (kstatus
// InProgress: a busy cluster makes room without a change, and a GitOps gate
// waiting for Ready or Stalled must not fail on it) until stallTimeout ends
// it, Failed and Stalled; a pod that needs a fix beside them names the
// reason, and the run is Stalled at once.
func TestWaitingForRoomIsNotStalled(t *testing.T) {
	unschedulable := unschedulablePod("0/1 nodes are available: 1 Insufficient cpu.")

	t.Run("room only", func(t *testing.T) {
		h, ev, run := finishedRun(t)
		job := "arith-small-" + run
		h.runnerPod(job, 0, "a", unschedulable)
		h.runnerPod(job, 1, "b", unschedulable)
		h.mustReconcile(ev)
		st := h.eval("arith").Status
		if st.Phase != v1alpha1.PhaseRunning || st.Reason != "Unschedulable" || !strings.Contains(st.Message, "the run fails at") {
			t.Fatalf("phase %s reason %q message %q; want Running, Unschedulable, with its deadline", st.Phase, st.Reason, st.Message)
		}
		checkStalled(t, st, false, "Unschedulable")
		h.clock.Step(DefaultStallTimeout)
		h.mustReconcile(ev)
		st = h.eval("arith").Status
		if st.Phase != v1alpha1.PhaseFailed || st.Reason != "Unschedulable" {
			t.Fatalf("after stallTimeout: phase %s reason %q; want Failed, Unschedulable", st.Phase, st.Reason)
		}
		checkStalled(t, st, true, "Unschedulable")
	})

	t.Run("room and a fix", func(t *testing.T) {
		h, ev, run := finishedRun(t)
		job := "arith-small-" + run
		h.runnerPod(job, 0, "a", unschedulable)
		h.runnerPod(job, 1, "b", waitingPod("CreateContainerConfigError", "couldn't find key nope in Secret ns/openai"))
		h.mustReconcile(ev)
		st := h.eval("arith").Status
		if st.Reason != "CreateContainerConfigError" || !strings.Contains(st.Message, "(and 1 more pod problem(s))") {
			t.Errorf("reason %q message %q; want the problem that needs a fix first", st.Reason, st.Message)
		}
		checkStalled(t, st, true, "CreateContainerConfigError")
	})
}

// checkStalled: Stalled is True (and Reconciling False) as stalled says,
// both with reason.
func checkStalled(t *testing.T, st v1alpha1.EvaluationStatus, stalled bool, reason string) {
	t.Helper()
	for typ, want := range map[string]bool{v1alpha1.ConditionStalled: stalled, v1alpha1.ConditionReconciling: !stalled} {
		if c := condition(st, typ); c == nil || (c.Status == metav1.ConditionTrue) != want || c.Reason != reason {
			t.Errorf("%s = %+v, want %v with reason %s", typ, c, want, reason)
		}
	}
}

// A stall does not end the run while other shards run (a quota that lets some
// pods in, one node that fits fewer pods than parallelism): it only shows.
func TestStallWaitsWhileShardsRun(t *testing.T) {
	h, ev, run := finishedRun(t)
	job := "arith-small-" + run
	h.runnerPod(job, 0, "a", podRunning)
	h.runnerPod(job, 1, "b", unschedulablePod("0/1 nodes are available: 1 Insufficient cpu."))
	h.mustReconcile(ev)
	h.clock.Step(time.Hour)
	h.mustReconcile(ev)
	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhaseRunning || st.Reason != v1alpha1.ReasonUnschedulable || strings.Contains(st.Message, "the run fails") {
		t.Errorf("phase %s reason %q message %q; want Running, Unschedulable, no deadline", st.Phase, st.Reason, st.Message)
	}
	if c := condition(st, v1alpha1.ConditionProgressing); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Progressing = %+v, want True: a shard runs", c)
	}
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 2, Active: 1, Pending: 1}, st.Shards); diff != "" {
		t.Errorf("shard counts (-want +got):\n%s", diff)
	}
}

// A problem that goes away leaves Degraded False (Recovered), with an event.
func TestPodProblemRecovers(t *testing.T) {
	h, ev, run := finishedRun(t)
	pod := h.runnerPod("arith-small-"+run, 0, "a", waitingPod("CreateContainerConfigError", "couldn't find key nope in Secret ns/openai"))
	h.mustReconcile(ev)
	h.rec.take()
	h.clock.Step(10 * time.Second)
	h.setPodStatus(pod.Name, podRunning) // the user added the key
	h.mustReconcile(ev)
	st := h.eval("arith").Status
	if st.Reason != "" || st.Message != "" || st.Phase != v1alpha1.PhaseRunning {
		t.Errorf("reason %q message %q phase %s, want none, Running", st.Reason, st.Message, st.Phase)
	}
	if c := condition(st, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonRecovered {
		t.Errorf("Degraded = %+v, want False Recovered", c)
	}
	if c := condition(st, v1alpha1.ConditionProgressing); c == nil || c.Status != metav1.ConditionTrue || c.Message != "shards are running" {
		t.Errorf("Progressing = %+v", c)
	}
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 2, Active: 1}, st.Shards); diff != "" {
		t.Errorf("shard counts (-want +got):\n%s", diff)
	}
	if got := reasons(h.rec.take()); !cmp.Equal([]string{v1alpha1.ReasonRecovered}, got) {
		t.Errorf("events %v, want Recovered", got)
	}
}

// A FailedCreate event older than the Job's newest pod is over: the pods were
// created since (the quota was raised).
func TestFailedCreateResolvedByANewerPod(t *testing.T) {
	h, ev, run := finishedRun(t)
	job := h.setJobUID("arith-small-"+run, "job-uid")
	h.create(failedCreateEvent(job, t0, "Error creating: pods is forbidden: exceeded quota"))
	h.clock.Step(time.Second)
	h.runnerPod(job.Name, 0, "a", podRunning)
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Reason != "" || condition(st, v1alpha1.ConditionDegraded) != nil {
		t.Errorf("reason %q conditions %+v: an old FailedCreate still counted", st.Reason, st.Conditions)
	}
}

// The quota admission's refusal says whether the pod fits the quota once
// other pods end (its words: plugin/pkg/admission/resourcequota).
func TestQuotaFreesUp(t *testing.T) {
	const prefix = `Error creating: pods "e-m0-r-0-x" is forbidden: `
	cases := []struct {
		name, message string
		want          bool
	}{
		{"used by other pods", "exceeded quota: compute, requested: requests.cpu=50m, used: requests.cpu=100m, limited: requests.cpu=120m", true},
		{"several resources", "exceeded quota: compute, requested: limits.memory=1Gi,requests.cpu=50m, used: limits.memory=1Gi,requests.cpu=50m, limited: limits.memory=1536Mi,requests.cpu=2", true},
		{"exactly the limit", "exceeded quota: pods, requested: count/pods=1, used: count/pods=1, limited: count/pods=1", true},
		{"larger than the limit", "exceeded quota: small, requested: limits.memory=1Gi, used: limits.memory=0, limited: limits.memory=512Mi", false},
		{"one resource of several too large", "exceeded quota: compute, requested: limits.memory=1Gi,requests.cpu=3, used: limits.memory=0,requests.cpu=0, limited: limits.memory=2Gi,requests.cpu=2", false},
		{"a quota not counted yet", "status unknown for quota: compute, resources: limits.memory", true},
		{"a limit the pod lacks", "failed quota: q: must specify limits.memory for: runner", false},
		{"words not understood", "exceeded quota: compute, requested: lots, used: some, limited: few", false},
		{"no limit named", "exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=1, limited: ", false},
		{"not a quota", `maximum memory usage per Container is 128Mi, but limit is 1Gi`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := quotaFreesUp(prefix + tc.message); got != tc.want {
				t.Errorf("quotaFreesUp(%q) = %v, want %v", tc.message, got, tc.want)
			}
		})
	}
}

// A shard that fails for good fails the run at once, with the reason of its
// last pod and what that pod said, not "see the logs".
func TestShardFailureNamesTheCause(t *testing.T) {
	cases := []struct {
		name, reason string
		status       corev1.PodStatus
		limit        string
		message      string
	}{
		{"OOMKilled", "OOMKilled", failedPod("OOMKilled", 137, ""), "8Mi",
			"small/0 (d samples 0-4): pod POD (shard small/0) container runner was OOMKilled (exit code 137, memory limit 8Mi) (attempt 4)"},
		{"a configuration error", v1alpha1.ReasonConfigurationError,
			failedPod("Error", 2, "proctor: spec.prompt.template: template: prompt:1: unclosed action\n"), "",
			"small/0 (d samples 0-4): pod POD (shard small/0) stopped on a configuration error (exit code 2), which no retry can fix: proctor: spec.prompt.template: template: prompt:1: unclosed action (attempt 4)"},
		{"killed, the runtime out of memory", v1alpha1.ReasonRunnerFailed,
			failedPod("Error", 2+135, "fatal error: runtime: out of memory"), "64Mi",
			"container runner failed (Error, exit code 137) with memory limit 64Mi: fatal error: runtime: out of memory (attempt 4)"},
		{"runc refused to start it", "StartError",
			failedPod("StartError", 128, "failed to create containerd task: runc create failed: container init was OOM-killed (memory limit too low?)"), "8Mi",
			"container runner failed (StartError, exit code 128) with memory limit 8Mi: failed to create containerd task: runc create failed: container init was OOM-killed (memory limit too low?)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, ev, run := finishedRun(t)
			job := "arith-small-" + run
			pod := h.runnerPod(job, 0, "a", tc.status, func(p *corev1.Pod) {
				if tc.limit != "" {
					p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(tc.limit)}
				}
				p.Annotations["batch.kubernetes.io/job-index-failure-count"] = "3"
			})
			// The index failed; maxFailedIndexes 0 fails the Job at once.
			h.setJobStatus(job, batchv1.JobStatus{
				FailedIndexes: ptr.To("0"),
				Conditions:    []batchv1.JobCondition{jobCondition(batchv1.JobFailureTarget), jobCondition(batchv1.JobFailed)},
			})
			h.mustReconcile(ev)
			st := h.eval("arith").Status
			want := strings.ReplaceAll(tc.message, "POD", pod.Name)
			if st.Phase != v1alpha1.PhaseFailed || st.Reason != tc.reason || !strings.Contains(st.Message, want) || strings.Contains(st.Message, "see the logs") {
				t.Errorf("phase %q reason %q message %q\nwant Failed %s, containing %q", st.Phase, st.Reason, st.Message, tc.reason, want)
			}
			if c := condition(st, v1alpha1.ConditionFailed); c == nil || c.Reason != tc.reason || c.Message != st.Message {
				t.Errorf("Failed condition = %+v", c)
			}
			if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 2, Failed: 1}, st.Shards); diff != "" {
				t.Errorf("shard counts (-want +got):\n%s", diff)
			}
			for _, e := range h.rec.take() {
				if e.Reason == v1alpha1.ReasonFailed && e.Note != st.Message {
					t.Errorf("Failed event %q, want the status message", e.Note)
				}
			}
		})
	}
}

// Shard counts are the pods': a shard is active while its pod runs, pending
// while it waits, and neither once the Evaluation is suspended and its pods
// are going away, whatever the shard's last heartbeat said.
func TestShardCountsFollowPods(t *testing.T) {
	h, ev, run := finishedRun(t)
	job := "arith-small-" + run
	h.create(headCM(t, "arith", run, shardOf("small", 0), running(1, 0, 1), nil))
	p0 := h.runnerPod(job, 0, "a", podRunning, func(p *corev1.Pod) { p.Finalizers = []string{"batch.kubernetes.io/job-tracking"} })
	h.runnerPod(job, 1, "b", podCreating, func(p *corev1.Pod) { p.Finalizers = []string{"batch.kubernetes.io/job-tracking"} })
	h.clock.Step(3 * time.Second)
	h.mustReconcile(ev)
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 2, Active: 1, Pending: 1}, h.eval("arith").Status.Shards); diff != "" {
		t.Errorf("running (-want +got):\n%s", diff)
	}

	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptr.To(true) })
	h.clock.Step(time.Second)
	h.mustReconcile(ev)
	// The Job controller deletes the pods of a suspended Job.
	for _, name := range []string{p0.Name, job + "-1-b"} {
		if err := h.c.Delete(h.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Step(3 * time.Second) // past ProgressInterval; the head is still fresh
	h.mustReconcile(ev)
	st := h.eval("arith").Status
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 2}, st.Shards); diff != "" {
		t.Errorf("suspended (-want +got):\n%s", diff)
	}
	if st.Phase != v1alpha1.PhaseSuspended {
		t.Errorf("phase %s", st.Phase)
	}
}

// planningRun is an Evaluation of a url dataset whose planner Job was made
// (the pass that counts its samples), with its harness and run.
func planningRun(t *testing.T) (*harness, *v1alpha1.Evaluation, string) {
	t.Helper()
	ev := withUID(testutil.MakeEvaluation("arith", testNS).
		Dataset(v1alpha1.Dataset{Name: "web", Source: v1alpha1.DatasetSource{URL: "https://example.org/qa.jsonl"}}).
		OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	return h, ev, cluster.RunID(ev)
}

// The planner's pod is watched the same way: a planner that cannot start
// shows why while the Evaluation is Pending, and ends the run after the stall
// timeout.
func TestPlannerStall(t *testing.T) {
	h, ev, run := planningRun(t)
	h.runnerPod(cluster.PlannerJobName("arith", run), 0, "a", waitingPod("ImagePullBackOff", "Back-off pulling image \"registry.example/proctor:nope\""))
	h.mustReconcile(ev)
	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhasePending || st.Reason != "ImagePullBackOff" || !strings.Contains(st.Message, "counting the samples") || !strings.Contains(st.Message, "Back-off pulling image") {
		t.Errorf("phase %s reason %q message %q", st.Phase, st.Reason, st.Message)
	}
	h.clock.Step(DefaultStallTimeout)
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Phase != v1alpha1.PhaseFailed || st.Reason != "ImagePullBackOff" {
		t.Errorf("after the stall timeout: phase %s reason %q message %q", st.Phase, st.Reason, st.Message)
	}
	h.mustReconcile(ev)
	if j := h.jobs()[cluster.PlannerJobName("arith", run)]; !ptr.Deref(j.Spec.Suspend, false) {
		t.Errorf("the stalled planner Job was not stopped")
	}
}

// A planner pod that failed is retried by its Job: the run says why, and is
// not Stalled meanwhile (kstatus would call it Failed).
func TestPlannerRetryIsNotStalled(t *testing.T) {
	h, ev, run := planningRun(t)
	h.runnerPod(cluster.PlannerJobName("arith", run), 0, "a", failedPod("OOMKilled", 137, ""))
	h.mustReconcile(ev)
	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhasePending || st.Reason != "OOMKilled" {
		t.Errorf("phase %s reason %q message %q; want Pending, OOMKilled", st.Phase, st.Reason, st.Message)
	}
	checkStalled(t, st, false, "OOMKilled")
}

// Event notes past the events API's 1 KiB limit would be refused: they are cut.
func TestEventNoteIsCut(t *testing.T) {
	if got := eventNote("short"); got != "short" {
		t.Errorf("eventNote(short) = %q", got)
	}
	long := strings.Repeat("é", 600) // 1200 bytes
	got := eventNote(long)
	if len(got) > maxEventNote || !strings.HasSuffix(got, "...") || !strings.HasPrefix(long, strings.TrimSuffix(got, "...")) {
		t.Errorf("eventNote cut %d bytes to %d: %q", len(long), len(got), got[len(got)-10:])
	}
}

// A pod's words reach status.message and events, which kubectl prints as they
// are: terminal escapes and bidi overrides are replaced.
func TestDetailEscapesControlCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"plain error":                      "plain error",
		"log\nlast line":                   "last line",
		"\x1b]0;owned\x07\x1b[2Jgone":      "?]0;owned??[2Jgone",
		"abc\u202edcba":                    "abc?dcba",
		"bad \xff byte":                    "bad ? byte",
		"tabs\tand   spaces are collapsed": "tabs and spaces are collapsed",
	} {
		if got := detail(in); got != want {
			t.Errorf("detail(%q) = %q, want %q", in, got, want)
		}
	}
}

// Between the retries of a shard whose pod was OOMKilled, the reason stays:
// it went blank while the next pod started (REASON flickered).
func TestReasonStaysBetweenRetries(t *testing.T) {
	h, ev, run := finishedRun(t)
	job := "arith-small-" + run
	h.runnerPod(job, 0, "a", failedPod("OOMKilled", 137, ""))
	h.clock.Step(10 * time.Second)
	h.runnerPod(job, 0, "b", corev1.PodStatus{Phase: corev1.PodPending}, func(p *corev1.Pod) {
		p.Annotations[annotationIndexFailures] = "1"
	})
	h.mustReconcile(ev)
	st := h.eval("arith").Status
	if st.Reason != "OOMKilled" || !strings.Contains(st.Message, "was OOMKilled") || !strings.Contains(st.Message, "the shard is being retried") {
		t.Errorf("reason %q message %q while the retry starts; want OOMKilled, said", st.Reason, st.Message)
	}
	if st.Phase != v1alpha1.PhaseRunning {
		t.Errorf("phase %s, want Running: a retry is no stall", st.Phase)
	}
}

// Outputs stored cut show in REASON when nothing more pressing does.
func TestOutputsTruncatedInReason(t *testing.T) {
	h, ev, run := finishedRun(t)
	h.runnerPod("arith-small-"+run, 0, "a", podRunning)
	head := &corev1.ConfigMap{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: cluster.HeadName("arith", run, "small", 0)}, head); err != nil {
		t.Fatal(err)
	}
	prog := running(3, 0, 2)
	prog.Cut = 2
	if head.Annotations == nil {
		head.Annotations = map[string]string{}
	}
	head.Annotations[cluster.AnnotationProgress] = progressJSON(t, prog)
	if err := h.c.Update(h.ctx, head); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Reason != v1alpha1.ReasonOutputsCut {
		t.Errorf("reason %q, want %s", st.Reason, v1alpha1.ReasonOutputsCut)
	}
}
