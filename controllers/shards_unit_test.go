package controllers

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

func running(done, errored int, score float64) cluster.ShardProgress {
	return cluster.ShardProgress{State: cluster.StateRunning, Total: 5, Done: done, Errored: errored, Scores: map[string]float64{"exact_match": score}}
}

func TestObserveShards(t *testing.T) {
	ev := withUID(simpleEval("arith").OpenAIModel("big", llmURL).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run := cluster.RunID(ev)
	succeeded := cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5, Scores: map[string]float64{"exact_match": 3}}
	h.create(
		headCM(t, "arith", run, shardOf("small", 0), succeeded, nil),
		headCM(t, "arith", run, shardOf("small", 1), running(2, 1, 1), nil),
		headCM(t, "arith", run, shardOf("big", 0), running(4, 0, 2), nil),
		headCM(t, "arith", run, shardOf("big", 1), running(1, 0, 0), nil), // its Job index failed
		// Not this run's, or not a head: ignored.
		headCM(t, "arith", "0ldrun00", shardOf("small", 0), running(5, 0, 5), nil),
		chunkCM(t, "arith", run, shardOf("small", 0), 0, recsOf("small", "d", 0), 0),
	)
	jobs := map[string]*batchv1.Job{
		"small": {ObjectMeta: metav1.ObjectMeta{Name: "arith-small"}, Status: batchv1.JobStatus{CompletedIndexes: "0"}},
		"big":   {ObjectMeta: metav1.ObjectMeta{Name: "arith-big"}, Status: batchv1.JobStatus{FailedIndexes: ptr.To("1")}},
	}
	// Shard counts follow the pods: small/1 and big/0 run; big/1's pod failed
	// (its Job index failed); small/0's succeeded.
	for _, pod := range []struct {
		job   string
		index int
		phase corev1.PodPhase
	}{{"arith-small", 0, corev1.PodSucceeded}, {"arith-small", 1, corev1.PodRunning}, {"arith-big", 0, corev1.PodRunning}, {"arith-big", 1, corev1.PodFailed}} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: fmt.Sprintf("%s-%d-x", pod.job, pod.index),
			Labels:          cluster.Labels("arith", run, cluster.ComponentRunner),
			Annotations:     map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(pod.index)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: pod.job, Controller: ptr.To(true)}},
		}}
		h.create(p)
		h.setPodStatus(p.Name, corev1.PodStatus{Phase: pod.phase})
	}
	observe := func() *pass {
		t.Helper()
		p := newPass(h.eval("arith"), h.clock.Now())
		p.run = run
		p.plan = &cluster.Plan{ShardSize: 5, Totals: map[string]int{"d": 10}}
		p.jobs = jobs
		if cont, err := h.r.observeShards(h.ctx, p); err != nil || !cont {
			t.Fatalf("observeShards = %v, %v", cont, err)
		}
		return p
	}
	activeKeys := func(p *pass) []string {
		var out []string
		for _, s := range p.shards {
			if s.active {
				out = append(out, s.Key())
			}
		}
		return out
	}

	p := observe()
	if diff := cmp.Diff(&v1alpha1.Progress{Total: 20, Completed: 12, Errored: 1, Text: "12/20"}, p.status.Progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 4, Active: 2, Succeeded: 1, Failed: 1}, p.status.Shards); diff != "" {
		t.Errorf("shard counts (-want +got):\n%s", diff)
	}
	// The first model's first metric: (3+1)/(5+2).
	if p.status.Score != "0.5714" {
		t.Errorf("live score = %q, want 0.5714", p.status.Score)
	}
	if diff := cmp.Diff([]string{"small/1", "big/0"}, activeKeys(p)); diff != "" {
		t.Errorf("active shards (-want +got):\n%s", diff)
	}
	if p.result.RequeueAfter != 30*time.Second {
		t.Errorf("RequeueAfter = %v, want StaleAfter", p.result.RequeueAfter)
	}
	wantEvent := []event{{corev1.EventTypeWarning, v1alpha1.ReasonShardFailed, "1 shard(s) failed (each is retried up to 3 times, a configuration error or a failed hook not at all): big/1 (d samples 5-9): pod arith-big-1-x (shard big/1) failed (attempt 1)"}}
	if diff := cmp.Diff(wantEvent, p.events, cmp.AllowUnexported(event{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// Heads unchanged for StaleAfter: their runners are taken for dead.
	h.clock.Step(29 * time.Second)
	if got := activeKeys(observe()); len(got) != 2 {
		t.Errorf("after 29s, active = %v, want both still", got)
	}
	h.clock.Step(time.Second)
	p = observe()
	if got := activeKeys(p); len(got) != 0 {
		t.Errorf("after StaleAfter, active = %v, want none", got)
	}
	// They hold no budget any more, but their pods still run: the counts say so.
	if p.status.Shards.Active != 2 || p.result.RequeueAfter != 0 {
		t.Errorf("stale shards: active %d, requeue %v; want 2 (their pods run), 0", p.status.Shards.Active, p.result.RequeueAfter)
	}
	// Progress from stale heads still counts.
	if p.status.Progress.Completed != 12 {
		t.Errorf("completed = %d, want 12", p.status.Progress.Completed)
	}

	// A head that changes is alive again.
	head := &corev1.ConfigMap{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: cluster.HeadName("arith", run, "small", 1)}, head); err != nil {
		t.Fatal(err)
	}
	head.Annotations[cluster.AnnotationProgress] = progressJSON(t, running(3, 1, 2))
	if err := h.c.Update(h.ctx, head); err != nil {
		t.Fatal(err)
	}
	p = observe()
	if diff := cmp.Diff([]string{"small/1"}, activeKeys(p)); diff != "" {
		t.Errorf("after a heartbeat (-want +got):\n%s", diff)
	}
	if p.status.Progress.Completed != 13 || p.status.Score != "0.6250" {
		t.Errorf("progress %+v score %q, want 13 done and 0.6250", p.status.Progress, p.status.Score)
	}
	if len(p.events) != 1 {
		t.Errorf("events = %v, want the ShardFailed event again (status not written yet)", p.events)
	}

	// Once status knows of the failure, it is not announced again.
	stored := h.eval("arith")
	stored.Status.Shards = &v1alpha1.ShardCounts{Total: 4, Failed: 1}
	if err := h.c.Status().Update(h.ctx, stored); err != nil {
		t.Fatal(err)
	}
	if p = observe(); len(p.events) != 0 {
		t.Errorf("events = %v, want none for a known failure", p.events)
	}
}

func TestObserveShardsWithoutHeadsOrScorers(t *testing.T) {
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 7).InlineDataset("e", 3).OpenAIModel("small", llmURL).ShardSize(5).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	p := newPass(ev, t0)
	p.run = cluster.RunID(ev)
	p.plan = &cluster.Plan{ShardSize: 5, Totals: map[string]int{"d": 7, "e": 3}}
	if _, err := h.r.observeShards(h.ctx, p); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&v1alpha1.Progress{Total: 10, Text: "0/10"}, p.status.Progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 3}, p.status.Shards); diff != "" {
		t.Errorf("shards (-want +got):\n%s", diff)
	}
	if p.status.Score != "" || len(p.events) != 0 || p.result.RequeueAfter != 0 {
		t.Errorf("score %q events %v requeue %v; want none", p.status.Score, p.events, p.result.RequeueAfter)
	}
}

