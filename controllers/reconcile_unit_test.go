package controllers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/stats"
)

const llmURL = "http://llm.local/v1"

// simpleEval is one model on 10 inline samples, 5 per shard.
func simpleEval(name string) *testutil.EvaluationWrapper {
	return testutil.MakeEvaluation(name, testNS).InlineDataset("d", 10).OpenAIModel("small", llmURL).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(1)
}

func withUID(ev *v1alpha1.Evaluation) *v1alpha1.Evaluation {
	ev.UID = types.UID("uid-" + ev.Namespace + "-" + ev.Name) // as the builders give it
	return ev
}

func controllerOf(t *testing.T, obj client.Object, ev *v1alpha1.Evaluation) {
	t.Helper()
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "Evaluation" || ref.Name != ev.Name || ref.UID != ev.UID || ref.APIVersion != v1alpha1.GroupVersion.String() {
		t.Errorf("%T %s: controller reference = %+v, want Evaluation %s (%s)", obj, obj.GetName(), ref, ev.Name, ev.UID)
	}
}

// ignoreLTT ignores the condition timestamps where a test does not care.
var ignoreLTT = cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")

// standardConditions are the Ready, Reconciling and Stalled conditions of a run
// in state "ready", "stalled" or "reconciling", in the order they are set.
func standardConditions(state string, gen int64, ltt metav1.Time, reason, msg string) []metav1.Condition {
	c := func(t string, on bool, m string) metav1.Condition {
		s := metav1.ConditionFalse
		if on {
			s = metav1.ConditionTrue
		}
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: m, ObservedGeneration: gen, LastTransitionTime: ltt}
	}
	recMsg, stallMsg := "", ""
	switch state {
	case "reconciling":
		recMsg = msg
	case "stalled":
		stallMsg = msg
	}
	return []metav1.Condition{
		c(v1alpha1.ConditionReady, state == "ready", msg),
		c(v1alpha1.ConditionReconciling, state == "reconciling", recMsg),
		c(v1alpha1.ConditionStalled, state == "stalled", stallMsg),
	}
}

