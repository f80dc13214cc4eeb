package controllers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
)

var errInjected = errors.New("injected fault")

func TestNoOpReconcileDoesNotWriteStatus(t *testing.T) {
	ev := withUID(simpleEval("arith").RateLimit(60).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	if got := h.statusWrites(); got != 1 {
		t.Fatalf("first pass wrote status %d times, want 1", got)
	}
	h.rec.take()
	for i := range 3 {
		h.clock.Step(5 * time.Second)
		res := h.mustReconcile(ev)
		if got := h.statusWrites(); got != 1 {
			t.Errorf("pass %d changed nothing but wrote status (%d writes in all)", i+2, got)
		}
		if res != (ctrl.Result{}) {
			t.Errorf("pass %d: result %+v, want none", i+2, res)
		}
		if ev := h.rec.take(); len(ev) != 0 {
			t.Errorf("pass %d: events %v", i+2, reasons(ev))
		}
	}
}

func TestProgressOnlyChangesAreThrottled(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}}) // ProgressInterval 2s
	run := cluster.RunID(ev)
	h.mustReconcile(ev) // t0: the run starts (a phase change: written)
	if got := h.statusWrites(); got != 1 {
		t.Fatalf("writes = %d, want 1", got)
	}

	head := headCM(t, "arith", run, shardOf("small", 0), cluster.ShardProgress{State: cluster.StateRunning, Total: 5, Done: 2, Scores: map[string]float64{"exact_match": 1}}, nil)
	h.create(head)
	h.runnerPod("arith-small-"+run, 0, "a", podRunning) // a shard starting is progress too
	h.clock.Step(time.Second)
	res := h.mustReconcile(ev)
	if got := h.statusWrites(); got != 1 {
		t.Errorf("progress within ProgressInterval was written (%d writes)", got)
	}
	if res.RequeueAfter != time.Second {
		t.Errorf("RequeueAfter = %v, want 1s (the rest of the interval)", res.RequeueAfter)
	}
	if st := h.eval("arith").Status; st.Progress.Completed != 0 {
		t.Errorf("stored progress = %+v, want the old one", st.Progress)
	}

	h.clock.Step(time.Second)
	res = h.mustReconcile(ev)
	if got := h.statusWrites(); got != 2 {
		t.Errorf("progress after ProgressInterval was not written (%d writes)", got)
	}
	st := h.eval("arith").Status
	if diff := cmp.Diff(&v1alpha1.Progress{Total: 10, Completed: 2, Text: "2/10"}, st.Progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 2, Active: 1}, st.Shards); diff != "" {
		t.Errorf("shards (-want +got):\n%s", diff)
	}
	if st.Score != "0.5000" {
		t.Errorf("score = %q, want 0.5000", st.Score)
	}
	// An active shard brings a pass back within StaleAfter even if it goes silent.
	if res.RequeueAfter != 30*time.Second {
		t.Errorf("RequeueAfter = %v, want StaleAfter (30s)", res.RequeueAfter)
	}

	// A phase change is never held back.
	h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptrTo(true) })
	h.clock.Step(100 * time.Millisecond)
	h.mustReconcile(ev)
	if got := h.statusWrites(); got != 3 {
		t.Errorf("a phase change within ProgressInterval was not written (%d writes)", got)
	}
}

// Progress is not written when the run, at its pace so far, ends before the
// next progress write would be due: the end's write follows. Only one is
// passed over: progress is still written 2 x ProgressInterval after the last.
func TestProgressNotWrittenJustBeforeTheEnd(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}}) // ProgressInterval 2s
	run := cluster.RunID(ev)
	h.mustReconcile(ev) // t0: the run starts (written)
	writes := h.statusWrites()

	h.runnerPod("arith-small-"+run, 0, "a", podRunning)
	h.runnerPod("arith-small-"+run, 1, "b", podRunning)
	h.create(headCM(t, "arith", run, shardOf("small", 0), cluster.ShardProgress{State: cluster.StateRunning, Total: 5, Done: 4}, nil))
	h.create(headCM(t, "arith", run, shardOf("small", 1), cluster.ShardProgress{State: cluster.StateRunning, Total: 5, Done: 5}, nil))
	h.clock.Step(3 * time.Second) // 9 of 10 in 3 s: the last one due in a third of a second
	res := h.mustReconcile(ev)
	if got := h.statusWrites(); got != writes {
		t.Errorf("progress 9/10 was written just before the end (%d writes)", got-writes)
	}
	if res.RequeueAfter != time.Second {
		t.Errorf("RequeueAfter = %v, want 1s (2 x ProgressInterval after the last write)", res.RequeueAfter)
	}

	h.clock.Step(time.Second) // the end did not come
	h.mustReconcile(ev)
	if got := h.statusWrites(); got != writes+1 {
		t.Fatalf("progress 2 x ProgressInterval after the last write was not written (%d writes)", got-writes)
	}
	if st := h.eval("arith").Status; st.Progress.Completed != 9 {
		t.Errorf("stored progress = %+v, want 9 completed", st.Progress)
	}
}