func budgetOf(t *testing.T, h *harness) *cluster.Budget {
	t.Helper()
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: "arith-budget"}, cm); err != nil {
		t.Fatal(err)
	}
	b, err := cluster.ParseBudget(cm.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func grantKeys(b *cluster.Budget) map[string][]string {
	out := map[string][]string{}
	for m, mb := range b.Models {
		ks := []string{}
		for k := range mb.Grants {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		out[m] = ks
	}
	return out
}

func TestDivideBudget(t *testing.T) {
	ev := testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 15).
		OpenAIModel("small", llmURL).RateLimit(60).
		OpenAIModel("big", llmURL). // unlimited
		OpenAIModel("judge", llmURL).RateLimit(100).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(1).Obj()
	ev.Spec.Scoring = append(ev.Spec.Scoring, v1alpha1.Scorer{Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "judge"}})
	withUID(ev)
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run := cluster.RunID(ev)

	h.mustReconcile(ev)
	if diff := cmp.Diff(map[string][]string{"small": {}, "judge": {}}, grantKeys(budgetOf(t, h))); diff != "" {
		t.Fatalf("grants before any shard runs (-want +got):\n%s", diff)
	}

	shardOf3 := func(m string, i int) cluster.Shard {
		return cluster.Shard{Model: m, Dataset: "d", Index: i, Start: 5 * i, End: 5*i + 5}
	}
	h.create(
		headCM(t, "arith", run, shardOf3("small", 0), running(1, 0, 1), nil),
		headCM(t, "arith", run, shardOf3("small", 1), running(1, 0, 1), nil),
		headCM(t, "arith", run, shardOf3("small", 2), cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5}, nil),
		headCM(t, "arith", run, shardOf3("big", 0), running(1, 0, 1), nil),
	)
	h.setJobStatus("arith-small-"+run, batchv1.JobStatus{CompletedIndexes: "2"})
	h.clock.Step(time.Second)
	h.mustReconcile(ev)

	b := budgetOf(t, h)
	want := map[string][]string{
		"small": {"small/0", "small/1"},          // its own running shards only
		"judge": {"big/0", "small/0", "small/1"}, // a judge is called by every running shard
	}
	if diff := cmp.Diff(want, grantKeys(b)); diff != "" {
		t.Errorf("grants (-want +got):\n%s", diff)
	}
	for model, limit := range map[string]int64{"small": 60, "judge": 100} {
		var sum int64
		for _, g := range b.Models[model].Grants {
			sum += g.Use().RequestsPerMinute
		}
		if sum > limit {
			t.Errorf("%s: grants use %d rpm, over the limit %d", model, sum, limit)
		}
		if got := b.Models[model].Limits; got != (ratelimit.Limits{RequestsPerMinute: limit}) {
			t.Errorf("%s: limits %+v", model, got)
		}
	}

	if got := b.Models["small"].Grants["small/0"].Share.RequestsPerMinute; got != 30 {
		t.Errorf("small/0's share: %d rpm, want 30 (half of 60)", got)
	}

	// small/1 ends. The server still counts the calls it sent within the last
	// minute: small/0 is not raised until a window has passed.
	h.create(
		headCM(t, "arith", run, shardOf3("small", 1), cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5}, nil),
		headCM(t, "arith", run, shardOf3("small", 0), running(2, 0, 2), nil),
	)
	h.setJobStatus("arith-small-"+run, batchv1.JobStatus{CompletedIndexes: "1-2"})
	h.clock.Step(time.Second)
	res := h.mustReconcile(ev)
	b = budgetOf(t, h)
	if diff := cmp.Diff([]string{"small/0", "small/1"}, grantKeys(b)["small"]); diff != "" || b.Models["small"].Grants["small/0"].Share.RequestsPerMinute != 30 {
		t.Errorf("right after small/1 ended: grants %v (-want +got %s), small/0's share %d rpm; want it kept at 30",
			grantKeys(b)["small"], diff, b.Models["small"].Grants["small/0"].Share.RequestsPerMinute)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > cluster.RateWindow {
		t.Errorf("RequeueAfter = %v, want at most a window (%v): the raise is due then", res.RequeueAfter, cluster.RateWindow)
	}
	// Half a window on, half of small/1's share may still be in the server's
	// window: small/0 has the rest. The controller re-divides every twelfth of
	// a window meanwhile; each division shrinks small/1's share from what it
	// had while it ran, not from the last division's.
	for i := range 6 {
		h.clock.Step(cluster.RateWindow / 12)
		h.create(headCM(t, "arith", run, shardOf3("small", 0), running(3, 0, float64(i)+0.5), nil))
		h.mustReconcile(ev)
	}
	b = budgetOf(t, h)
	if s0, s1 := b.Models["small"].Grants["small/0"].Share.RequestsPerMinute, b.Models["small"].Grants["small/1"].Share.RequestsPerMinute; s0 < 43 || s0 > 46 || s0+s1 > 60 {
		t.Errorf("half a window after small/1 ended: small/0 %d rpm, small/1 %d rpm; want about 45 and 15", s0, s1)
	}
	h.clock.Step(cluster.RateWindow / 2)
	h.create(headCM(t, "arith", run, shardOf3("small", 0), running(4, 0, 4), nil))
	h.mustReconcile(ev)
	b = budgetOf(t, h)
	if diff := cmp.Diff([]string{"small/0"}, grantKeys(b)["small"]); diff != "" || b.Models["small"].Grants["small/0"].Share.RequestsPerMinute != 60 {
		t.Errorf("a window after small/1 ended: grants (-want +got):\n%s small/0's share %d rpm, want 60", diff, b.Models["small"].Grants["small/0"].Share.RequestsPerMinute)
	}

	// The runners go silent: their shares are reclaimed once the calls they
	// may have sent have left the window.
	h.clock.Step(31 * time.Second)
	h.mustReconcile(ev)
	if diff := cmp.Diff([]string{"small/0"}, grantKeys(budgetOf(t, h))["small"]); diff != "" {
		t.Errorf("grants after StaleAfter, within the window (-want +got):\n%s", diff)
	}
	h.clock.Step(30 * time.Second)
	h.mustReconcile(ev)
	if diff := cmp.Diff(map[string][]string{"small": {}, "judge": {}}, grantKeys(budgetOf(t, h))); diff != "" {
		t.Errorf("grants a window after the runners went silent (-want +got):\n%s", diff)
	}
}