func TestReconcileNewInlineEvaluation(t *testing.T) {
	ev := testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).
		OpenAIModel("small", llmURL).OpenAIModel("big", llmURL).AnthropicModel("judge", "http://judge.local").
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(3).Obj()
	ev.Spec.Scoring = append(ev.Spec.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "judge"}})
	withUID(ev)
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run := cluster.RunID(ev)

	res := h.mustReconcile(ev)
	if res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter = %v, want 0 (nothing runs yet; watches bring the next pass)", res.RequeueAfter)
	}

	// The plan, counted by the controller itself.
	planCM, ok := h.configMaps()["arith-"+run+"-plan"]
	if !ok {
		t.Fatalf("no plan ConfigMap; have %v", keys(h.configMaps()))
	}
	var plan cluster.Plan
	if err := json.Unmarshal([]byte(planCM.Annotations[cluster.AnnotationPlan]), &plan); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cluster.Plan{ShardSize: 5, Totals: map[string]int{"d": 10}, StorageBytes: cluster.DefaultStorageBudget}, plan); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if got := planCM.Labels[cluster.LabelComponent]; got != cluster.ComponentPlan {
		t.Errorf("plan component label = %q", got)
	}
	controllerOf(t, planCM, ev)

	// Permissions.
	sa, role, rb := &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}
	for _, o := range []client.Object{sa, role, rb} {
		if !h.exists(o, "arith-runner") {
			t.Fatalf("%T arith-runner not created", o)
		}
		controllerOf(t, o, ev)
	}
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "arith-runner", Namespace: testNS}}
	if diff := cmp.Diff(wantSubjects, rb.Subjects); diff != "" {
		t.Errorf("RoleBinding subjects (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "arith-runner"}, rb.RoleRef); diff != "" {
		t.Errorf("RoleBinding roleRef (-want +got):\n%s", diff)
	}

	// One Job per evaluated model; none for the judge.
	jobs := h.jobs()
	if diff := cmp.Diff([]string{"arith-big-" + run, "arith-small-" + run}, keys(jobs)); diff != "" {
		t.Errorf("Jobs (-want +got):\n%s", diff)
	}
	for _, j := range jobs {
		controllerOf(t, j, ev)
		if got := *j.Spec.Completions; got != 2 {
			t.Errorf("%s completions = %d, want 2", j.Name, got)
		}
	}

	got := h.eval("arith").Status
	want := v1alpha1.EvaluationStatus{
		Phase: v1alpha1.PhaseRunning, Run: run, ObservedGeneration: 3,
		Conditions: append([]metav1.Condition{{
			Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRunning, Message: "shards are running",
			ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(t0),
		}}, standardConditions("reconciling", 3, metav1.NewTime(t0), v1alpha1.ReasonRunning, "shards are running")...),
		Progress:  &v1alpha1.Progress{Total: 20, Text: "0/20"},
		Shards:    &v1alpha1.ShardCounts{Total: 4},
		StartTime: &metav1.Time{Time: t0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	wantEvents := []recordedEvent{{Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonStarted, Action: v1alpha1.ReasonStarted, Note: "Started run " + run + ": 2 Job(s), 10 samples per model"}}
	if diff := cmp.Diff(wantEvents, h.rec.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestReconcileReferencesAndPlanning(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "openai"}, Data: map[string][]byte{"api-key": []byte("sk-test")}}
	qa := func(data map[string]string, binary map[string][]byte) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "qa"}, Data: data, BinaryData: binary}
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "data"}}
	urlDataset := v1alpha1.Dataset{Name: "web", Source: v1alpha1.DatasetSource{URL: "https://example.org/qa.jsonl"}}
	planCM := func(ev *v1alpha1.Evaluation, annotations map[string]string) *corev1.ConfigMap {
		cm := cluster.NewPlanConfigMap(ev, cluster.RunID(ev))
		cm.Annotations = annotations
		return cm
	}

	cases := []struct {
		name   string
		ev     *v1alpha1.Evaluation
		objs   func(ev *v1alpha1.Evaluation) []client.Object
		before func(h *harness, ev *v1alpha1.Evaluation) // after a first pass
		// wantPhase and the Progressing condition's reason; wantFailed also
		// expects the Failed condition.
		wantPhase     v1alpha1.Phase
		wantReason    string
		wantMessage   string
		wantFailed    bool
		wantRequeue   time.Duration
		wantJobs      map[string]int32 // model -> completions
		wantPlanner   bool
		wantNoPlanCM  bool
		wantNoPermsSA bool
	}{
		{
			name:          "missing Secret",
			ev:            simpleEval("e").APIKeySecret("openai", "api-key").Obj(),
			wantPhase:     v1alpha1.PhasePending,
			wantReason:    v1alpha1.ReasonSecretNotFound,
			wantMessage:   "Secret openai (spec.models[0].apiKey.secretKeyRef) not found",
			wantRequeue:   10 * time.Second,
			wantNoPlanCM:  true,
			wantNoPermsSA: true,
		},
		{
			name:      "Secret present",
			ev:        simpleEval("e").APIKeySecret("openai", "api-key").Obj(),
			objs:      func(*v1alpha1.Evaluation) []client.Object { return []client.Object{secret} },
			wantPhase: v1alpha1.PhaseRunning, wantReason: v1alpha1.ReasonRunning, wantMessage: "shards are running",
			wantJobs: map[string]int32{"small": 2},
		},
		{
			name: "a key is needed but no Secret is named",
			// OpenAI's own API (the default base URL) always needs a key.
			ev:            testutil.MakeEvaluation("e", testNS).InlineDataset("d", 3).OpenAIModel("small", "").Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			wantPhase:     v1alpha1.PhaseFailed,
			wantReason:    v1alpha1.ReasonInvalidSpec,
			wantFailed:    true,
			wantMessage:   `spec.models[0].apiKey.secretKeyRef: model "small" needs an API key, which a cluster reads from a Secret`,
			wantNoPlanCM:  true,
			wantNoPermsSA: true,
		},
		{
			name: "a file dataset",
			ev: testutil.MakeEvaluation("e", testNS).Dataset(v1alpha1.Dataset{Name: "local", Source: v1alpha1.DatasetSource{File: "./data.jsonl"}}).
				OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			wantPhase:     v1alpha1.PhaseFailed,
			wantReason:    v1alpha1.ReasonInvalidSpec,
			wantFailed:    true,
			wantMessage:   "spec.datasets[0].source.file: a local file cannot be read in a cluster; use configMap, url or pvc",
			wantNoPlanCM:  true,
			wantNoPermsSA: true,
		},
		{
			name:          "a missing ConfigMap",
			ev:            testutil.MakeEvaluation("e", testNS).ConfigMapDataset("qa", "qa", "data.jsonl").OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			wantPhase:     v1alpha1.PhasePending,
			wantReason:    v1alpha1.ReasonConfigMapNotFound,
			wantMessage:   "ConfigMap qa (spec.datasets[0].source.configMap) not found",
			wantRequeue:   10 * time.Second,
			wantNoPlanCM:  true,
			wantNoPermsSA: true,
		},
		{
			name: "a ConfigMap without the key",
			ev:   testutil.MakeEvaluation("e", testNS).ConfigMapDataset("qa", "qa", "data.jsonl").OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			objs: func(*v1alpha1.Evaluation) []client.Object {
				return []client.Object{qa(map[string]string{"other.jsonl": "{}\n"}, nil)}
			},
			wantPhase:     v1alpha1.PhasePending,
			wantReason:    v1alpha1.ReasonConfigMapNotFound,
			wantMessage:   "ConfigMap qa has no key data.jsonl (spec.datasets[0].source.configMap.key)",
			wantRequeue:   10 * time.Second,
			wantNoPlanCM:  true,
			wantNoPermsSA: true,
		},
		{
			name: "a ConfigMap dataset is counted by the controller",
			ev:   testutil.MakeEvaluation("e", testNS).ConfigMapDataset("qa", "qa", "data.jsonl").OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).ShardSize(2).Generation(1).Obj(),
			objs: func(*v1alpha1.Evaluation) []client.Object {
				return []client.Object{qa(map[string]string{"data.jsonl": `{"input":"a"}` + "\n" + `{"input":"b"}` + "\n" + `{"input":"c"}` + "\n"}, nil)}
			},
			wantPhase: v1alpha1.PhaseRunning, wantReason: v1alpha1.ReasonRunning, wantMessage: "shards are running",
			wantJobs: map[string]int32{"small": 2},
		},
		{
			name: "a ConfigMap dataset in binaryData",
			ev:   testutil.MakeEvaluation("e", testNS).ConfigMapDataset("qa", "qa", "data.csv").OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).ShardSize(1).Generation(1).Obj(),
			objs: func(*v1alpha1.Evaluation) []client.Object {
				return []client.Object{qa(nil, map[string][]byte{"data.csv": []byte("id,input\n1,a\n2,b\n3,c\n")})}
			},
			wantPhase: v1alpha1.PhaseRunning, wantReason: v1alpha1.ReasonRunning, wantMessage: "shards are running",
			wantJobs: map[string]int32{"small": 3},
		},
		{
			name: "a malformed ConfigMap dataset",
			ev:   testutil.MakeEvaluation("e", testNS).ConfigMapDataset("qa", "qa", "data.json").OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			objs: func(*v1alpha1.Evaluation) []client.Object {
				return []client.Object{qa(map[string]string{"data.json": `[{"input": "a"}, {not json}]`}, nil)}
			},
			wantPhase:     v1alpha1.PhaseFailed,
			wantReason:    v1alpha1.ReasonPlanningFailed,
			wantFailed:    true,
			wantMessage:   "spec.datasets[0]: ConfigMap qa key data.json: element 2: invalid JSON",
			wantNoPlanCM:  true,
			wantNoPermsSA: true,
		},
		{
			name:          "a missing PVC",
			ev:            testutil.MakeEvaluation("e", testNS).Dataset(v1alpha1.Dataset{Name: "p", Source: v1alpha1.DatasetSource{PVC: &v1alpha1.PVCSource{ClaimName: "data", Path: "qa.jsonl"}}}).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			wantPhase:     v1alpha1.PhasePending,
			wantReason:    v1alpha1.ReasonPVCNotFound,
			wantMessage:   "PersistentVolumeClaim data (spec.datasets[0].source.pvc) not found",
			wantRequeue:   10 * time.Second,
			wantNoPlanCM:  true,
			wantNoPermsSA: true,
		},
		{
			name:        "a PVC dataset is counted by the planner",
			ev:          testutil.MakeEvaluation("e", testNS).Dataset(v1alpha1.Dataset{Name: "p", Source: v1alpha1.DatasetSource{PVC: &v1alpha1.PVCSource{ClaimName: "data", Path: "qa.jsonl"}}}).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			objs:        func(*v1alpha1.Evaluation) []client.Object { return []client.Object{pvc} },
			wantPhase:   v1alpha1.PhasePending,
			wantReason:  v1alpha1.ReasonPlanning,
			wantMessage: "counting the samples of url and pvc datasets",
			wantPlanner: true, // and the empty plan ConfigMap it fills in
		},
		{
			name:        "a url dataset is counted by the planner",
			ev:          testutil.MakeEvaluation("e", testNS).InlineDataset("d", 3).Dataset(urlDataset).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			wantPhase:   v1alpha1.PhasePending,
			wantReason:  v1alpha1.ReasonPlanning,
			wantMessage: "counting the samples of url and pvc datasets",
			wantPlanner: true, // and the empty plan ConfigMap it fills in
		},
		{
			name: "the planner's plan",
			ev:   testutil.MakeEvaluation("e", testNS).Dataset(urlDataset).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			objs: func(ev *v1alpha1.Evaluation) []client.Object {
				return []client.Object{planCM(ev, map[string]string{cluster.AnnotationPlan: `{"shardSize":100,"totals":{"web":250}}`})}
			},
			wantPhase: v1alpha1.PhaseRunning, wantReason: v1alpha1.ReasonRunning, wantMessage: "shards are running",
			wantJobs: map[string]int32{"small": 3},
		},
		{
			name: "the planner's error",
			ev:   testutil.MakeEvaluation("e", testNS).Dataset(urlDataset).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			objs: func(ev *v1alpha1.Evaluation) []client.Object {
				return []client.Object{planCM(ev, map[string]string{cluster.AnnotationPlanError: "web: sha256 mismatch"})}
			},
			wantPhase:     v1alpha1.PhaseFailed,
			wantReason:    v1alpha1.ReasonPlanningFailed,
			wantFailed:    true,
			wantMessage:   "planning failed: web: sha256 mismatch",
			wantNoPermsSA: true,
		},
		{
			name: "the planner Job failed",
			ev:   testutil.MakeEvaluation("e", testNS).Dataset(urlDataset).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			before: func(h *harness, ev *v1alpha1.Evaluation) {
				h.setJobStatus(cluster.PlannerJobName(ev.Name, cluster.RunID(ev)), batchv1.JobStatus{Conditions: []batchv1.JobCondition{jobCondition(batchv1.JobFailed)}})
			},
			wantPhase:   v1alpha1.PhaseFailed,
			wantReason:  v1alpha1.ReasonPlanningFailed,
			wantFailed:  true,
			wantMessage: "the planner Job e-",
			wantPlanner: true, // and the empty plan ConfigMap it fills in
		},
		{
			// The cache holds the Job's end before the planner's update of the
			// plan ConfigMap: the error is read from the API server.
			name: "the planner Job failed, its error not yet in the cache",
			ev:   testutil.MakeEvaluation("e", testNS).Dataset(urlDataset).OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj(),
			before: func(h *harness, ev *v1alpha1.Evaluation) {
				h.setJobStatus(cluster.PlannerJobName(ev.Name, cluster.RunID(ev)), batchv1.JobStatus{Conditions: []batchv1.JobCondition{jobCondition(batchv1.JobFailed)}})
				h.r.APIReader = interceptor.NewClient(h.c, interceptor.Funcs{
					Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						if err := c.Get(ctx, key, obj, opts...); err != nil {
							return err
						}
						if key.Name == cluster.PlanName(ev.Name, cluster.RunID(ev)) {
							obj.SetAnnotations(map[string]string{cluster.AnnotationPlanError: "spec.models[0]: template: bad"})
						}
						return nil
					},
				})
			},
			wantPhase:   v1alpha1.PhaseFailed,
			wantReason:  v1alpha1.ReasonPlanningFailed,
			wantFailed:  true,
			wantMessage: "planning failed: spec.models[0]: template: bad",
			wantPlanner: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := withUID(tc.ev)
			objs := []client.Object{ev}
			if tc.objs != nil {
				objs = append(objs, tc.objs(ev)...)
			}
			h := newHarness(t, harnessOpts{objs: objs})
			if tc.before != nil {
				h.mustReconcile(ev)
				tc.before(h, ev)
			}
			res := h.mustReconcile(ev)
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("RequeueAfter = %v, want %v", res.RequeueAfter, tc.wantRequeue)
			}
			st := h.eval(ev.Name).Status
			if st.Phase != tc.wantPhase {
				t.Errorf("phase = %q, want %q (message %q)", st.Phase, tc.wantPhase, st.Message)
			}
			prog := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgressing)
			if prog == nil {
				t.Fatalf("no Progressing condition in %+v", st.Conditions)
			}
			if prog.Reason != tc.wantReason || !strings.HasPrefix(prog.Message, tc.wantMessage) {
				t.Errorf("Progressing = %s/%q, want %s/%q...", prog.Reason, prog.Message, tc.wantReason, tc.wantMessage)
			}
			if prog.ObservedGeneration != ev.Generation || st.ObservedGeneration != ev.Generation {
				t.Errorf("observedGeneration: condition %d, status %d, want %d", prog.ObservedGeneration, st.ObservedGeneration, ev.Generation)
			}
			failed := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFailed)
			if tc.wantFailed {
				if failed == nil || failed.Status != metav1.ConditionTrue || failed.Reason != tc.wantReason {
					t.Errorf("Failed condition = %+v, want True/%s", failed, tc.wantReason)
				}
				if st.CompletionTime == nil {
					t.Errorf("a failed Evaluation has no completionTime")
				}
				if !strings.HasPrefix(st.Message, tc.wantMessage) {
					t.Errorf("message = %q, want %q...", st.Message, tc.wantMessage)
				}
			} else if failed != nil {
				t.Errorf("unexpected Failed condition %+v", failed)
			}

			run := cluster.RunID(ev)
			gotJobs := map[string]int32{}
			planner := false
			for _, j := range h.jobs() {
				switch j.Labels[cluster.LabelComponent] {
				case cluster.ComponentRunner:
					gotJobs[j.Labels[cluster.LabelModel]] = *j.Spec.Completions
				case cluster.ComponentPlanner:
					planner = true
					if j.Name != cluster.PlannerJobName(ev.Name, run) {
						t.Errorf("planner Job name = %q", j.Name)
					}
					controllerOf(t, j, ev)
				}
			}
			if len(tc.wantJobs) == 0 {
				tc.wantJobs = map[string]int32{}
			}
			if diff := cmp.Diff(tc.wantJobs, gotJobs); diff != "" {
				t.Errorf("shard Jobs by model, completions (-want +got):\n%s", diff)
			}
			if planner != tc.wantPlanner {
				t.Errorf("planner Job exists = %v, want %v", planner, tc.wantPlanner)
			}
			_, hasPlan := h.configMaps()[cluster.PlanName(ev.Name, run)]
			if hasPlan == tc.wantNoPlanCM {
				t.Errorf("plan ConfigMap exists = %v, want %v", hasPlan, !tc.wantNoPlanCM)
			}
			if got := h.exists(&corev1.ServiceAccount{}, cluster.RunnerName(ev.Name)); got == tc.wantNoPermsSA {
				t.Errorf("runner ServiceAccount exists = %v, want %v", got, !tc.wantNoPermsSA)
			}
		})
	}
}