func TestEndsWithin(t *testing.T) {
	start := metav1.NewTime(t0)
	for _, tc := range []struct {
		name            string
		progress        *v1alpha1.Progress
		start           *metav1.Time
		elapsed, within time.Duration
		want            bool
	}{
		{name: "9 of 10 in 9 s, within 2 s", progress: &v1alpha1.Progress{Total: 10, Completed: 9}, start: &start, elapsed: 9 * time.Second, within: 2 * time.Second, want: true},
		{name: "half in 9 s, within 2 s", progress: &v1alpha1.Progress{Total: 10, Completed: 5}, start: &start, elapsed: 9 * time.Second, within: 2 * time.Second},
		{name: "half in 1 s, within 2 s", progress: &v1alpha1.Progress{Total: 10, Completed: 5}, start: &start, elapsed: time.Second, within: 2 * time.Second, want: true},
		{name: "nothing done yet", progress: &v1alpha1.Progress{Total: 10}, start: &start, elapsed: time.Second, within: time.Hour},
		{name: "all done (the end is a phase)", progress: &v1alpha1.Progress{Total: 10, Completed: 10}, start: &start, elapsed: time.Second, within: time.Hour},
		{name: "no start time", progress: &v1alpha1.Progress{Total: 10, Completed: 9}, elapsed: time.Second, within: time.Hour},
		{name: "no progress", start: &start, elapsed: time.Second, within: time.Hour},
		{name: "a clock behind the start", progress: &v1alpha1.Progress{Total: 10, Completed: 9}, start: &start, elapsed: -time.Second, within: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &v1alpha1.EvaluationStatus{Progress: tc.progress, StartTime: tc.start}
			if got := endsWithin(st, t0.Add(tc.elapsed), tc.within); got != tc.want {
				t.Errorf("endsWithin = %v, want %v", got, tc.want)
			}
		})
	}
}

// Each status write rewrites the whole Evaluation in etcd: one whose inline
// samples make it hundreds of KiB has its progress alone written less often
// than ProgressInterval (progressBytesPerSecond); its phase still at once.
func TestLargeSpecProgressIsWrittenLessOften(t *testing.T) {
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 4000).OpenAIModel("small", llmURL).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(2000).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}}) // ProgressInterval 2s
	run := cluster.RunID(ev)
	every := h.r.progressEvery(&pass{hashes: cluster.HashSpec(&ev.Spec)})
	if every <= 2*time.Second {
		t.Fatalf("progress of a spec of 4,000 inline samples written every %s, want less often than ProgressInterval", every)
	}
	h.mustReconcile(ev) // the run starts: written
	writes := h.statusWrites()

	h.create(headCM(t, "arith", run, cluster.Shard{Model: "small", Dataset: "d", Index: 0, Start: 0, End: 2000},
		cluster.ShardProgress{State: cluster.StateRunning, Total: 2000, Done: 2}, nil))
	h.clock.Step(3 * time.Second) // past ProgressInterval, within every
	if res := h.mustReconcile(ev); res.RequeueAfter != every-3*time.Second {
		t.Errorf("RequeueAfter = %v, want the rest of %s", res.RequeueAfter, every)
	}
	if got := h.statusWrites(); got != writes {
		t.Errorf("progress %s after the last write was written (every %s)", 3*time.Second, every)
	}
	h.clock.Step(every - 3*time.Second)
	h.mustReconcile(ev)
	if got := h.statusWrites(); got != writes+1 {
		t.Errorf("progress %s after the last write was not written", every)
	}

	h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptrTo(true) })
	h.clock.Step(100 * time.Millisecond)
	h.mustReconcile(ev)
	if got := h.statusWrites(); got != writes+2 {
		t.Errorf("a phase change within the interval was not written")
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestStatusConflictRequeuesWithoutError(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*v1alpha1.Evaluation); ok {
				return apierrors.NewConflict(schema.GroupResource{Group: "proctor.dev", Resource: "evaluations"}, obj.GetName(), errInjected)
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}})
	res, err := h.reconcile(ev)
	if err != nil {
		t.Fatalf("Reconcile returned %v, want no error on a conflict", err)
	}
	if res.RequeueAfter != time.Second {
		t.Errorf("RequeueAfter = %v, want 1s", res.RequeueAfter)
	}
	if st := h.eval("arith").Status; st.Phase != "" {
		t.Errorf("status was written despite the conflict: %+v", st)
	}
}