// TestDivideBudgetAcrossAWorkersShards: a worker's next shard takes over
// the share of the one before, whose calls its own follow, instead of
// waiting a minute for that shard's lingering share (0.51 of the limit with
// shards of 5 s). Only what the two together could send over a window is
// counted, and never more than the limit.
func TestDivideBudgetAcrossAWorkersShards(t *testing.T) {
	// Shards of 5 at 60 rpm on w workers: with 2, worker 0 takes shards 0
	// and 2, worker 1 shards 1 and 3. Shards 0 and 1 run, at 30 each.
	setupOf := func(t *testing.T, w int32) (h *harness, ev *v1alpha1.Evaluation, head func(i int, prog cluster.ShardProgress)) {
		ev = withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10*int(w)).
			OpenAIModel("small", llmURL).RateLimit(60).Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Parallelism(w).Generation(1).Obj())
		h = newHarness(t, harnessOpts{objs: []client.Object{ev}})
		run := cluster.RunID(ev)
		h.mustReconcile(ev)
		head = func(i int, prog cluster.ShardProgress) {
			h.create(headCM(t, "arith", run, shardOf("small", i), prog, nil))
		}
		acked := func(v int64) cluster.ShardProgress { p := running(1, 0, 1); p.Budget = v; return p }
		head(0, acked(0))
		head(1, acked(0))
		h.clock.Step(time.Second)
		h.mustReconcile(ev)
		v := budgetOf(t, h).Version
		head(0, acked(v))
		head(1, acked(v))
		h.clock.Step(time.Second)
		h.mustReconcile(ev)
		return h, ev, head
	}
	setup := func(t *testing.T) (*harness, *v1alpha1.Evaluation, func(int, cluster.ShardProgress)) {
		return setupOf(t, 2)
	}
	done := cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5}
	share := func(b *cluster.Budget, i int) int64 {
		return b.Models["small"].Grants[shardOf("small", i).Key()].Share.RequestsPerMinute
	}
	within := func(t *testing.T, b *cluster.Budget) {
		t.Helper()
		var use int64
		for _, g := range b.Models["small"].Grants {
			use += g.Use().RequestsPerMinute
		}
		if use > 60 {
			t.Errorf("the grants use %d rpm of 60: %+v", use, b.Models["small"].Grants)
		}
	}
	// tookOverAll checks that small/2 took over all of small/0's 30, which
	// left the budget.
	tookOverAll := func(t *testing.T, b *cluster.Budget) {
		t.Helper()
		within(t, b)
		if diff := cmp.Diff([]string{"small/1", "small/2"}, grantKeys(b)["small"]); diff != "" || share(b, 2) != 30 {
			t.Errorf("grants (-want +got):\n%s small/2: %d rpm; want it to take over small/0's 30 at once", diff, share(b, 2))
		}
	}

	t.Run("seen together", func(t *testing.T) {
		h, ev, head := setup(t)
		head(0, done)
		head(2, running(0, 0, 0))
		h.clock.Step(time.Second)
		h.mustReconcile(ev)
		tookOverAll(t, budgetOf(t, h))
	})
	t.Run("the next shard a moment later", func(t *testing.T) {
		h, ev, head := setup(t)
		head(0, done)
		h.clock.Step(time.Second)
		h.mustReconcile(ev)
		if b := budgetOf(t, h); share(b, 0) != 30 {
			t.Fatalf("small/0 right after it stopped: %d rpm, want its 30 (the server still counts its calls)", share(b, 0))
		}
		head(2, running(0, 0, 0))
		h.clock.Step(time.Second)
		h.mustReconcile(ev)
		tookOverAll(t, budgetOf(t, h))
	})
	t.Run("the next shard after a pause", func(t *testing.T) {
		// Its worker's pod was replaced: small/0's share shrank meanwhile,
		// and small/1 took what it freed. small/2 takes over only what keeps
		// the two within what small/0 still held.
		h, ev, head := setup(t)
		head(0, done)
		for range 4 {
			h.clock.Step(cluster.RateWindow / 12)
			h.mustReconcile(ev)
		}
		before := budgetOf(t, h)
		held := share(before, 0)
		if held >= 30 || held < 15 {
			t.Fatalf("small/0 a third of a window after it stopped: %d rpm, want between 15 and 30", held)
		}
		head(2, running(0, 0, 0))
		h.clock.Step(time.Second)
		h.mustReconcile(ev)
		b := budgetOf(t, h)
		within(t, b)
		left := float64(cluster.RateWindow-(4*cluster.RateWindow/12+time.Second)) / float64(cluster.RateWindow)
		took := cluster.TakeOver(ratelimit.Limits{RequestsPerMinute: 30}, ratelimit.Limits{RequestsPerMinute: held}, left).RequestsPerMinute
		if took == 0 || took >= held || b.Models["small"].Grants["small/2"].Use().RequestsPerMinute < took {
			t.Errorf("small/2 counted at %d rpm; want what it took over of small/0's %d, %d", b.Models["small"].Grants["small/2"].Use().RequestsPerMinute, held, took)
		}
		if got, want := share(b, 0), cluster.LingeringBehind(ratelimit.Limits{RequestsPerMinute: 30}, ratelimit.Limits{RequestsPerMinute: took}, left).RequestsPerMinute; got > want || got+took > held {
			t.Errorf("small/0 lingers with %d rpm; want at most %d, what it used beyond small/2's share", got, want)
		}
	})
	t.Run("a third worker's first shard starts too", func(t *testing.T) {
		// Workers 0, 1, 2 take shards 0 and 3, 1 and 4, 2 and 5. small/3
		// is counted at what it took over while the fair 20 waits for
		// acknowledgements: small/0's calls are still in the window.
		// Raised only from what was left, it had 10, and small/2 20.
		h, ev, head := setupOf(t, 3)
		head(0, done)
		head(3, running(0, 0, 0))
		head(2, running(0, 0, 0))
		h.clock.Step(time.Second)
		h.mustReconcile(ev)
		b := budgetOf(t, h)
		within(t, b)
		if use := b.Models["small"].Grants["small/3"].Use().RequestsPerMinute; use != 30 || share(b, 3) != 20 || share(b, 2) != 0 {
			t.Errorf("grants %+v; want small/3 at the fair 20, counted at the 30 it took over, and small/2 waiting", b.Models["small"].Grants)
		}
	})
	t.Run("another worker's shard takes nothing over", func(t *testing.T) {
		h, ev, head := setup(t)
		head(0, done)
		head(3, running(0, 0, 0)) // worker 1's, while its shard 1 still runs
		h.clock.Step(time.Second)
		h.mustReconcile(ev)
		b := budgetOf(t, h)
		within(t, b)
		if share(b, 0) == 0 || share(b, 3) != 0 {
			t.Errorf("grants %+v; want small/0 lingering and small/3 waiting for what is left", b.Models["small"].Grants)
		}
	})
}