func TestReconcileRunnerServiceAccountOverride(t *testing.T) {
	ev := withUID(simpleEval("arith").Obj())
	ev.Spec.Runner = &v1alpha1.Runner{ServiceAccountName: "team-sa"}
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	if h.exists(&corev1.ServiceAccount{}, "arith-runner") {
		t.Errorf("a ServiceAccount was created although spec.runner.serviceAccountName is set")
	}
	rb := &rbacv1.RoleBinding{}
	if !h.exists(rb, "arith-runner") {
		t.Fatal("no RoleBinding")
	}
	if diff := cmp.Diff([]rbacv1.Subject{{Kind: "ServiceAccount", Name: "team-sa", Namespace: testNS}}, rb.Subjects); diff != "" {
		t.Errorf("RoleBinding subjects (-want +got):\n%s", diff)
	}
	for _, j := range h.jobs() {
		if got := j.Spec.Template.Spec.ServiceAccountName; got != "team-sa" {
			t.Errorf("%s runs as %q, want team-sa", j.Name, got)
		}
	}
}

func TestReconcileSuspend(t *testing.T) {
	ev := withUID(simpleEval("arith").Suspend(true).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	jobs := h.jobs()
	if len(jobs) != 1 {
		t.Fatalf("jobs = %v, want 1", keys(jobs))
	}
	for _, j := range jobs {
		if !ptr.Deref(j.Spec.Suspend, false) {
			t.Errorf("%s created unsuspended", j.Name)
		}
	}
	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhaseSuspended {
		t.Errorf("phase = %q, want Suspended", st.Phase)
	}
	wantConds := []metav1.Condition{
		{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSuspended, Message: "spec.suspend is true; finished samples are kept", ObservedGeneration: 1},
		{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSuspended, Message: "spec.suspend is true", ObservedGeneration: 1},
	}
	wantConds = append(wantConds, standardConditions("reconciling", 1, metav1.Time{}, v1alpha1.ReasonSuspended, "spec.suspend is true; finished samples are kept")...)
	if diff := cmp.Diff(wantConds, st.Conditions, ignoreLTT); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

func TestReconcileLiveEditsUpdateJobsInPlace(t *testing.T) {
	// 10 shards, 4 at once: 4 workers.
	ev := withUID(simpleEval("arith").ShardSize(1).Parallelism(4).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run := cluster.RunID(ev)
	jobName := "arith-small-" + run
	h.mustReconcile(ev)
	h.rec.take()
	uid := h.jobs()[jobName].UID

	steps := []struct {
		name            string
		edit            func(*v1alpha1.EvaluationSpec)
		wantSuspend     bool
		wantParallelism int32
		wantPhase       v1alpha1.Phase
		wantSuspendCond bool
	}{
		{
			name:        "suspend and lower parallelism",
			edit:        func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptr.To(true); s.Parallelism = ptr.To[int32](2) },
			wantSuspend: true, wantParallelism: 2, wantPhase: v1alpha1.PhaseSuspended, wantSuspendCond: true,
		},
		{
			name:        "a rate limit edit changes nothing in the Job",
			edit:        func(s *v1alpha1.EvaluationSpec) { s.Models[0].RateLimit = &v1alpha1.RateLimit{RequestsPerMinute: 60} },
			wantSuspend: true, wantParallelism: 2, wantPhase: v1alpha1.PhaseSuspended, wantSuspendCond: true,
		},
		{
			// The run's workers are fixed when it starts: no more pods than them.
			name:        "resume and raise parallelism",
			edit:        func(s *v1alpha1.EvaluationSpec) { s.Suspend = ptr.To(false); s.Parallelism = ptr.To[int32](8) },
			wantSuspend: false, wantParallelism: 4, wantPhase: v1alpha1.PhaseRunning,
		},
	}
	for _, s := range steps {
		ev := h.editSpec("arith", s.edit)
		h.mustReconcile(ev)
		jobs := h.jobs()
		j, ok := jobs[jobName]
		if !ok || len(jobs) != 1 {
			t.Fatalf("%s: Jobs = %v, want only %s", s.name, keys(jobs), jobName)
		}
		if j.UID != uid {
			t.Errorf("%s: the Job was recreated", s.name)
		}
		if got := ptr.Deref(j.Spec.Suspend, false); got != s.wantSuspend {
			t.Errorf("%s: Job suspend = %v, want %v", s.name, got, s.wantSuspend)
		}
		if got := *j.Spec.Parallelism; got != s.wantParallelism {
			t.Errorf("%s: Job parallelism = %d, want %d", s.name, got, s.wantParallelism)
		}
		st := h.eval("arith").Status
		if st.Run != run {
			t.Errorf("%s: run = %q, want unchanged %q", s.name, st.Run, run)
		}
		if st.Phase != s.wantPhase {
			t.Errorf("%s: phase = %q, want %q", s.name, st.Phase, s.wantPhase)
		}
		if got := meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionSuspended); got != s.wantSuspendCond {
			t.Errorf("%s: Suspended condition = %v, want %v", s.name, got, s.wantSuspendCond)
		}
		if s.wantSuspendCond == false && meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSuspended) != nil {
			t.Errorf("%s: the Suspended condition was not removed", s.name)
		}
		if r := reasons(h.rec.take()); len(r) != 0 {
			t.Errorf("%s: events %v, want none", s.name, r)
		}
	}
}

