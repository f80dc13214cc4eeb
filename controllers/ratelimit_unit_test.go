package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// TestRateLimitedModelsAreVisible: while runners report 429s, the status says
// which model is rate limited since when (REASON RateLimited, a condition, one
// event), and says so no more once they stop.
func TestRateLimitedModelsAreVisible(t *testing.T) {
	ev := withUID(simpleEval("arith").OpenAIModel("big", llmURL).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run := cluster.RunID(ev)
	since := metav1.NewTime(time.Date(2026, 11, 23, 19, 20, 5, 0, time.UTC))
	until := metav1.NewTime(since.Add(time.Minute))
	throttled := running(1, 0, 1)
	throttled.Throttled = map[string]cluster.Throttle{"small": {Since: since, Until: &until, Refusals: 4}}
	later := running(2, 0, 2)
	later.Throttled = map[string]cluster.Throttle{"small": {Since: metav1.NewTime(since.Add(10 * time.Second)), Refusals: 1}}
	h.create(
		headCM(t, "arith", run, shardOf("small", 0), throttled, nil),
		headCM(t, "arith", run, shardOf("small", 1), later, nil),
		headCM(t, "arith", run, shardOf("big", 0), running(4, 0, 2), nil),
	)
	jobs := map[string]*batchv1.Job{
		"small": {ObjectMeta: metav1.ObjectMeta{Name: "arith-small"}},
		"big":   {ObjectMeta: metav1.ObjectMeta{Name: "arith-big"}},
	}
	observe := func(ev *v1alpha1.Evaluation) *pass {
		t.Helper()
		p := newPass(ev, h.clock.Now())
		p.run = run
		p.plan = &cluster.Plan{ShardSize: 5, Totals: map[string]int{"d": 10}}
		p.jobs = jobs
		if cont, err := h.r.observeShards(h.ctx, p); err != nil || !cont {
			t.Fatalf("observeShards = %v, %v", cont, err)
		}
		h.r.setPhase(p)
		return p
	}

	p := observe(h.eval("arith"))
	wantMsg := "rate limited by the server (HTTP 429): model small since 2026-11-23T19:20:05Z; calls wait for it and no sample fails for it, " +
		"but the run fails if a model has no successful call for retry.maxThrottleWait (10m0s)"
	if p.status.Phase != v1alpha1.PhaseRunning || p.status.Reason != v1alpha1.ReasonRateLimited || p.status.Message != wantMsg {
		t.Errorf("phase %s, reason %q, message %q; want Running, RateLimited, %q", p.status.Phase, p.status.Reason, p.status.Message, wantMsg)
	}
	c := meta.FindStatusCondition(p.status.Conditions, v1alpha1.ConditionRateLimited)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonRateLimited || c.Message != wantMsg {
		t.Errorf("RateLimited condition = %+v; want True with the message", c)
	}
	if prog := meta.FindStatusCondition(p.status.Conditions, v1alpha1.ConditionProgressing); prog == nil || prog.Status != metav1.ConditionTrue {
		t.Errorf("Progressing = %+v; want True: a throttled run still runs", prog)
	}
	wantEvents := []event{{corev1.EventTypeWarning, v1alpha1.ReasonRateLimited, wantMsg}}
	if diff := cmp.Diff(wantEvents, rateLimitEvents(p.events), cmp.AllowUnexported(event{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Written, and seen again: no second event, and nothing to rewrite.
	stored := h.eval("arith")
	stored.Status = *p.status
	again := observe(stored)
	if len(rateLimitEvents(again.events)) != 0 {
		t.Errorf("events on the next pass = %v, want none", again.events)
	}
	if !equalStatus(p.status, again.status) {
		t.Errorf("the status changed while the throttling lasted: %s", cmp.Diff(p.status, again.status))
	}

	// The runners stop reporting 429s: the condition turns False, with an event.
	for i, prog := range []cluster.ShardProgress{running(3, 0, 3), running(4, 0, 4)} {
		head := &corev1.ConfigMap{}
		if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: cluster.HeadName("arith", run, "small", i)}, head); err != nil {
			t.Fatal(err)
		}
		head.Annotations[cluster.AnnotationProgress] = progressJSON(t, prog)
		if err := h.c.Update(h.ctx, head); err != nil {
			t.Fatal(err)
		}
	}
	lifted := observe(stored)
	c = meta.FindStatusCondition(lifted.status.Conditions, v1alpha1.ConditionRateLimited)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonRateLimitLifted {
		t.Errorf("RateLimited after the 429s stopped = %+v; want False, %s", c, v1alpha1.ReasonRateLimitLifted)
	}
	if lifted.status.Reason != "" || strings.Contains(lifted.status.Message, "429") {
		t.Errorf("reason %q, message %q after the 429s stopped; want neither", lifted.status.Reason, lifted.status.Message)
	}
	if diff := cmp.Diff([]string{v1alpha1.ReasonRateLimitLifted}, reasonsOf(rateLimitEvents(lifted.events))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// rateLimitEvents keeps the events about rate limiting.
func rateLimitEvents(events []event) []event {
	var out []event
	for _, e := range events {
		if e.reason == v1alpha1.ReasonRateLimited || e.reason == v1alpha1.ReasonRateLimitLifted {
			out = append(out, e)
		}
	}
	return out
}

func reasonsOf(events []event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.reason)
	}
	return out
}
