package controllers

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
)

func TestBudgetRaised(t *testing.T) {
	cost := func(c string) *v1alpha1.Budget { return &v1alpha1.Budget{MaxCost: ptr.To(v1alpha1.Number(c))} }
	tests := []struct {
		name   string
		was    *v1alpha1.SpendStatus
		budget *v1alpha1.Budget
		want   bool
	}{
		{"no spend recorded", nil, cost("10"), false},
		{"unchanged", &v1alpha1.SpendStatus{MaxCost: "10.000000"}, cost("10"), false},
		{"lowered", &v1alpha1.SpendStatus{MaxCost: "10.000000"}, cost("5"), false},
		{"raised", &v1alpha1.SpendStatus{MaxCost: "10.000000"}, cost("10.5"), true},
		{"removed", &v1alpha1.SpendStatus{MaxCost: "10.000000"}, nil, true},
		{"tokens raised", &v1alpha1.SpendStatus{MaxTokens: 1000}, &v1alpha1.Budget{MaxTokens: ptr.To[int64](2000)}, true},
		{"a cost limit added to a token budget", &v1alpha1.SpendStatus{MaxTokens: 1000}, &v1alpha1.Budget{MaxTokens: ptr.To[int64](1000), MaxCost: ptr.To(v1alpha1.Number("1"))}, false},
	}
	for _, tt := range tests {
		ev := &v1alpha1.Evaluation{Spec: v1alpha1.EvaluationSpec{Budget: tt.budget}, Status: v1alpha1.EvaluationStatus{Spend: tt.was}}
		if got := budgetRaised(ev); got != tt.want {
			t.Errorf("%s: budgetRaised = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestReconcileEstimatedRun: a run with a budget is planned by the planner
// Job even when the controller could count its data (only the planner holds
// the models' keys, to count the prompts' tokens); its estimate shows in
// status.estimate, with an event, and a warning when it exceeds the budget.
func TestReconcileEstimatedRun(t *testing.T) {
	ev := testutil.MakeEvaluation("priced", testNS).InlineDataset("d", 10).OpenAIModel("m", llmURL).APIKeySecret("team", "key").
		Pricing("2", "8").Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Budget("0.01").Generation(1).Obj()
	withUID(ev)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "team"}, Data: map[string][]byte{"key": []byte("sk-x")}}
	h := newHarness(t, harnessOpts{objs: []client.Object{ev, secret}})
	run := cluster.RunID(ev)

	h.mustReconcile(ev)
	planner := h.jobs()[cluster.PlannerJobName("priced", run)]
	if planner == nil {
		t.Fatalf("no planner Job; Jobs %v; status %+v", keys(h.jobs()), h.eval("priced").Status)
	}
	if st := h.eval("priced").Status; st.Phase != v1alpha1.PhasePending || st.Message != "counting the samples, and the prompts' tokens for status.estimate" {
		t.Errorf("phase %s, message %q; want Pending while the planner estimates", st.Phase, st.Message)
	}
	wantKey := []corev1.EnvVar{{Name: cluster.APIKeyEnv("m"), ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "team"}, Key: "key"}}}}
	var got []corev1.EnvVar
	for _, e := range planner.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			got = append(got, e)
		}
	}
	if diff := cmp.Diff(wantKey, got); diff != "" {
		t.Errorf("the planner's keys (-want +got):\n%s", diff)
	}
	h.rec.take()

	// The planner's plan and estimate.
	est := v1alpha1.EstimateStatus{Cost: "0.020000", InputTokens: 1000, OutputTokens: 2000, Exact: true,
		Results: []v1alpha1.EstimateResult{{Model: "m", Dataset: "d", Calls: 10, InputTokens: 1000, OutputTokens: 2000, Cost: "0.020000", BatchCost: "0.010000"}}}
	b, _ := json.Marshal(est)
	cm := h.configMaps()[cluster.PlanName("priced", run)]
	cm.Annotations = map[string]string{cluster.AnnotationPlan: `{"shardSize":5,"totals":{"d":10}}`, cluster.AnnotationEstimate: string(b)}
	if err := h.c.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile(ev)
	st := h.eval("priced").Status
	if diff := cmp.Diff(&est, st.Estimate); diff != "" {
		t.Errorf("status.estimate (-want +got):\n%s", diff)
	}
	if st.Phase != v1alpha1.PhaseRunning || len(h.jobs()) != 2 {
		t.Errorf("phase %s, Jobs %v: want the run started", st.Phase, keys(h.jobs()))
	}
	var reasons []string
	for _, e := range h.rec.take() {
		if e.Reason == v1alpha1.ReasonEstimated || e.Reason == v1alpha1.ReasonEstimateOverBudget {
			reasons = append(reasons, e.Type+" "+e.Reason+": "+e.Note)
		}
	}
	want := []string{
		"Normal Estimated: The run will cost at most $0.020000 (1000 input tokens, at most 2000 output tokens)",
		"Warning EstimateOverBudget: The run may cost up to $0.020000, more than spec.budget.maxCost $0.010000: it stops when the budget is spent, unless answers are shorter than their bound",
	}
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// Once: a later pass says nothing more.
	h.mustReconcile(ev)
	for _, e := range h.rec.take() {
		if e.Reason == v1alpha1.ReasonEstimated {
			t.Errorf("event %s again", e.Reason)
		}
	}
}