// TestReconcileSpecEditStartsNewRun: a spec edit starts a new run; the old
// run's records are kept as the new run's cache with the cache on, and as
// answers to score again when the edit left the model's answers as they
// were (the scoring alone changed), cache or not.
func TestReconcileSpecEditStartsNewRun(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cache, scoring bool
	}{
		{"prompt, cache off", false, false},
		{"prompt, cache on", true, false},
		{"scoring, cache off", false, true},
		{"scoring, cache on", true, true},
	} {
		cache := tc.cache
		kept := tc.cache || tc.scoring
		t.Run(tc.name, func(t *testing.T) {
			ev := withUID(simpleEval("arith").RateLimit(600).Obj())
			ev.Spec.Cache.Enabled = cache
			h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
			oldRun := cluster.RunID(ev)
			h.mustReconcile(ev)
			h.rec.take()

			// What the old run's shards left, and an older results ConfigMap.
			s0 := cluster.Shard{Model: "small", Dataset: "d", Index: 0, Start: 0, End: 5}
			oldHead := headCM(t, "arith", oldRun, s0, cluster.ShardProgress{State: cluster.StateRunning, Total: 5, Done: 2}, recsOf("small", "d", 0, 1), 0, 1)
			oldChunk := chunkCM(t, "arith", oldRun, s0, 0, recsOf("small", "d", 2), 2)
			// As the controller labels them (NewHead, NewChunkSlot).
			oldHead.Labels[cluster.LabelAnswers] = cluster.AnswersHash(&ev.Spec, "small")
			oldChunk.Labels[cluster.LabelAnswers] = cluster.AnswersHash(&ev.Spec, "small")
			results := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "arith-results", Labels: cluster.Labels("arith", oldRun, cluster.ComponentResults)}}
			h.create(oldHead, oldChunk, results)
			budget, ok := h.configMaps()["arith-budget"]
			if !ok {
				t.Fatalf("no budget ConfigMap for a rate-limited model")
			}
			budget.Annotations[cluster.AnnotationBudget] = `{"version":7,"models":{"small":{"limits":{"requestsPerMinute":600},"grants":{"small/0":{"share":{"requestsPerMinute":600},"since":7,"previous":{},"acked":7}}}}}`
			if err := h.c.Update(h.ctx, budget); err != nil {
				t.Fatal(err)
			}
			h.clock.Step(time.Minute)

			ev = h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) {
				if tc.scoring {
					s.Scoring[0].Normalize = []v1alpha1.Normalizer{"lowercase"}
				} else {
					s.Prompt.Template = "Q: {{ .Input }}"
				}
			})
			newRun := cluster.RunID(ev)
			if newRun == oldRun {
				t.Fatal("the edit kept the run")
			}
			h.mustReconcile(ev)

			jobs := h.jobs()
			if diff := cmp.Diff([]string{"arith-small-" + newRun}, keys(jobs)); diff != "" {
				t.Errorf("Jobs (-want +got):\n%s", diff)
			}
			cms := h.configMaps()
			if _, ok := cms["arith-"+oldRun+"-plan"]; ok {
				t.Errorf("the old run's plan was kept")
			}
			if res, ok := cms["arith-results"]; !ok || len(res.Data)+len(res.BinaryData) > 0 || res.Annotations[cluster.AnnotationRun] != newRun {
				t.Errorf("the old results were kept, or the new run's results ConfigMap was not made: %+v", res)
			}
			// The budget starts over (it was deleted and made again): no grants.
			if b, ok := cms["arith-budget"]; !ok {
				t.Errorf("no budget for the new run")
			} else if got, want := b.Annotations[cluster.AnnotationBudget], `{"version":1,"models":{"small":{"limits":{"requestsPerMinute":600}}}}`; got != want {
				t.Errorf("budget = %s, want %s", got, want)
			}
			_, headKept := cms[oldHead.Name]
			_, chunkKept := cms[oldChunk.Name]
			if headKept != kept || chunkKept != kept {
				t.Errorf("old records kept: head %v, chunk %v; want %v", headKept, chunkKept, kept)
			}
			sources, hasSources := cms[cluster.CacheSourcesName("arith", newRun)]
			if hasSources != kept {
				t.Errorf("cache sources ConfigMap exists = %v, want %v", hasSources, kept)
			}
			if kept && hasSources {
				var got []cluster.CacheSource
				if err := json.Unmarshal([]byte(sources.Data[cluster.KeySources]), &got); err != nil {
					t.Fatal(err)
				}
				want := []cluster.CacheSource{
					{Model: "small", Dataset: "d", Name: oldHead.Name, Answers: tc.scoring},
					{Model: "small", Dataset: "d", Name: oldChunk.Name, Answers: tc.scoring},
					// The other shard's head, which the controller made.
					{Model: "small", Dataset: "d", Name: cluster.HeadName("arith", oldRun, "small", 1), Answers: tc.scoring},
				}
				if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b cluster.CacheSource) bool { return a.Name < b.Name })); diff != "" {
					t.Errorf("cache sources (-want +got):\n%s", diff)
				}
				if got := sources.Labels[cluster.LabelComponent]; got != cluster.ComponentCache {
					t.Errorf("cache sources component = %q", got)
				}
				controllerOf(t, sources, ev)
				// The runners may read them.
				role := &rbacv1.Role{}
				h.exists(role, "arith-runner")
				readable := map[string]bool{}
				for _, rule := range role.Rules {
					for _, n := range rule.ResourceNames {
						readable[n] = true
					}
				}
				for _, n := range []string{sources.Name, oldHead.Name, oldChunk.Name} {
					if !readable[n] {
						t.Errorf("the runner Role cannot read %s", n)
					}
				}
			}

			st := h.eval("arith").Status
			want := v1alpha1.EvaluationStatus{
				Phase: v1alpha1.PhaseRunning, Run: newRun, ObservedGeneration: 2,
				Conditions: append([]metav1.Condition{{
					Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRunning, Message: "shards are running",
					ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(t0.Add(time.Minute)),
				}}, standardConditions("reconciling", 2, metav1.NewTime(t0.Add(time.Minute)), v1alpha1.ReasonRunning, "shards are running")...),
				Progress:  &v1alpha1.Progress{Total: 10, Text: "0/10"},
				Shards:    &v1alpha1.ShardCounts{Total: 2},
				StartTime: &metav1.Time{Time: t0.Add(time.Minute)},
			}
			if diff := cmp.Diff(want, st); diff != "" {
				t.Errorf("status after the edit (-want +got):\n%s", diff)
			}
			events := h.rec.take()
			wantReasons := []string{v1alpha1.ReasonNewRun, v1alpha1.ReasonStarted}
			if tc.scoring {
				wantReasons = []string{v1alpha1.ReasonNewRun, v1alpha1.ReasonRescoring, v1alpha1.ReasonStarted}
			}
			if diff := cmp.Diff(wantReasons, reasons(events)); diff != "" {
				t.Errorf("event reasons (-want +got):\n%s", diff)
			} else if want := "The spec changed: starting run " + newRun + " (was " + oldRun + ")"; events[0].Note != want {
				t.Errorf("NewRun note = %q, want %q", events[0].Note, want)
			} else if tc.scoring && !strings.Contains(events[1].Note, "Only the scoring changed for model(s) small") {
				t.Errorf("Rescoring note = %q", events[1].Note)
			}
		})
	}
}

