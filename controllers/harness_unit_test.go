package controllers

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/runner/results"
)

// t0 is the fake clock's start: whole seconds, so times survive a round trip
// through the (JSON-serializing) fake client unchanged.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

const (
	testNS    = "ns"
	testImage = "proctor:test"
)

func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// callLog orders what happened across the client and the event recorder.
type callLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *callLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf(format, args...))
}

func (l *callLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.entries...)
}

// recordedEvent is one call of the recorder.
type recordedEvent struct {
	Type, Reason, Action, Note string
}

// fakeRecorder records Eventf calls (an events.EventRecorder).
type fakeRecorder struct {
	mu     sync.Mutex
	log    *callLog
	events []recordedEvent
}

func (f *fakeRecorder) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	e := recordedEvent{Type: eventtype, Reason: reason, Action: action, Note: fmt.Sprintf(note, args...)}
	f.mu.Lock()
	f.events = append(f.events, e)
	f.mu.Unlock()
	f.log.add("event %s", reason)
}

func (f *fakeRecorder) take() []recordedEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.events
	f.events = nil
	return out
}

func reasons(events []recordedEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Reason)
	}
	return out
}

// harness is a reconciler over a fake API server, with a fake clock, a
// recording event recorder and a count of Evaluation status writes.
type harness struct {
	t     *testing.T
	ctx   context.Context
	c     client.WithWatch
	r     *EvaluationReconciler
	clock *clocktesting.FakeClock
	rec   *fakeRecorder
	log   *callLog

	mu              sync.Mutex
	statusSucceeded int
}

type harnessOpts struct {
	objs  []client.Object
	funcs interceptor.Funcs // faults, applied beneath the status counter
	opts  Options
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	s := testScheme(t)
	for _, o := range o.objs {
		if ev, ok := o.(*v1alpha1.Evaluation); ok {
			canonicalize(t, ev)
		}
	}
	base := fake.NewClientBuilder().WithScheme(s).WithObjects(o.objs...).
		WithStatusSubresource(&v1alpha1.Evaluation{}, &batchv1.Job{}, &corev1.Pod{}).
		WithIndex(&corev1.Event{}, eventRegardingUID, eventRegarding).
		// The API server selects any object by metadata.name; the fake, only by an index.
		WithIndex(&v1alpha1.Evaluation{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).Build()
	faulty := interceptor.NewClient(base, o.funcs)
	h := &harness{t: t, ctx: context.Background(), clock: clocktesting.NewFakeClock(t0), log: &callLog{}}
	h.rec = &fakeRecorder{log: h.log}
	h.c = interceptor.NewClient(faulty, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			_, isEval := obj.(*v1alpha1.Evaluation)
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			if isEval && err == nil {
				h.mu.Lock()
				h.statusSucceeded++
				h.mu.Unlock()
				h.log.add("status update")
			}
			return err
		},
	})
	h.r = &EvaluationReconciler{
		Client: h.c, APIReader: h.c, Scheme: s, Recorder: h.rec, Clock: h.clock,
		RunnerImage: testImage, Options: o.opts, CheckSpec: compile.CheckData,
	}
	initReconciler(h.r)
	return h
}

// canonicalize re-encodes inline samples as the API server stores them (as
// maps: keys sorted). The fake client re-encodes them on its first status
// write; without this the run (a hash of the spec) would change under a test.
func canonicalize(t testing.TB, ev *v1alpha1.Evaluation) {
	t.Helper()
	for i := range ev.Spec.Datasets {
		for j, item := range ev.Spec.Datasets[i].Source.Inline {
			var m map[string]any
			if err := json.Unmarshal(item.Raw, &m); err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			ev.Spec.Datasets[i].Source.Inline[j] = runtime.RawExtension{Raw: b}
		}
	}
}

// initReconciler does what SetupWithManager does besides registering watches.
func initReconciler(r *EvaluationReconciler) {
	r.Options.defaults()
	r.heads = newHeadTracker()
	r.progress = newThrottle()
	r.written = newVersions()
	r.tallies = newRunningTallies()
	r.reported = newNameSet()
	r.tidied = newNameSet()
	r.hashes = newSpecHashes()
	r.grants = newUploadGrants()
}

func (h *harness) statusWrites() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.statusSucceeded
}

func (h *harness) reconcile(ev *v1alpha1.Evaluation) (ctrl.Result, error) {
	h.t.Helper()
	return h.r.Reconcile(h.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ev)})
}