func TestParseIndexes(t *testing.T) {
	cases := []struct {
		in   string
		want []int
	}{
		{"", nil},
		{"0", []int{0}},
		{"0-2,5", []int{0, 1, 2, 5}},
		{"1,3-5,7-7", []int{1, 3, 4, 5, 7}},
		{"2,1,2", []int{1, 2}},
		{"5-3", nil},        // reversed range
		{"a,1", []int{1}},   // a bad part is skipped
		{"1-b,4", []int{4}}, // a bad upper bound
		{"-1,2", []int{2}},  // negative
		{",,3,", []int{3}},  // empty parts
		{" 1,2 ", nil},      // spaces are not trimmed
		{"1-2-3", nil},      // "2-3" is not a number
		{"10-12", []int{10, 11, 12}},
		{"98-2000000000", []int{98, 99}}, // bounded by the completions
	}
	for _, tc := range cases {
		got := parseIndexes(tc.in, 100)
		var idx []int
		for i, ok := range got {
			if !ok {
				t.Errorf("parseIndexes(%q) holds a false entry %d", tc.in, i)
			}
			idx = append(idx, i)
		}
		slices.Sort(idx)
		if diff := cmp.Diff(tc.want, idx); diff != "" {
			t.Errorf("parseIndexes(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestFailedShards(t *testing.T) {
	st := func(model, dataset string, index, start, end int, failed bool) shardState {
		return shardState{Shard: cluster.Shard{Model: model, Dataset: dataset, Index: index, Start: start, End: end}, failed: failed}
	}
	shards := []shardState{
		st("small", "d", 0, 0, 100, false),
		st("small", "d", 1, 100, 200, true),
		st("big", "e", 2, 0, 7, true),
	}
	want := "2 shard(s) failed (each is retried up to 3 times, a configuration error or a failed hook not at all): small/1 (d samples 100-199), big/2 (e samples 0-6); see the logs of their pods"
	if reason, got := failedShards(shards, 3); got != want || reason != v1alpha1.ReasonShardsFailed {
		t.Errorf("failedShards = %q, %q\nwant            %q, %q", reason, got, v1alpha1.ReasonShardsFailed, want)
	}
	// With the pods' causes: the first names the reason, and no log is needed.
	shards[1].cause = &problem{reason: "OOMKilled", message: "pod p1 (shard small/1) container runner was OOMKilled (exit code 137, memory limit 8Mi)"}
	shards[2].cause = &problem{reason: v1alpha1.ReasonConfigurationError, message: "pod p2 (shard big/2) stopped on a configuration error (exit code 2), which no retry can fix: bad template"}
	want = "2 shard(s) failed (each is retried up to 3 times, a configuration error or a failed hook not at all): " +
		"small/1 (d samples 100-199): pod p1 (shard small/1) container runner was OOMKilled (exit code 137, memory limit 8Mi); " +
		"big/2 (e samples 0-6): pod p2 (shard big/2) stopped on a configuration error (exit code 2), which no retry can fix: bad template"
	if reason, got := failedShards(shards, 3); got != want || reason != "OOMKilled" {
		t.Errorf("failedShards with causes = %q, %q\nwant %q, %q", reason, got, "OOMKilled", want)
	}
	if _, got := failedShards(nil, 0); got != "0 shard(s) failed (each is retried up to 0 times, a configuration error or a failed hook not at all): " {
		t.Errorf("failedShards(nil) = %q", got)
	}
}

func TestJobsFinished(t *testing.T) {
	complete := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{jobCondition(batchv1.JobComplete)}}}
	failed := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{jobCondition(batchv1.JobFailed)}}}
	runningJob := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionFalse}}}}
	cases := []struct {
		name               string
		jobs               map[string]*batchv1.Job
		wantDone, wantFail bool
	}{
		{"none", map[string]*batchv1.Job{}, true, false},
		{"all complete", map[string]*batchv1.Job{"a": complete, "b": complete}, true, false},
		{"one failed", map[string]*batchv1.Job{"a": complete, "b": failed}, true, true},
		{"one running", map[string]*batchv1.Job{"a": failed, "b": runningJob}, false, false},
	}
	for _, tc := range cases {
		done, fail := jobsFinished(tc.jobs)
		if done != tc.wantDone || fail != tc.wantFail {
			t.Errorf("%s: jobsFinished = %v, %v; want %v, %v", tc.name, done, fail, tc.wantDone, tc.wantFail)
		}
	}
}