// finishedRun sets up a run of arith (one model "small" unless models says
// otherwise, 10 samples of d, 5 per shard) whose Jobs were created.
func finishedRun(t *testing.T, models ...string) (*harness, *v1alpha1.Evaluation, string) {
	t.Helper()
	w := testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10)
	if len(models) == 0 {
		models = []string{"small"}
	}
	for _, m := range models {
		w.OpenAIModel(m, llmURL)
	}
	ev := withUID(w.Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	h.rec.take()
	return h, ev, cluster.RunID(ev)
}

func shardOf(model string, index int) cluster.Shard {
	return cluster.Shard{Model: model, Dataset: "d", Index: index, Start: 5 * index, End: 5*index + 5}
}

// storeModelRecords stores every sample of model: sample 7 errored, samples 2
// and 8 stored twice (in a head and a chunk, in two chunks).
func storeModelRecords(t *testing.T, h *harness, run, model string) {
	t.Helper()
	recs := recsOf(model, "d", 0, 1, 2, 3, 4, 5, 6, 8, 9)
	recs[7] = erroredRec(model, "d", 7)
	h.create(
		headCM(t, "arith", run, shardOf(model, 0), cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5, Scores: map[string]float64{"exact_match": 3}}, recs, 0, 1, 2),
		chunkCM(t, "arith", run, shardOf(model, 0), 0, recs, 2, 3, 4),
		headCM(t, "arith", run, shardOf(model, 1), cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5, Errored: 1, Scores: map[string]float64{"exact_match": 2}}, recs),
		chunkCM(t, "arith", run, shardOf(model, 1), 0, recs, 5, 6, 7, 8),
		chunkCM(t, "arith", run, shardOf(model, 1), 1, recs, 9, 8),
	)
}