func TestEventsFollowTheStatusWrite(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	if diff := cmp.Diff([]string{"status update", "event " + v1alpha1.ReasonStarted}, h.log.all()); diff != "" {
		t.Errorf("order of calls (-want +got):\n%s", diff)
	}
}

// The events of a pass whose status was not written would be emitted again by
// the pass that writes it.
func TestNoEventsWhenStatusWriteConflicts(t *testing.T) {
	h, ev, run := finishedRun(t)
	storeModelRecords(t, h, run, "small")
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	var conflict atomic.Bool
	conflict.Store(true)
	h.c = interceptor.NewClient(h.c, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*v1alpha1.Evaluation); ok && conflict.Load() {
				return apierrors.NewConflict(schema.GroupResource{Group: "proctor.dev", Resource: "evaluations"}, obj.GetName(), errInjected)
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	h.r.Client = h.c
	h.mustReconcile(ev)
	conflict.Store(false)
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("phase after the retry = %q", st.Phase)
	}
	if got := reasons(h.rec.take()); !cmp.Equal([]string{v1alpha1.ReasonCompleted}, got) {
		t.Errorf("events = %v; want only %s, once, from the pass whose write succeeded", got, v1alpha1.ReasonCompleted)
	}
}

// A shard failure alone is "progress" (shard counts) and may be held back by the
// throttle; its event must still be sent once.
func TestShardFailedEventOnceWhenThrottled(t *testing.T) {
	h, ev, run := finishedRun(t, "small")
	h.setJobStatus("arith-small-"+run, batchv1.JobStatus{FailedIndexes: ptrTo("0")})
	h.clock.Step(500 * time.Millisecond) // within ProgressInterval of the first write
	h.mustReconcile(ev)
	h.clock.Step(2 * time.Second)
	h.mustReconcile(ev)
	h.clock.Step(2 * time.Second)
	h.mustReconcile(ev)
	got := reasons(h.rec.take())
	if diff := cmp.Diff([]string{v1alpha1.ReasonShardFailed}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// match picks the calls a fault applies to.
type match func(obj client.Object) bool

func isKind[T client.Object]() match {
	return func(obj client.Object) bool { _, ok := obj.(T); return ok }
}

func withComponent(c string) match {
	return func(obj client.Object) bool { return obj.GetLabels()[cluster.LabelComponent] == c }
}

func TestStepErrorsNameTheStep(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "openai"}}
	cases := []struct {
		name string
		// secondPass arms the fault after a clean first pass.
		secondPass bool
		funcs      func(armed *atomic.Bool) interceptor.Funcs
		wantPrefix string
	}{
		{
			name: "StartRun",
			funcs: func(armed *atomic.Bool) interceptor.Funcs {
				return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if _, ok := list.(*batchv1.JobList); ok && armed.Load() {
						return errInjected
					}
					return c.List(ctx, list, opts...)
				}}
			},
			wantPrefix: "StartRun: injected fault",
		},
		{
			name: "CheckReferences",
			funcs: func(armed *atomic.Bool) interceptor.Funcs {
				return interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.Kind == "Secret" && armed.Load() {
						return errInjected
					}
					return c.Get(ctx, key, obj, opts...)
				}}
			},
			wantPrefix: "CheckReferences: injected fault",
		},
		{
			name:       "LoadPlan",
			funcs:      createFault(withComponent(cluster.ComponentPlan)),
			wantPrefix: "LoadPlan: creating ConfigMap arith-",
		},
		{
			name:       "EnsurePermissions",
			funcs:      createFault(isKind[*rbacv1.Role]()),
			wantPrefix: "EnsurePermissions: creating Role arith-runner: injected fault",
		},
		{
			name:       "EnsureBudget",
			funcs:      createFault(withComponent(cluster.ComponentBudget)),
			wantPrefix: "EnsureBudget: creating ConfigMap arith-budget: injected fault",
		},
		{
			name:       "EnsureJobs",
			funcs:      createFault(isKind[*batchv1.Job]()),
			wantPrefix: "EnsureJobs: creating Job arith-small-",
		},
		{
			name:       "ObserveShards",
			secondPass: true,
			funcs: func(armed *atomic.Bool) interceptor.Funcs {
				return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					lo := (&client.ListOptions{}).ApplyOptions(opts)
					if armed.Load() && lo.LabelSelector != nil && strings.Contains(lo.LabelSelector.String(), cluster.LabelComponent+"="+cluster.ComponentShard) {
						return errInjected
					}
					return c.List(ctx, list, opts...)
				}}
			},
			wantPrefix: "ObserveShards: injected fault",
		},
		{
			name:       "DivideBudget",
			secondPass: true,
			funcs: func(armed *atomic.Bool) interceptor.Funcs {
				return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					if armed.Load() && obj.GetName() == "arith-budget" {
						return errInjected
					}
					return c.Patch(ctx, obj, patch, opts...)
				}}
			},
			wantPrefix: "DivideBudget: injected fault",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			armed := &atomic.Bool{}
			armed.Store(!tc.secondPass)
			// Rate limited (a budget), keyed from a Secret (a reference to check).
			ev := withUID(simpleEval("arith").RateLimit(60).APIKeySecret("openai", "k").Obj())
			h := newHarness(t, harnessOpts{objs: []client.Object{ev, secret}, funcs: tc.funcs(armed)})
			run := cluster.RunID(ev)
			if tc.secondPass {
				h.mustReconcile(ev)
				// A running shard, so that the budget is divided again.
				h.create(headCM(t, "arith", run, shardOf("small", 0), cluster.ShardProgress{State: cluster.StateRunning, Total: 5}, nil))
				armed.Store(true)
				h.rec.take()
			}
			before := h.statusWrites()
			res, err := h.reconcile(ev)
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantPrefix) {
				t.Fatalf("Reconcile error = %v, want %q...", err, tc.wantPrefix)
			}
			if !errors.Is(err, errInjected) {
				t.Errorf("error %v does not wrap the cause", err)
			}
			if res != (ctrl.Result{}) {
				t.Errorf("result %+v with an error", res)
			}
			st := h.eval("arith").Status
			if tc.secondPass {
				if got := h.statusWrites() - before; got != 0 {
					t.Errorf("a failed pass wrote status %d time(s): phase %s", got, st.Phase)
				}
				if st.Phase != v1alpha1.PhaseRunning {
					t.Errorf("phase = %q after a failed pass, want Running kept", st.Phase)
				}
			} else {
				// Nothing ran yet: the phase must not claim progress it did not make.
				if st.Phase == v1alpha1.PhaseRunning || st.Phase == v1alpha1.PhaseSucceeded || st.Phase == v1alpha1.PhaseFailed {
					t.Errorf("phase = %q after a pass that failed in %s", st.Phase, tc.name)
				}
				if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionProgressing) {
					t.Errorf("Progressing is True after a pass that failed in %s", tc.name)
				}
			}
			if got := reasons(h.rec.take()); len(got) != 0 {
				t.Errorf("a failed pass emitted %v", got)
			}
		})
	}
}