// TestSuspendedRunIsEstimated: an Evaluation created suspended is planned
// and estimated (its planner runs), and only its shards wait: the way to read
// what a run will cost before paying for it.
func TestSuspendedRunIsEstimated(t *testing.T) {
	ev := testutil.MakeEvaluation("later", testNS).InlineDataset("d", 10).OpenAIModel("m", llmURL).
		Pricing("2", "8").Scorer(v1alpha1.ScorerExactMatch).Suspend(true).Generation(1).Obj()
	withUID(ev)
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run := cluster.RunID(ev)
	h.mustReconcile(ev)
	planner := h.jobs()[cluster.PlannerJobName("later", run)]
	if planner == nil || ptr.Deref(planner.Spec.Suspend, false) {
		t.Fatalf("planner Job %v: want one running while the Evaluation is suspended", planner)
	}
	cm := h.configMaps()[cluster.PlanName("later", run)]
	cm.Annotations = map[string]string{cluster.AnnotationPlan: `{"shardSize":10,"totals":{"d":10}}`,
		cluster.AnnotationEstimate: `{"cost":"0.001000","inputTokens":100,"outputTokens":100,"exact":true}`}
	if err := h.c.Update(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile(ev)
	st := h.eval("later").Status
	if st.Phase != v1alpha1.PhaseSuspended || st.Estimate == nil || st.Estimate.Cost != "0.001000" {
		t.Errorf("phase %s, estimate %+v: want Suspended with the estimate", st.Phase, st.Estimate)
	}
	for name, j := range h.jobs() {
		if name != planner.Name && !ptr.Deref(j.Spec.Suspend, false) {
			t.Errorf("Job %s runs while the Evaluation is suspended", name)
		}
	}
}

// TestBatchesStatus: status.batches counts every shard's batches, the
// models' and their judges', and names the judge of a judge's batch in
// flight.
func TestBatchesStatus(t *testing.T) {
	spec := &v1alpha1.EvaluationSpec{Models: []v1alpha1.Model{{Name: "m"}, {Name: "grader", Batch: &v1alpha1.BatchMode{}}}}
	shards := []shardState{{
		Shard: cluster.Shard{Model: "m", Index: 0},
		batches: []results.BatchRecord{
			{Model: "grader/judge/m", ID: "batch_1", State: results.BatchDone, Indexes: results.Indexes{0, 1}},
			{Model: "grader/judge/m", ID: "batch_2", State: results.BatchSubmitted, Indexes: results.Indexes{2, 3, 4}},
			{Model: "grader/judge/m", State: results.BatchIntended, Indexes: results.Indexes{5}},
		},
	}}
	want := &v1alpha1.BatchesStatus{Submitted: 2, Ended: 1, Pending: 3, Text: "1/2",
		InFlight: []v1alpha1.BatchRef{{ID: "batch_2", Shard: "m/0", Requests: 3, Judge: "grader/judge"}}}
	if diff := cmp.Diff(want, batchesStatus(spec, shards)); diff != "" {
		t.Errorf("status.batches (-want +got):\n%s", diff)
	}
	if got := batchesStatus(&v1alpha1.EvaluationSpec{Models: []v1alpha1.Model{{Name: "m"}}}, shards); got != nil {
		t.Errorf("status.batches %+v without a model in batch mode", got)
	}
}