func TestReconcileSucceeded(t *testing.T) {
	h, ev, run := finishedRun(t)
	storeModelRecords(t, h, run, "small")
	// Records of another run are not this run's, and go at the end.
	stale := chunkCM(t, "arith", "0ldrun00", shardOf("small", 0), 0, map[int]results.Record{0: erroredRec("small", "d", 0)}, 0)
	h.create(stale)
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	h.clock.Step(time.Minute)

	h.mustReconcile(ev)

	st := h.eval("arith").Status
	done := metav1.NewTime(t0.Add(time.Minute))
	want := v1alpha1.EvaluationStatus{
		Phase: v1alpha1.PhaseSucceeded, Run: run, ObservedGeneration: 1,
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCompleted, Message: "every sample was evaluated", ObservedGeneration: 1, LastTransitionTime: done},
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSucceeded, Message: "every sample was evaluated", ObservedGeneration: 1, LastTransitionTime: done},
			{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSucceeded, ObservedGeneration: 1, LastTransitionTime: done},
			// Stalled was False from the start.
			{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSucceeded, ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(t0)},
			{Type: v1alpha1.ConditionComplete, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCompleted, Message: "every sample was evaluated", ObservedGeneration: 1, LastTransitionTime: done},
			{Type: v1alpha1.ConditionFailed, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCompleted, ObservedGeneration: 1, LastTransitionTime: done},
		},
		Progress: &v1alpha1.Progress{Total: 10, Completed: 10, Errored: 1, Text: "10/10"},
		Shards:   &v1alpha1.ShardCounts{Total: 2, Succeeded: 2},
		Results: []v1alpha1.ModelResult{{
			Model: "small", Dataset: "d", Total: 10, Completed: 10, Errored: 1,
			Metrics: map[string]string{"exact_match": "0.5000"},
			// 5 of 10 (one errored): Wilson's 95% interval.
			Intervals:     []v1alpha1.MetricInterval{{Metric: "exact_match", Lo: "0.2366", Hi: "0.7634"}},
			LatencyMillis: &v1alpha1.LatencySummary{P50: 140, P95: 190},
			Tokens:        &v1alpha1.TokenUsage{Input: 100, Output: 18, JudgeInput: 63, JudgeOutput: 9},
			Cost:          &v1alpha1.CostSummary{Model: v1alpha1.CostUnknown, Judge: v1alpha1.CostUnknown},
		}},
		Score:            "0.5000",
		ResultsConfigMap: "arith-results",
		StartTime:        &metav1.Time{Time: t0},
		CompletionTime:   &done,
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}

	cm, ok := h.configMaps()["arith-results"]
	if !ok {
		t.Fatal("no arith-results ConfigMap")
	}
	controllerOf(t, cm, ev)
	if cm.Annotations[cluster.AnnotationRun] != run || cm.Labels[cluster.LabelComponent] != cluster.ComponentResults {
		t.Errorf("results ConfigMap metadata: labels %v annotations %v", cm.Labels, cm.Annotations)
	}
	if _, ok := cm.Data[cluster.ResultsKeyChunks]; ok {
		t.Errorf("small results listed as chunks instead of embedded")
	}
	summary := cm.Data[cluster.ResultsKeySummary]
	if !strings.HasSuffix(summary, "\n") {
		t.Errorf("summary.json does not end with a newline")
	}
	var gotSummary struct {
		Results []results.Summary `json:"results"`
	}
	if err := json.Unmarshal([]byte(summary), &gotSummary); err != nil {
		t.Fatal(err)
	}
	wantSummary := []results.Summary{{
		Model: "small", Dataset: "d", Total: 10, Completed: 10, Errored: 1,
		Metrics:       map[string]float64{"exact_match": 0.5},
		Intervals:     map[string]stats.Interval{"exact_match": {Lo: 0.236593091, Hi: 0.763406909}},
		LatencyMillis: results.Latency{P50: 140, P95: 190},
		Tokens:        results.Tokens{Input: 100, Output: 18, JudgeInput: 63, JudgeOutput: 9},
		// Neither model has pricing: both costs are unknown (null), not 0.
		Cost: results.Cost{Judged: true},
	}}
	if !strings.Contains(summary, `"model": null,`) || !strings.Contains(summary, `"judge": null`) {
		t.Errorf("summary.json does not show unknown costs as null: %s", summary)
	}
	if diff := cmp.Diff(wantSummary, gotSummary.Results, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("summary.json (-want +got):\n%s", diff)
	}

	var gotRecs []results.Record
	for _, line := range bytes.Split(bytes.TrimSuffix(gunzip(t, cm.BinaryData[cluster.ResultsKeyRecords]), []byte("\n")), []byte("\n")) {
		var r results.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("results.jsonl.gz line %q: %v", line, err)
		}
		gotRecs = append(gotRecs, r)
	}
	var wantRecs []results.Record
	for i := range 10 {
		if i == 7 {
			wantRecs = append(wantRecs, erroredRec("small", "d", 7))
		} else {
			wantRecs = append(wantRecs, rec("small", "d", i))
		}
	}
	if diff := cmp.Diff(wantRecs, gotRecs); diff != "" {
		t.Errorf("results.jsonl.gz: one record per sample, in sample order (-want +got):\n%s", diff)
	}

	// What the run ended with goes once status says so (tidyEnded): the
	// pass that ended it does not keep the user waiting for it.
	if _, ok := h.configMaps()[stale.Name]; !ok {
		t.Errorf("records of another run were deleted before status said the run ended")
	}
	wantEvents := []recordedEvent{{Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonCompleted, Action: v1alpha1.ReasonCompleted, Note: "Every sample was evaluated: 10/10"}}
	if diff := cmp.Diff(wantEvents, h.rec.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Finished is finished: nothing is gathered or written again.
	writes := h.statusWrites()
	h.clock.Step(time.Minute)
	if res := h.mustReconcile(ev); res.RequeueAfter != 0 {
		t.Errorf("a pass after success requeued after %s", res.RequeueAfter)
	}
	if got := h.statusWrites(); got != writes {
		t.Errorf("a pass after success wrote status %d more time(s)", got-writes)
	}
	if r := reasons(h.rec.take()); len(r) != 0 {
		t.Errorf("a pass after success emitted %v", r)
	}
	if _, ok := h.configMaps()[stale.Name]; ok {
		t.Errorf("records of another run were kept after the run finished")
	}
}

// What a run ended with (here, records an earlier run left) goes on the pass
// after the one that ended it; once per manager, and only soon after the
// end: a manager started much later does not read every ended run again.
func TestTidyEnded(t *testing.T) {
	h, ev, run := finishedRun(t)
	storeModelRecords(t, h, run, "small")
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	h.clock.Step(time.Minute)
	h.mustReconcile(ev)
	if got := h.eval("arith").Status.Phase; got != v1alpha1.PhaseSucceeded {
		t.Fatalf("phase %q, want Succeeded", got)
	}
	earlier := func(run string) *corev1.ConfigMap {
		cm := chunkCM(t, "arith", run, shardOf("small", 0), 0, map[int]results.Record{0: erroredRec("small", "d", 0)}, 0)
		h.create(cm)
		return cm
	}
	for i, step := range []struct {
		name      string
		restarted bool
		after     time.Duration
		wantGone  bool
	}{
		{name: "the pass after the end", wantGone: true},
		{name: "a later pass of the same manager", after: time.Second},
		{name: "a manager started soon after the end", restarted: true, after: time.Second, wantGone: true},
		{name: "a manager started long after the end", restarted: true, after: tidyWithin},
	} {
		cm := earlier("0ldrun0" + string(rune('1'+i)))
		if step.restarted {
			h.r.tidied = newNameSet()
		}
		h.clock.Step(step.after)
		h.mustReconcile(ev)
		if _, kept := h.configMaps()[cm.Name]; kept == step.wantGone {
			t.Errorf("%s: records of an earlier run kept %v, want %v", step.name, kept, !step.wantGone)
		}
	}
}