// mustReconcile reconciles and fails the test on an error.
func (h *harness) mustReconcile(ev *v1alpha1.Evaluation) ctrl.Result {
	h.t.Helper()
	res, err := h.reconcile(ev)
	if err != nil {
		h.t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (h *harness) eval(name string) *v1alpha1.Evaluation {
	h.t.Helper()
	ev := &v1alpha1.Evaluation{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: name}, ev); err != nil {
		h.t.Fatalf("getting Evaluation %s: %v", name, err)
	}
	return ev
}

// editSpec applies edit to the stored Evaluation's spec.
func (h *harness) editSpec(name string, edit func(*v1alpha1.EvaluationSpec)) *v1alpha1.Evaluation {
	h.t.Helper()
	ev := h.eval(name)
	edit(&ev.Spec)
	canonicalize(h.t, ev)
	ev.Generation++
	if err := h.c.Update(h.ctx, ev); err != nil {
		h.t.Fatalf("updating Evaluation %s: %v", name, err)
	}
	return h.eval(name)
}

func (h *harness) jobs() map[string]*batchv1.Job {
	h.t.Helper()
	var list batchv1.JobList
	if err := h.c.List(h.ctx, &list, client.InNamespace(testNS)); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]*batchv1.Job{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func (h *harness) configMaps() map[string]*corev1.ConfigMap {
	h.t.Helper()
	var list corev1.ConfigMapList
	if err := h.c.List(h.ctx, &list, client.InNamespace(testNS)); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]*corev1.ConfigMap{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func (h *harness) exists(obj client.Object, name string) bool {
	h.t.Helper()
	err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: name}, obj)
	if err == nil {
		return true
	}
	if client.IgnoreNotFound(err) != nil {
		h.t.Fatal(err)
	}
	return false
}

// setJobStatus writes a Job's status as the Job controller would.
func (h *harness) setJobStatus(name string, status batchv1.JobStatus) {
	h.t.Helper()
	job := &batchv1.Job{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: name}, job); err != nil {
		h.t.Fatal(err)
	}
	job.Status = status
	if err := h.c.Status().Update(h.ctx, job); err != nil {
		h.t.Fatal(err)
	}
}

// create creates objs; a ConfigMap that exists (a head or chunk slot the
// controller made) is updated instead, as a runner would.
func (h *harness) create(objs ...client.Object) {
	h.t.Helper()
	for _, o := range objs {
		err := h.c.Create(h.ctx, o)
		if cm, ok := o.(*corev1.ConfigMap); ok && apierrors.IsAlreadyExists(err) {
			var have corev1.ConfigMap
			if err = h.c.Get(h.ctx, client.ObjectKeyFromObject(cm), &have); err == nil {
				have.Labels, have.Annotations, have.Data, have.BinaryData = cm.Labels, cm.Annotations, cm.Data, cm.BinaryData
				err = h.c.Update(h.ctx, &have)
			}
		}
		if err != nil {
			h.t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// ownedBy is the controller reference of the test Evaluation ev (the builders'
// UID).
func ownedBy(ev string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "Evaluation", Name: ev,
		UID: types.UID("uid-" + testNS + "-" + ev), Controller: ptr.To(true),
	}}
}

func jobCondition(t batchv1.JobConditionType) batchv1.JobCondition {
	return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}
}

// completeStatus is the status of a Job whose indexes all succeeded.
func completeStatus(indexes string) batchv1.JobStatus {
	return batchv1.JobStatus{
		CompletedIndexes: indexes,
		Conditions:       []batchv1.JobCondition{jobCondition(batchv1.JobSuccessCriteriaMet), jobCondition(batchv1.JobComplete)},
	}
}

// --- shard ConfigMaps, in the formats of kube.Store ---

// rec is a record of sample i of a model on a dataset: even samples score 1,
// odd ones 0; latency 100+10i ms; 10 input and 2 output tokens; judging cost 7
// and 1.
func rec(model, dataset string, i int) results.Record {
	score := 0.0
	if i%2 == 0 {
		score = 1
	}
	return results.Record{
		ID: fmt.Sprintf("%s-%d", dataset, i), Model: model, Dataset: dataset, Output: fmt.Sprint(i + 1),
		Scores: map[string]float64{"exact_match": score}, Attempts: 1,
		LatencyMillis: int64(100 + 10*i), InputTokens: 10, OutputTokens: 2,
		JudgeInputTokens: 7, JudgeOutputTokens: 1,
	}
}