func createFault(m match) func(armed *atomic.Bool) interceptor.Funcs {
	return func(armed *atomic.Bool) interceptor.Funcs {
		return interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if armed.Load() && m(obj) {
				return errInjected
			}
			return c.Create(ctx, obj, opts...)
		}}
	}
}

// Gathering the results can fail (an API error, or a record that cannot be
// read); until it succeeds the Evaluation must not claim to have succeeded.
func TestFinishFailureIsNotSucceeded(t *testing.T) {
	var fail atomic.Bool
	ev := withUID(simpleEval("arith").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok && fail.Load() && key.Name == "arith-results" {
				return errInjected
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}})
	run := cluster.RunID(ev)
	h.mustReconcile(ev)
	storeModelRecords(t, h, run, "small")
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	h.rec.take()

	fail.Store(true)
	_, err := h.reconcile(ev)
	if err == nil || !strings.HasPrefix(err.Error(), "Finish: injected fault") {
		t.Fatalf("Reconcile error = %v, want Finish: injected fault", err)
	}
	failedPass := h.eval("arith").Status
	failedEvents := reasons(h.rec.take())

	// The next pass recovers.
	fail.Store(false)
	h.mustReconcile(ev)
	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhaseSucceeded || st.ResultsConfigMap != "arith-results" || len(st.Results) != 1 {
		t.Errorf("after recovery: phase %q resultsConfigMap %q results %d", st.Phase, st.ResultsConfigMap, len(st.Results))
	}

	if failedPass.Phase == v1alpha1.PhaseSucceeded || failedPass.ResultsConfigMap != "" {
		t.Errorf("a pass whose gathering failed wrote phase %q, resultsConfigMap %q", failedPass.Phase, failedPass.ResultsConfigMap)
	}
	if slices.Contains(failedEvents, v1alpha1.ReasonCompleted) {
		t.Errorf("a pass whose gathering failed emitted %v", failedEvents)
	}
}