func TestOnlyProgress(t *testing.T) {
	base := func() *v1alpha1.EvaluationStatus {
		return &v1alpha1.EvaluationStatus{
			Phase: v1alpha1.PhaseRunning, Run: "r1", ObservedGeneration: 1,
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRunning, Message: "shards are running", LastTransitionTime: metav1.NewTime(t0)}},
			Progress:   &v1alpha1.Progress{Total: 10, Completed: 1, Text: "1/10"},
			Shards:     &v1alpha1.ShardCounts{Total: 2, Active: 1},
			Score:      "1.0000",
		}
	}
	cases := []struct {
		name string
		edit func(*v1alpha1.EvaluationStatus)
		want bool
	}{
		{"identical", func(*v1alpha1.EvaluationStatus) {}, true},
		{"progress", func(s *v1alpha1.EvaluationStatus) {
			s.Progress = &v1alpha1.Progress{Total: 10, Completed: 5, Text: "5/10"}
		}, true},
		{"active shards", func(s *v1alpha1.EvaluationStatus) { s.Shards.Active = 3 }, true},
		{"a shard failed", func(s *v1alpha1.EvaluationStatus) { s.Shards.Failed = 1 }, false},
		{"a shard succeeded", func(s *v1alpha1.EvaluationStatus) { s.Shards.Succeeded = 1 }, true},
		{"score", func(s *v1alpha1.EvaluationStatus) { s.Score = "0.5000" }, true},
		{"progress appears", func(s *v1alpha1.EvaluationStatus) { s.Progress = nil }, true},
		{"observed generation", func(s *v1alpha1.EvaluationStatus) { s.ObservedGeneration = 2 }, true},
		{"condition time only", func(s *v1alpha1.EvaluationStatus) {
			s.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(time.Hour))
		}, true},
		{"phase", func(s *v1alpha1.EvaluationStatus) { s.Phase = v1alpha1.PhaseSucceeded }, false},
		{"run", func(s *v1alpha1.EvaluationStatus) { s.Run = "r2" }, false},
		{"message", func(s *v1alpha1.EvaluationStatus) { s.Message = "x" }, false},
		{"condition reason", func(s *v1alpha1.EvaluationStatus) { s.Conditions[0].Reason = v1alpha1.ReasonSuspended }, false},
		{"condition generation", func(s *v1alpha1.EvaluationStatus) { s.Conditions[0].ObservedGeneration = 2 }, false},
		{"a new condition", func(s *v1alpha1.EvaluationStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: v1alpha1.ConditionSuspended})
		}, false},
		{"results", func(s *v1alpha1.EvaluationStatus) { s.Results = []v1alpha1.ModelResult{{Model: "m"}} }, false},
		{"results ConfigMap", func(s *v1alpha1.EvaluationStatus) { s.ResultsConfigMap = "x-results" }, false},
		{"completion time", func(s *v1alpha1.EvaluationStatus) { s.CompletionTime = &metav1.Time{Time: t0} }, false},
	}
	for _, tc := range cases {
		a, b := base(), base()
		tc.edit(b)
		if got := onlyProgress(a, b); got != tc.want {
			t.Errorf("%s: onlyProgress = %v, want %v", tc.name, got, tc.want)
		}
		if got := onlyProgress(b, a); got != tc.want {
			t.Errorf("%s (reversed): onlyProgress = %v, want %v", tc.name, got, tc.want)
		}
	}
	// onlyProgress compares copies: its arguments are left alone.
	a, b := base(), base()
	b.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(time.Hour))
	onlyProgress(a, b)
	if !b.Conditions[0].LastTransitionTime.Equal(ptr.To(metav1.NewTime(t0.Add(time.Hour)))) || a.Progress == nil {
		t.Errorf("onlyProgress modified its arguments")
	}
}