// erroredRec is a failed sample: no scores, no latency counted.
func erroredRec(model, dataset string, i int) results.Record {
	return results.Record{
		ID: fmt.Sprintf("%s-%d", dataset, i), Model: model, Dataset: dataset,
		Error: "boom", Attempts: 3, InputTokens: 10,
	}
}

// gzipJournal gzips records as journal lines {"i":N,"r":{record}}.
func gzipJournal(t testing.TB, recs map[int]results.Record, order []int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	for _, i := range order {
		r := recs[i]
		b, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, `{"i":%d,"r":%s}`+"\n", i, b)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gunzip(t testing.TB, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func shardLabelsFor(ev, run, component, model, dataset string) map[string]string {
	l := cluster.Labels(ev, run, component)
	l[cluster.LabelModel] = model
	l[cluster.LabelDataset] = dataset
	return l
}

// headCM is a shard's head: progress annotation and pending records.
func headCM(t testing.TB, ev, run string, s cluster.Shard, prog cluster.ShardProgress, pending map[int]results.Record, order ...int) *corev1.ConfigMap {
	t.Helper()
	b, err := json.Marshal(prog)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: cluster.HeadName(ev, run, s.Model, s.Index),
			Labels:          shardLabelsFor(ev, run, cluster.ComponentShard, s.Model, s.Dataset),
			Annotations:     map[string]string{cluster.AnnotationProgress: string(b)},
			OwnerReferences: ownedBy(ev),
		},
	}
	if len(order) > 0 {
		cm.BinaryData = map[string][]byte{cluster.KeyPending: gzipJournal(t, pending, order)}
	}
	return cm
}

// chunkCM is the k-th chunk slot of a shard, filled with records.
func chunkCM(t testing.TB, ev, run string, s cluster.Shard, k int, recs map[int]results.Record, order ...int) *corev1.ConfigMap {
	t.Helper()
	head := cluster.HeadName(ev, run, s.Model, s.Index)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: cluster.ChunkName(head, k),
			Labels:          shardLabelsFor(ev, run, cluster.ComponentRecords, s.Model, s.Dataset),
			OwnerReferences: ownedBy(ev),
		},
		BinaryData: map[string][]byte{cluster.KeyRecords: gzipJournal(t, recs, order)},
	}
}

func recsOf(model, dataset string, idx ...int) map[int]results.Record {
	out := map[int]results.Record{}
	for _, i := range idx {
		out[i] = rec(model, dataset, i)
	}
	return out
}

func progressJSON(t testing.TB, p cluster.ShardProgress) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runnerPod creates the pod the Job controller would make for shard index of
// Job job (named job-index-suffix, created at the fake clock's now), with the
// status status; edit, if given, changes the pod before it is created.
func (h *harness) runnerPod(job string, index int, suffix string, status corev1.PodStatus, edit ...func(*corev1.Pod)) *corev1.Pod {
	h.t.Helper()
	j := &batchv1.Job{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: job}, j); err != nil {
		h.t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: fmt.Sprintf("%s-%d-%s", job, index, suffix),
			Labels:            j.Spec.Template.Labels,
			Annotations:       map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(index)},
			CreationTimestamp: metav1.NewTime(h.clock.Now()),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptrTo(true),
			}},
		},
		Spec: *j.Spec.Template.Spec.DeepCopy(),
	}
	for _, e := range edit {
		e(pod)
	}
	if err := h.c.Create(h.ctx, pod); err != nil {
		h.t.Fatal(err)
	}
	pod.Status = status
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatal(err)
	}
	return pod
}

// setPodStatus replaces a pod's status, as the kubelet would.
func (h *harness) setPodStatus(name string, status corev1.PodStatus) {
	h.t.Helper()
	pod := &corev1.Pod{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: name}, pod); err != nil {
		h.t.Fatal(err)
	}
	pod.Status = status
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatal(err)
	}
}

var (
	podRunning = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
		{Name: "runner", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
	}}
	podCreating = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
		{Name: "runner", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
	}}
)

// waitingPod is the status of a pod whose runner container waits for reason.
func waitingPod(reason, message string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
		{Name: "runner", Image: "registry.example/agent:1", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}},
	}}
}

// unschedulablePod is the status of a pod the scheduler has no node for,
// saying why in message.
func unschedulablePod(message string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message,
	}}}
}

// failedPod is the status of a pod whose runner container ended.
func failedPod(reason string, exitCode int32, message string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{
		{Name: "runner", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: exitCode, Message: message}}},
	}}
}