// An API error while looking for a Secret is not a missing Secret.
func TestReferenceLookupErrorIsNotNotFound(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "openai"}}
	ev := withUID(simpleEval("arith").APIKeySecret("openai", "k").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev, secret}, funcs: interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.Kind == "Secret" {
				return apierrors.NewServiceUnavailable("etcd is down")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}})
	if _, err := h.reconcile(ev); err == nil {
		t.Fatal("no error from a failed Secret lookup")
	}
	st := h.eval("arith").Status
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing); c != nil && c.Reason == v1alpha1.ReasonSecretNotFound {
		t.Errorf("Progressing = %+v: a failed lookup is not a missing Secret", c)
	}
}

// A failed pass leaves status as a clean pass would have found it: in
// particular the run it started is not recorded until its cleanup is done.
func TestFailedStartRunIsRetried(t *testing.T) {
	var failDelete atomic.Bool
	ev := withUID(simpleEval("arith").Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*batchv1.Job); ok && failDelete.Load() {
				return errInjected
			}
			return c.Delete(ctx, obj, opts...)
		},
	}})
	oldRun := cluster.RunID(ev)
	h.mustReconcile(ev)
	ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Prompt.Template = "Q: {{ .Input }}" })
	failDelete.Store(true)
	if _, err := h.reconcile(ev); err == nil || !strings.HasPrefix(err.Error(), "StartRun: ") {
		t.Fatalf("Reconcile error = %v, want StartRun: ...", err)
	}
	failDelete.Store(false)
	h.mustReconcile(ev)
	if _, ok := h.jobs()["arith-small-"+oldRun]; ok {
		t.Errorf("the Job of the old run %s is still there after the retried pass", oldRun)
	}
}

// partialJobCreation reconciles a two-model Evaluation whose second Job
// cannot be created on the first pass.
func partialJobCreation(t *testing.T) (*harness, *v1alpha1.Evaluation, *atomic.Bool) {
	t.Helper()
	failBig := &atomic.Bool{}
	failBig.Store(true)
	ev := withUID(simpleEval("arith").OpenAIModel("big", llmURL).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if j, ok := obj.(*batchv1.Job); ok && failBig.Load() && j.Labels[cluster.LabelModel] == "big" {
				return errInjected
			}
			return c.Create(ctx, obj, opts...)
		},
	}})
	if _, err := h.reconcile(ev); err == nil || !strings.HasPrefix(err.Error(), "EnsureJobs: creating Job arith-big-") {
		t.Fatalf("Reconcile error = %v, want EnsureJobs: creating Job arith-big-...", err)
	}
	return h, ev, failBig
}