// limitedArith is Evaluation arith (10 samples of d in shards of 5, model
// small at 60 rpm) after its first pass, with the head of its shard 0 running.
func limitedArith(t *testing.T) (h *harness, run string, sh cluster.Shard) {
	t.Helper()
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).
		OpenAIModel("small", llmURL).RateLimit(60).Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(1).Obj())
	h = newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run = cluster.RunID(ev)
	h.mustReconcile(ev)
	sh = cluster.Shard{Model: "small", Dataset: "d", Index: 0, Start: 0, End: 5}
	h.create(headCM(t, "arith", run, sh, running(1, 0, 1), nil))
	return h, run, sh
}

// arithPass is a pass of run over Evaluation arith as planned (10 samples of
// d in shards of 5), with the given shards.
func arithPass(h *harness, run string, shards ...shardState) *pass {
	p := newPass(h.eval("arith"), h.clock.Now())
	p.run, p.plan, p.shards = run, &cluster.Plan{ShardSize: 5, Totals: map[string]int{"d": 10}}, shards
	return p
}

// TestDivideBudgetOnlyOverTheVersionItRead: a division computed from a budget
// the cache holds is written only over that version. One computed from a stale
// copy would count grants that changed since at their old value; it is refused
// (a conflict), and the pass goes on and divides again soon.
func TestDivideBudgetOnlyOverTheVersionItRead(t *testing.T) {
	h, run, sh := limitedArith(t)
	before := budgetOf(t, h)

	// The cache serves a copy older than the budget stored.
	var stale corev1.ConfigMap
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: cluster.BudgetName("arith")}, &stale); err != nil {
		t.Fatal(err)
	}
	stored := stale.DeepCopy()
	stored.Annotations["touched"] = "by a division the cache has not seen yet"
	if err := h.c.Update(h.ctx, stored); err != nil {
		t.Fatal(err)
	}
	h.r.Client = interceptor.NewClient(h.c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok && key.Name == cluster.BudgetName("arith") {
				stale.ObjectMeta.DeepCopyInto(&m.ObjectMeta)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	p := arithPass(h, run, shardState{Shard: sh, active: true})
	cont, err := h.r.divideBudget(h.ctx, p)
	if err != nil || !cont {
		t.Fatalf("divideBudget = %v, %v; want the pass to go on", cont, err)
	}
	if p.result.RequeueAfter == 0 || p.result.RequeueAfter > time.Second {
		t.Errorf("RequeueAfter = %v, want soon", p.result.RequeueAfter)
	}
	if diff := cmp.Diff(before, budgetOf(t, h)); diff != "" {
		t.Errorf("a division from a stale copy was written (-before +after):\n%s", diff)
	}
}

// TestDivideBudgetAfterTheLimitIsRemoved: a rateLimit removed mid-run (the
// run goes on: its hash leaves rateLimit out) is divided once more, without
// its model, so that its shards stop taking shares of it; then, with nothing
// left to take back, nothing more is written. The controller used to stop
// dividing once no model had a limit, and the shards kept their last shares.
func TestDivideBudgetAfterTheLimitIsRemoved(t *testing.T) {
	h, run, sh := limitedArith(t)
	divide := func() {
		t.Helper()
		if cont, err := h.r.divideBudget(h.ctx, arithPass(h, run, shardState{Shard: sh, active: true})); err != nil || !cont {
			t.Fatalf("divideBudget = %v, %v; want the pass to go on", cont, err)
		}
	}
	divide()
	limited := budgetOf(t, h)
	if _, ok := limited.Models["small"].Grants[sh.Key()]; !ok {
		t.Fatalf("budget %+v; want a grant of small for %s", limited, sh.Key())
	}

	h.editSpec("arith", func(s *v1alpha1.EvaluationSpec) { s.Models[0].RateLimit = nil })
	divide()
	lifted := budgetOf(t, h)
	if lifted.Version != limited.Version+1 || len(lifted.Models) != 0 {
		t.Errorf("after the limit was removed: version %d, models %v; want version %d and no model", lifted.Version, lifted.Models, limited.Version+1)
	}
	if _, limitedStill, _ := lifted.Lookup("small", sh.Key()); limitedStill {
		t.Errorf("the shard still reads small as limited")
	}
	divide()
	if again := budgetOf(t, h); again.Version != lifted.Version {
		t.Errorf("divided again with nothing to take back: version %d, want %d", again.Version, lifted.Version)
	}
}

// TestDivideBudgetOfAnUnlimitedRun: a run with no limit and no spend budget
// has no budget ConfigMap (none is made before a limit comes), and its pass
// goes on past the division.
func TestDivideBudgetOfAnUnlimitedRun(t *testing.T) {
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).
		OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	p := arithPass(h, cluster.RunID(ev))
	if cont, err := h.r.divideBudget(h.ctx, p); err != nil || !cont {
		t.Fatalf("divideBudget = %v, %v; want the pass to go on", cont, err)
	}
	var cm corev1.ConfigMap
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: testNS, Name: cluster.BudgetName("arith")}, &cm); !apierrors.IsNotFound(err) {
		t.Errorf("budget ConfigMap: %v; want none", err)
	}
}