// A run ends when its last head says its shard succeeded, not seconds later
// when the Job controller says its Job completed; its pods get windDown to
// exit (after a last metrics scrape) before they are stopped.
func TestReconcileSucceededOnItsHeads(t *testing.T) {
	h, ev, run := finishedRun(t)
	storeModelRecords(t, h, run, "small")
	job := "arith-small-" + run
	h.setJobStatus(job, batchv1.JobStatus{Active: 1, CompletedIndexes: "0"})

	h.mustReconcile(ev)

	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhaseSucceeded || st.ResultsConfigMap != "arith-results" || st.Score != "0.5000" {
		t.Fatalf("phase %q results %q score %q, want Succeeded with its results", st.Phase, st.ResultsConfigMap, st.Score)
	}
	for _, step := range []struct {
		after       time.Duration
		wantSuspend bool
	}{
		{0, false},
		{windDown - time.Second, false},
		// Its pod did not exit: the Job is stopped.
		{2 * time.Second, true},
	} {
		h.clock.Step(step.after)
		h.mustReconcile(ev)
		if got := ptr.Deref(h.jobs()[job].Spec.Suspend, false); got != step.wantSuspend {
			t.Errorf("%s after it succeeded: Job suspended %v, want %v", h.clock.Since(st.CompletionTime.Time), got, step.wantSuspend)
		}
	}
	if got := h.eval("arith").Status.Phase; got != v1alpha1.PhaseSucceeded {
		t.Errorf("phase %q after its Job was stopped, want Succeeded", got)
	}
}

// A pass that read a stale Evaluation (the cache has not caught up with the
// last status write) does not gather the run's records only for its status
// write to conflict: it waits for the watch to bring the current one.
func TestReconcileStaleReadGathersNothing(t *testing.T) {
	h, ev, run := finishedRun(t)
	storeModelRecords(t, h, run, "small")
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	stale := h.eval("arith")
	newer := stale.DeepCopy()
	newer.Annotations = map[string]string{"touched": "yes"}
	if err := h.c.Update(h.ctx, newer); err != nil {
		t.Fatal(err)
	}
	h.r.Client = interceptor.NewClient(h.c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if e, ok := obj.(*v1alpha1.Evaluation); ok && key.Name == "arith" {
				stale.DeepCopyInto(e)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	writes := h.statusWrites()

	res := h.mustReconcile(ev)

	if cm := h.configMaps()["arith-results"]; cm == nil || cm.Data[cluster.ResultsKeySummary] != "" {
		t.Error("a pass that read a stale Evaluation gathered and wrote the results")
	}
	if got := h.statusWrites(); got != writes {
		t.Errorf("a pass that read a stale Evaluation wrote status %d time(s)", got-writes)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Errorf("requeued after %s, want within a second", res.RequeueAfter)
	}

	h.r.Client = h.c // the watch brought it
	h.mustReconcile(ev)
	if st := h.eval("arith").Status; st.Phase != v1alpha1.PhaseSucceeded || st.ResultsConfigMap != "arith-results" {
		t.Errorf("phase %q results %q once current, want Succeeded with its results", st.Phase, st.ResultsConfigMap)
	}
}

// A pass that read the very version its own last status write replaced
// knows it is stale without asking the API server (a read of the whole
// Evaluation, large with inline data): it gathers nothing and waits.
func TestReconcileReadReplacedByItsOwnWriteAsksNothing(t *testing.T) {
	h, ev, run := finishedRun(t)
	storeModelRecords(t, h, run, "small")
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	stale := h.eval("arith")
	h.r.written.replace(client.ObjectKeyFromObject(stale), stale.ResourceVersion) // as its status write did
	var versionReads atomic.Int64
	h.r.APIReader = interceptor.NewClient(h.c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*metav1.PartialObjectMetadata); ok && key.Name == "arith" {
				versionReads.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if l, ok := list.(*metav1.PartialObjectMetadataList); ok && l.GroupVersionKind().Kind == "EvaluationList" {
				versionReads.Add(1)
			}
			return c.List(ctx, list, opts...)
		},
	})
	writes := h.statusWrites()

	res := h.mustReconcile(ev)

	if n := versionReads.Load(); n != 0 {
		t.Errorf("the pass read the Evaluation's version %d time(s), want none", n)
	}
	if cm := h.configMaps()["arith-results"]; cm == nil || cm.Data[cluster.ResultsKeySummary] != "" {
		t.Error("a pass that read a replaced Evaluation gathered and wrote the results")
	}
	if got := h.statusWrites(); got != writes {
		t.Errorf("a pass that read a replaced Evaluation wrote status %d time(s)", got-writes)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Errorf("requeued after %s, want within a second", res.RequeueAfter)
	}
}