// A pass that failed to create a Job must not report the run as Running.
func TestPartialJobCreationIsNotRunning(t *testing.T) {
	h, _, _ := partialJobCreation(t)
	if st := h.eval("arith").Status; st.Phase == v1alpha1.PhaseRunning {
		t.Errorf("phase = Running after a pass that failed to create a Job")
	}
}

// After a pass that created only some Jobs, the next one creates the rest; the
// Started event should still be sent once.
func TestPartialJobCreation(t *testing.T) {
	h, ev, failBig := partialJobCreation(t)
	failBig.Store(false)
	h.mustReconcile(ev)
	if n := len(h.jobs()); n != 2 {
		t.Errorf("Jobs = %d, want 2", n)
	}
	var started int
	for _, e := range h.rec.take() {
		if e.Reason == v1alpha1.ReasonStarted {
			started++
		}
	}
	if started != 1 {
		t.Errorf("%d Started events, want 1", started)
	}
}

// staleEvaluation reads an Evaluation as what stale holds, while it holds
// one: a cache that has not caught up.
func staleEvaluation(stale *atomic.Pointer[v1alpha1.Evaluation]) func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
	return func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if e, ok := obj.(*v1alpha1.Evaluation); ok {
			if s := stale.Load(); s != nil {
				s.DeepCopyInto(e)
				return nil
			}
		}
		return c.Get(ctx, key, obj, opts...)
	}
}

// TestStaleReadWritesNoStatus: a pass that read the Evaluation as it was
// before this manager's own last status write (the watch has not brought
// the write back yet) does not write status, which could only conflict
// after the API server had decoded the whole object; it looks again soon,
// and a pass that reads the Evaluation as it is writes as before.
func TestStaleReadWritesNoStatus(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	var stale atomic.Pointer[v1alpha1.Evaluation]
	var conflicts atomic.Int64
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: interceptor.Funcs{
		Get: staleEvaluation(&stale),
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			if apierrors.IsConflict(err) {
				conflicts.Add(1)
			}
			return err
		},
	}})
	before := h.eval("arith")
	h.mustReconcile(ev) // the run starts: Running is written
	if got := h.statusWrites(); got != 1 {
		t.Fatalf("writes = %d, want 1", got)
	}
	stale.Store(before) // the cache still has the Evaluation from before it
	res := h.mustReconcile(ev)
	if got, n := h.statusWrites(), conflicts.Load(); got != 1 || n != 0 {
		t.Errorf("a pass on the version its own write replaced: %d writes, %d conflicts; want 1 and none", got, n)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Errorf("RequeueAfter = %v, want at most a second", res.RequeueAfter)
	}
	stale.Store(nil)
	h.clock.Step(5 * time.Second)
	h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Concurrency = ptr.To[int32](3) }) // a new run: a status to write
	h.mustReconcile(ev)
	if got, n := h.statusWrites(), conflicts.Load(); got != 2 || n != 0 {
		t.Errorf("a pass on the current version: %d writes, %d conflicts; want 2 and none", got, n)
	}
}

// A pass on the version its own last status write replaced (the cache has
// not caught up) makes, deletes and writes nothing: on a run's second pass it
// took the run for new, deleted its results ConfigMap and made it again.
func TestStalePassRedoesNothing(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	var stale atomic.Pointer[v1alpha1.Evaluation]
	var changes atomic.Int64
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: interceptor.Funcs{
		Get: staleEvaluation(&stale),
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			changes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			changes.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
	}})
	before := h.eval("arith")
	h.mustReconcile(ev) // the run starts: its objects are made, Running is written
	stale.Store(before)
	changes.Store(0)
	res := h.mustReconcile(ev)
	if n := changes.Load(); n != 0 || h.statusWrites() != 1 {
		t.Errorf("a pass on the version its own write replaced: %d objects made or deleted, %d status writes; want none and the first", n, h.statusWrites())
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Errorf("RequeueAfter = %v, want at most a second", res.RequeueAfter)
	}
}