// TestNoJobIsNotFinished: a run whose model has shards but no Job yet (held
// back while its ModelEndpoint is gone) has not run, whatever the other
// models' Jobs say: it must not end Succeeded with nothing done.
func TestNoJobIsNotFinished(t *testing.T) {
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).
		OpenAIModel("small", llmURL).Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	p := arithPass(h, cluster.RunID(ev))
	cont, err := h.r.finish(h.ctx, p)
	if err != nil || !cont {
		t.Fatalf("finish = %v, %v", cont, err)
	}
	if p.finished || p.failureReason != "" {
		t.Errorf("finished %v, failure %q with no Job made; want the run still going", p.finished, p.failureReason)
	}
}

// TestObserveWorkers: a Job's indexes are workers, each running its shards
// one after another (w, w+W, ...): a shard's outcome is its head's, a
// worker's pod is its current shard's (the first not succeeded), and a
// worker that failed on a shard whose retries were used up names why the
// pod before failed.
func TestObserveWorkers(t *testing.T) {
	// 5 shards of 5 samples, 2 workers: 0 runs shards 0, 2, 4; 1 runs 1, 3.
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 25).OpenAIModel("small", llmURL).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Parallelism(2).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}})
	run := cluster.RunID(ev)
	succeeded := cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5, Attempts: 1, Scores: map[string]float64{"exact_match": 5}}
	usedUp := running(3, 0, 3)
	usedUp.Attempts = 4
	// Shard 2 was begun by worker 0's pod that runs now, after its pod
	// before failed in shard 0 (which the pod now running finished).
	second := running(2, 0, 1)
	second.Attempts, second.Pod = 1, "arith-small-0-a"
	h.create(
		headCM(t, "arith", run, shardOf("small", 0), succeeded, nil),
		headCM(t, "arith", run, shardOf("small", 1), succeeded, nil),
		headCM(t, "arith", run, shardOf("small", 2), second, nil),
		headCM(t, "arith", run, shardOf("small", 3), usedUp, nil),
		headCM(t, "arith", run, shardOf("small", 4), cluster.ShardProgress{}, nil),
	)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "arith-small"}, Spec: batchv1.JobSpec{Completions: ptr.To[int32](2)},
		Status: batchv1.JobStatus{FailedIndexes: ptr.To("1")}}
	for _, pod := range []struct {
		name   string
		index  int
		status corev1.PodStatus
	}{
		{"arith-small-0-0", 0, failedPod("Error", 1, "boom")},
		{"arith-small-0-a", 0, corev1.PodStatus{Phase: corev1.PodRunning}},
		{"arith-small-1-a", 1, failedPod("OOMKilled", 137, "")},
		// The next pod found shard 3's retries used up.
		{"arith-small-1-b", 1, failedPod("Error", cluster.ExitRetriesUsed, "shard small/3 (d samples 15-19) failed on 4 pods, as many as its retries allow")},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: pod.name,
			Labels:          cluster.Labels("arith", run, cluster.ComponentRunner),
			Annotations:     map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(pod.index)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, Controller: ptr.To(true)}},
		}}
		h.create(p)
		h.setPodStatus(p.Name, pod.status)
	}
	p := newPass(h.eval("arith"), h.clock.Now())
	p.run = run
	p.plan = &cluster.Plan{ShardSize: 5, Totals: map[string]int{"d": 25}}
	p.jobs = map[string]*batchv1.Job{"small": job}
	if cont, err := h.r.observeShards(h.ctx, p); err != nil || !cont {
		t.Fatalf("observeShards = %v, %v", cont, err)
	}
	// Shard 4 waits for worker 0: neither active nor pending.
	if diff := cmp.Diff(&v1alpha1.ShardCounts{Total: 5, Succeeded: 2, Active: 1, Failed: 1}, p.status.Shards); diff != "" {
		t.Errorf("shard counts (-want +got):\n%s", diff)
	}
	var active, failed []string
	for _, s := range p.shards {
		if s.active {
			active = append(active, s.Key())
		}
		if s.failed {
			failed = append(failed, s.Key())
		}
	}
	if diff := cmp.Diff([]string{"small/2"}, active); diff != "" {
		t.Errorf("active shards (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"small/3"}, failed); diff != "" {
		t.Errorf("failed shards (-want +got):\n%s", diff)
	}
	for _, pr := range p.problems {
		if strings.Contains(pr.message, "small/2") {
			t.Errorf("shard 2 is said to be retried, though its pod before failed in shard 0: %s", pr.message)
		}
	}
	reason, msg := failedShards(p.shards, 3)
	want := "small/3 (d samples 15-19): pod arith-small-1-a (shard small/3) container runner was OOMKilled (exit code 137) (attempt 4)"
	if reason != "OOMKilled" || !strings.Contains(msg, want) {
		t.Errorf("failedShards = %q, %q; want OOMKilled, containing %q", reason, msg, want)
	}
}