func TestReconcileShardFailed(t *testing.T) {
	h, ev, run := finishedRun(t, "small", "big")
	storeModelRecords(t, h, run, "small")
	bigRecs := recsOf("big", "d", 0, 1, 2, 3, 4, 5, 6)
	h.create(
		headCM(t, "arith", run, shardOf("big", 0), cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5, Scores: map[string]float64{"exact_match": 3}}, bigRecs, 0, 1, 2, 3, 4),
		// The failed shard got two samples done before it gave up.
		headCM(t, "arith", run, shardOf("big", 1), cluster.ShardProgress{State: cluster.StateRunning, Total: 5, Done: 2, Scores: map[string]float64{"exact_match": 1}}, bigRecs, 5, 6),
	)
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	h.setJobStatus("arith-big-"+run, batchv1.JobStatus{
		CompletedIndexes: "0", FailedIndexes: ptr.To("1"),
		Conditions: []batchv1.JobCondition{jobCondition(batchv1.JobFailureTarget), jobCondition(batchv1.JobFailed)},
	})

	h.mustReconcile(ev)

	st := h.eval("arith").Status
	wantMsg := "1 shard(s) failed (each is retried up to 3 times, a configuration error or a failed hook not at all): big/1 (d samples 5-9); see the logs of their pods"
	if st.Phase != v1alpha1.PhaseFailed || st.Message != wantMsg {
		t.Errorf("phase %q message %q, want Failed %q", st.Phase, st.Message, wantMsg)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFailed); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonShardsFailed || c.Message != wantMsg {
		t.Errorf("Failed condition = %+v", c)
	}
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 4, Succeeded: 3, Failed: 1}, st.Shards); diff != "" {
		t.Errorf("shard counts (-want +got):\n%s", diff)
	}
	type outcome struct {
		Model, Dataset       string
		Total, Done, Errored int64
		ExactMatch           string
	}
	var got []outcome
	for _, r := range st.Results {
		got = append(got, outcome{r.Model, r.Dataset, r.Total, r.Completed, r.Errored, r.Metrics["exact_match"]})
	}
	want := []outcome{
		{"small", "d", 10, 10, 1, "0.5000"},
		{"big", "d", 10, 7, 0, "0.5714"}, // 4 of 7
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results: the shards that finished are kept (-want +got):\n%s", diff)
	}
	if st.ResultsConfigMap != "arith-results" || st.Score != "0.5000" {
		t.Errorf("resultsConfigMap %q score %q", st.ResultsConfigMap, st.Score)
	}
	events := h.rec.take()
	wantEvents := []recordedEvent{
		{Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonShardFailed, Action: v1alpha1.ReasonShardFailed, Note: wantMsg},
		{Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonFailed, Action: v1alpha1.ReasonFailed, Note: wantMsg},
	}
	if diff := cmp.Diff(wantEvents, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// Records too large to embed in NAME-results are not dropped: it lists the
// ConfigMaps that hold them instead.
func TestReconcileLargeResultsListChunks(t *testing.T) {
	h, ev, run := finishedRun(t)
	rng := rand.New(rand.NewPCG(1, 2))
	noise := func() string {
		b := make([]byte, 96<<10)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return base64.StdEncoding.EncodeToString(b) // 128 KiB that compress to about 3/4: past the cap at the 8th
	}
	var names []string
	for i := range 10 {
		s := shardOf("small", i/5)
		r := rec("small", "d", i)
		r.Output = noise()
		cm := chunkCM(t, "arith", run, s, i, map[int]results.Record{i: r}, i)
		h.create(cm)
		names = append(names, cm.Name)
	}
	// The heads the controller made are read too.
	names = append(names, cluster.HeadName("arith", run, "small", 0), cluster.HeadName("arith", run, "small", 1))
	sort.Strings(names)
	h.setJobStatus("arith-small-"+run, completeStatus("0-1"))
	h.mustReconcile(ev)

	st := h.eval("arith").Status
	if st.Phase != v1alpha1.PhaseSucceeded || len(st.Results) != 1 || st.Results[0].Completed != 10 {
		t.Fatalf("phase %q results %+v", st.Phase, st.Results)
	}
	cms := h.configMaps()
	cm := cms["arith-results"]
	if _, ok := cm.BinaryData[cluster.ResultsKeyRecords]; ok {
		t.Errorf("about 1.3 MiB of compressed records was embedded in NAME-results")
	}
	if diff := cmp.Diff(strings.Join(names, "\n")+"\n", cm.Data[cluster.ResultsKeyChunks]); diff != "" {
		t.Errorf("chunks list (-want +got):\n%s", diff)
	}
	for _, n := range names {
		if _, ok := cms[n]; !ok {
			t.Errorf("listed chunk %s was deleted", n)
		}
	}
}

// A run with nothing to evaluate succeeds at once, with empty results.
func TestReconcileEmptyDataset(t *testing.T) {
	ev := withUID(testutil.MakeEvaluation("arith", testNS).ConfigMapDataset("qa", "qa", "data.jsonl").
		OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).Generation(1).Obj())
	qa := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "qa"}, Data: map[string]string{"data.jsonl": ""}}
	h := newHarness(t, harnessOpts{objs: []client.Object{ev, qa}})
	h.mustReconcile(ev)
	if n := len(h.jobs()); n != 0 {
		t.Errorf("%d Jobs for an empty dataset", n)
	}
	st := h.eval("arith").Status
	want := []v1alpha1.ModelResult{{
		Model: "small", Dataset: "qa",
		LatencyMillis: &v1alpha1.LatencySummary{}, Tokens: &v1alpha1.TokenUsage{}, Cost: &v1alpha1.CostSummary{Model: v1alpha1.CostUnknown}, // no pricing, nothing recorded: unknown, never 0,
	}}
	if st.Phase != v1alpha1.PhaseSucceeded {
		t.Errorf("phase = %q, want Succeeded", st.Phase)
	}
	if diff := cmp.Diff(want, st.Results); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

// An Evaluation applied without the optional fields (parallelism, retry, ...)
// reaches the controller as written: nothing defaults them on the way (the CRD
// has no default markers, and there is no defaulting webhook).
func TestReconcileUndefaultedEvaluation(t *testing.T) {
	ev := withUID(&v1alpha1.Evaluation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "arith", Generation: 1},
		Spec: v1alpha1.EvaluationSpec{
			Datasets: []v1alpha1.Dataset{{Name: "d", Source: v1alpha1.DatasetSource{Inline: testutil.MakeEvaluation("x", testNS).InlineDataset("d", 3).Obj().Spec.Datasets[0].Source.Inline}}},
			Models:   []v1alpha1.Model{{Name: "small", Provider: v1alpha1.ProviderOpenAI, Model: "m", BaseURL: llmURL}},
			Scoring:  []v1alpha1.Scorer{{Type: v1alpha1.ScorerExactMatch}},
		},
	})
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Reconcile panicked on an undefaulted Evaluation: %v", p)
			}
		}()
		_, err = h.reconcile(ev)
	}()
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range h.jobs() {
		// The default 4 at once, of its one shard: one worker.
		if got := ptr.Deref(j.Spec.Parallelism, 0); got != 1 {
			t.Errorf("%s parallelism = %d, want 1 (the default %d, for 1 shard)", j.Name, got, v1alpha1.DefaultParallelism)
		}
	}
}

// An agent model needs an image in a cluster (agent.image is optional in the
// API because local runs do not need one).
func TestReconcileAgentWithoutImage(t *testing.T) {
	ev := withUID(testutil.MakeEvaluation("agents", testNS).InlineDataset("d", 2).
		Model(v1alpha1.Model{Name: "coder", Provider: v1alpha1.ProviderAgent, Agent: &v1alpha1.Agent{Command: []string{"agent-cli"}}}).
		Scorer(v1alpha1.ScorerContains).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	st := h.eval("agents").Status
	if st.Phase != v1alpha1.PhaseFailed {
		var images []string
		for _, j := range h.jobs() {
			images = append(images, j.Spec.Template.Spec.Containers[0].Image)
		}
		t.Errorf("phase = %q, want Failed (Jobs' images: %q)", st.Phase, images)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFailed); c == nil || c.Reason != v1alpha1.ReasonInvalidSpec {
		t.Errorf("Failed condition = %+v, want InvalidSpec", c)
	}
}

// TestReconcileRaisesATinyShardSize: shards of one sample for one worker
// would make 10 heads for a pod to take in turn; the run makes 8 at most
// (ShardsPerWorker), and says why its shards are bigger than asked.
func TestReconcileRaisesATinyShardSize(t *testing.T) {
	ev := withUID(simpleEval("arith").ShardSize(1).Parallelism(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	h.mustReconcile(ev)
	if s := h.eval("arith").Status.Shards; s == nil || s.Total != 5 {
		t.Errorf("shards %+v, want 5 (of 2 samples: 8 at most for 1 worker)", s)
	}
	want := recordedEvent{Type: corev1.EventTypeNormal, Reason: v1alpha1.ReasonShardSizeRaised, Action: v1alpha1.ReasonShardSizeRaised,
		Note: "spec.shardSize 1 would make more than 8 shards a model (8 for each of the pods that run them, 256 at most; ConfigMaps each): raised to 2"}
	if events := h.rec.take(); !slices.Contains(events, want) {
		t.Errorf("events %+v, want %+v", events, want)
	}
}
