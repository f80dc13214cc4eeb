package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// endpointWatch samples a ModelEndpoint's budget and status while a test runs.
type endpointWatch struct {
	mu sync.Mutex
	// maxUse is the most the grants ever allowed in sum (Grant.Use).
	maxUse int64
	// shares are the largest summed shares seen per Evaluation while every
	// Evaluation held grants and every grant was acknowledged.
	settled map[string]int64
	// maxEvaluations is the most Evaluations the status ever counted.
	maxEvaluations int32
	maxAchieved    int64
	// maxPlaces is the most places in flight the grants ever allowed in sum.
	maxPlaces  int64
	stop, done chan struct{}
}

func watchEndpoint(t *testing.T, ns, name string, evaluations int) *endpointWatch {
	w := &endpointWatch{settled: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var ep v1alpha1.ModelEndpoint
			if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &ep); err == nil {
				w.mu.Lock()
				w.maxEvaluations = max(w.maxEvaluations, ep.Status.Evaluations)
				if u := ep.Status.Usage; u != nil {
					w.maxAchieved = max(w.maxAchieved, u.RequestsPerMinute)
				}
				w.mu.Unlock()
			}
			var cm corev1.ConfigMap
			if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cluster.EndpointBudgetName(name)}, &cm); err != nil {
				continue
			}
			b, err := cluster.ParseBudget(cm.Annotations)
			if err != nil || b.Models[name] == nil {
				continue
			}
			var use, places int64
			byEval := map[string]int64{}
			settled := true
			for k, g := range b.Models[name].Grants {
				use += g.Use().RequestsPerMinute
				places += g.Use().MaxInFlight
				byEval[strings.SplitN(k, "/", 2)[0]] += g.Share.RequestsPerMinute
				settled = settled && g.Acked >= g.Since
			}
			w.mu.Lock()
			w.maxUse, w.maxPlaces = max(w.maxUse, use), max(w.maxPlaces, places)
			if settled && len(byEval) == evaluations {
				for ev, s := range byEval {
					w.settled[ev] = max(w.settled[ev], s)
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *endpointWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// TestEndpointSharedByTwoEvaluations: two Evaluations of weights 2 and 1 call
// through one ModelEndpoint. The grants never sum above its limit, each gets
// its weighted share while both run, the server sees the limit's pace (not
// twice it), the key comes from the endpoint's Secret and appears in no Job,
// and the endpoint's status counts the Evaluations and what they send.
func TestEndpointSharedByTwoEvaluations(t *testing.T) {
	ns := newNamespace(t)
	const key = "sk-team-abcdef123456"
	const window, limit = 3 * time.Second, 1200
	srv := teamEndpoint(t, ns, key, limit, window)
	w := watchEndpoint(t, ns, "team", 2)
	for _, e := range []struct {
		name   string
		weight int32
	}{{"heavy", 2}, {"light", 1}} {
		create(t, testutil.MakeEvaluation(e.name, ns).InlineDataset("d", 120).EndpointModel("m", "team", e.weight).
			Scorer(v1alpha1.ScorerExactMatch).ShardSize(40).Parallelism(2).Concurrency(4).Obj())
	}
	for _, name := range []string{"heavy", "light"} {
		waitPhase(t, ns, name, v1alpha1.PhaseSucceeded, 120*time.Second)
		checkRecords(t, ns, name, []string{"m"}, sampleIDs("d", 120))
	}
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxUse > limit {
		t.Errorf("the endpoint's grants allowed %d rpm in sum, over its limit %d", w.maxUse, limit)
	}
	if w.settled["heavy"] != 800 || w.settled["light"] != 400 {
		t.Errorf("while both ran, the settled shares were %v, want heavy 800 and light 400 (weights 2:1 of %d)", w.settled, limit)
	}
	if w.maxEvaluations != 2 || w.maxAchieved == 0 {
		t.Errorf("the endpoint's status counted at most %d Evaluations and %d rpm achieved, want 2 and some", w.maxEvaluations, w.maxAchieved)
	}
	st := srv.Stats()
	if bound := int(limit*window/time.Minute) + 4*2; st.MaxRequestsInWindow > bound {
		t.Errorf("the server saw %d requests within %v, want at most %d: the Evaluations did not share the limit", st.MaxRequestsInWindow, window, bound)
	}
	if st.Rejected != 0 || st.Succeeded != 240 || st.RateLimited != 0 {
		t.Errorf("server stats %+v: want 240 answered calls, none refused for a bad key and none by the server's bucket", st)
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(jobs.Items); strings.Contains(string(b), key) {
		t.Error("the API key appears in a Job")
	}
}

// TestEndpointMissingThenDeletedMidRun: an Evaluation whose endpoint does not
// exist waits in Pending with the reason, starts when it is made, holds its
// calls (Running, EndpointUnavailable, nothing failed) when it is deleted, and
// finishes with every sample once when it is back.
func TestEndpointMissingThenDeletedMidRun(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 10 * time.Millisecond})
	startManager(t, ns)
	k := startKubelet(t, ns)
	create(t, testutil.MakeEvaluation("waits", ns).InlineDataset("d", 60).EndpointModel("m", "later", 0).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(30).Parallelism(2).Concurrency(2).Obj())
	eventually(t, 20*time.Second, "Pending because of the ModelEndpoint", func() (bool, string) {
		ev := getEvaluation(t, ns, "waits")
		c := findCondition(ev, v1alpha1.ConditionProgressing)
		ok := ev.Status.Phase == v1alpha1.PhasePending && c != nil && c.Reason == v1alpha1.ReasonEndpointNotFound &&
			strings.Contains(c.Message, "ModelEndpoint later (spec.models[0].endpointRef, model m) not found")
		return ok, fmt.Sprintf("phase %s condition %+v", ev.Status.Phase, c)
	})
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("%d Jobs created before the ModelEndpoint existed", len(jobs.Items))
	}

	create(t, testutil.MakeEndpoint("later", ns, url).RequestsPerMinute(300).Obj())
	eventually(t, 30*time.Second, "some samples done", func() (bool, string) {
		ev := getEvaluation(t, ns, "waits")
		return ev.Status.Progress != nil && ev.Status.Progress.Completed >= 10, fmt.Sprintf("progress %+v", ev.Status.Progress)
	})
	if err := k8sClient.Delete(context.Background(), testutil.MakeEndpoint("later", ns, url).Obj()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "EndpointUnavailable while Running", func() (bool, string) {
		ev := getEvaluation(t, ns, "waits")
		c := findCondition(ev, v1alpha1.ConditionEndpointUnavailable)
		ok := ev.Status.Phase == v1alpha1.PhaseRunning && c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonEndpointNotFound
		return ok, fmt.Sprintf("phase %s condition %+v", ev.Status.Phase, c)
	})
	// The runner pods hold the calls: the server hears nothing more.
	heldWhileGone(t, srv, ns, "waits", 3*time.Second) // the calls under way when the pods noticed finish
	// A pod replaced meanwhile (evicted, its node lost) waits for the endpoint
	// too, instead of failing until its shard is given up on.
	if !k.kill("m", 0) {
		t.Fatal("shard m/0 was not running")
	}
	time.Sleep(3 * time.Second)
	if n := k.attempts("m", 0); n > 2 {
		t.Errorf("shard m/0 started %d times while the endpoint was gone, want its replacement waiting", n)
	}

	create(t, testutil.MakeEndpoint("later", ns, url).RequestsPerMinute(300).Obj())
	ev := waitPhase(t, ns, "waits", v1alpha1.PhaseSucceeded, 60*time.Second)
	checkRecords(t, ns, "waits", []string{"m"}, sampleIDs("d", 60))
	if c := findCondition(ev, v1alpha1.ConditionEndpointUnavailable); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonEndpointFound {
		t.Errorf("EndpointUnavailable at the end: %+v, want False (%s)", c, v1alpha1.ReasonEndpointFound)
	}
}

// heldWhileGone checks, once settle has passed, that Evaluation name of ns
// calls the server no more while its ModelEndpoint is gone, and stays
// Running with nothing errored.
func heldWhileGone(t *testing.T, srv *fakellm.Server, ns, name string, settle time.Duration) {
	t.Helper()
	time.Sleep(settle)
	before := srv.Stats().Requests
	time.Sleep(3 * time.Second)
	if after := srv.Stats().Requests; after != before {
		t.Errorf("the server got %d calls while the ModelEndpoint was gone", after-before)
	}
	if ev := getEvaluation(t, ns, name); ev.Status.Phase != v1alpha1.PhaseRunning || ev.Status.Progress.Errored != 0 {
		t.Fatalf("while the endpoint was gone: phase %s progress %+v, want Running with nothing errored", ev.Status.Phase, ev.Status.Progress)
	}
}

// TestEndpointOfAnotherNamespaceFails: a model may not call through another
// namespace's ModelEndpoint (it holds that namespace's key): the run fails at
// once, naming the field, without starting anything.
func TestEndpointOfAnotherNamespaceFails(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	ev := testutil.MakeEvaluation("borrows", ns).InlineDataset("d", 3).EndpointModel("m", "theirs", 0).Scorer(v1alpha1.ScorerExactMatch).Obj()
	ev.Spec.Models[0].EndpointRef.Namespace = "other-team"
	create(t, ev)
	got := waitPhase(t, ns, "borrows", v1alpha1.PhaseFailed, 20*time.Second)
	c := findCondition(got, v1alpha1.ConditionFailed)
	if c == nil || c.Reason != v1alpha1.ReasonInvalidSpec || !strings.Contains(c.Message, "spec.models[0].endpointRef.namespace: ModelEndpoint other-team/theirs is in another namespace") {
		t.Errorf("Failed condition %+v", c)
	}
}

// TestEndpointLimitEditAppliesWithinSeconds: a ModelEndpoint's limit edited
// while an Evaluation calls through it applies within seconds, raised and
// lowered, without a new run.
func TestEndpointLimitEditAppliesWithinSeconds(t *testing.T) {
	ns := newNamespace(t)
	var calls arrivals
	_, url := fakeLLM(t, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		calls.add()
		return fakellm.DefaultReply(req)
	}})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEndpoint("key", ns, url).RequestsPerMinute(20).Obj())
	create(t, testutil.MakeEvaluation("paced", ns).InlineDataset("d", 400).EndpointModel("m", "key", 0).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(400).Concurrency(16).Obj())
	eventually(t, 30*time.Second, "calls at the first limit", func() (bool, string) {
		n := len(calls.since(time.Time{}))
		return n >= 3, fmt.Sprintf("%d calls", n)
	})
	run := getEvaluation(t, ns, "paced").Status.Run
	setLimit := func(rpm int64) time.Time {
		var ep v1alpha1.ModelEndpoint
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "key"}, &ep); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(ep.DeepCopy())
		ep.Spec.Limits.RequestsPerMinute = rpm
		if err := k8sClient.Patch(context.Background(), &ep, patch); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	raised := setLimit(1200)
	eventually(t, 40*time.Second, "20 calls after raising to 1200/min", func() (bool, string) {
		n := len(calls.since(raised))
		return n >= 20, fmt.Sprintf("%d calls since the raise", n)
	})
	if took := calls.since(raised)[19].Sub(raised); took > 6*time.Second {
		t.Errorf("the raise took %v to apply, want a few seconds", took)
	}
	lowered := setLimit(60)
	time.Sleep(12 * time.Second)
	// From three seconds after the edit on, the new pace: about one call a second.
	if n := len(calls.since(lowered.Add(3 * time.Second))); n > 11 {
		t.Errorf("%d calls in the 9 s from 3 s after lowering to 60/min", n)
	}
	if got := getEvaluation(t, ns, "paced").Status.Run; got != run {
		t.Errorf("the edit started a new run (%s, was %s)", got, run)
	}
	var ep v1alpha1.ModelEndpoint
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "key"}, &ep); err != nil {
		t.Fatal(err)
	}
	if ep.Status.Limits == nil || ep.Status.Limits.RequestsPerMinute != 60 || ep.Status.Shards != 1 || ep.Status.Evaluations != 1 {
		t.Errorf("status %+v: want the limit in force (60), one Evaluation and one shard", ep.Status)
	}
	_ = k8sClient.Delete(context.Background(), getEvaluation(t, ns, "paced"))
}

// TestQuotaSharedAcrossNamespaces: two namespaces, each with its own key in
// its own Secret and ModelEndpoint, share one account's limit through a
// ModelQuota, with namespace weights 2 and 1. The endpoints' limits in force
// never sum above the quota, each gets its weighted part while both run, the
// server sees the quota's pace, and a namespace the quota does not list
// waits, its endpoint not Ready.
func TestQuotaSharedAcrossNamespaces(t *testing.T) {
	nsA, nsB, nsC := newNamespace(t), newNamespace(t), newNamespace(t)
	const window = 3 * time.Second
	// The account's limit as a provider enforces it: a bucket refilled
	// continuously holding a second of it (the server counts over window).
	const limit = 1200
	srv, url := fakeLLM(t, fakellm.Config{Latency: 10 * time.Millisecond, Window: window,
		RequestsPerMinute: int(limit * window / time.Minute), BurstWindow: time.Second})
	startManager(t, nsA+","+nsB+","+nsC)
	for _, ns := range []string{nsA, nsB, nsC} {
		startKubelet(t, ns)
	}
	quota := &v1alpha1.ModelQuota{ObjectMeta: metav1.ObjectMeta{Name: "account-" + nsA},
		Spec: v1alpha1.ModelQuotaSpec{Limits: v1alpha1.EndpointLimits{RequestsPerMinute: limit},
			Namespaces: []v1alpha1.QuotaNamespace{{Name: nsA, Weight: ptrTo[int32](2)}, {Name: nsB}}}}
	create(t, quota)
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), quota) })
	for _, ns := range []string{nsA, nsB, nsC} {
		ep := testutil.MakeEndpoint("team", ns, url).Obj()
		ep.Spec.QuotaRef = &v1alpha1.QuotaReference{Name: quota.Name}
		create(t, ep)
		create(t, testutil.MakeEvaluation("suite", ns).InlineDataset("d", 120).EndpointModel("m", "team", 0).
			Scorer(v1alpha1.ScorerExactMatch).ShardSize(40).Parallelism(2).Concurrency(4).Obj())
	}

	var mu sync.Mutex
	maxSum, settledA, settledB := int64(0), int64(0), int64(0)
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var q v1alpha1.ModelQuota
			if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: quota.Name}, &q); err != nil {
				continue
			}
			b, err := cluster.ParseBudget(q.Annotations)
			if err != nil || b.Models[quota.Name] == nil {
				continue
			}
			var sum int64
			settled := len(b.Models[quota.Name].Grants) == 2
			for _, g := range b.Models[quota.Name].Grants {
				sum += g.Use().RequestsPerMinute
				settled = settled && g.Acked >= g.Since
			}
			// While both run: both hold a part (one that finished keeps a part
			// of nothing until it has acknowledged it).
			a := b.Models[quota.Name].Grants[nsA+"/team"].Share.RequestsPerMinute
			bb := b.Models[quota.Name].Grants[nsB+"/team"].Share.RequestsPerMinute
			mu.Lock()
			maxSum = max(maxSum, sum)
			if settled && a > 0 && bb > 0 {
				settledA, settledB = max(settledA, a), max(settledB, bb)
			}
			mu.Unlock()
		}
	}()
	// The namespace the quota does not list waits, and says why.
	eventually(t, 20*time.Second, "the unlisted namespace's endpoint not Ready", func() (bool, string) {
		var ep v1alpha1.ModelEndpoint
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: nsC, Name: "team"}, &ep); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonQuotaNotAllowed, fmt.Sprintf("%+v", c)
	})
	for _, ns := range []string{nsA, nsB} {
		waitPhase(t, ns, "suite", v1alpha1.PhaseSucceeded, 120*time.Second)
		checkRecords(t, ns, "suite", []string{"m"}, sampleIDs("d", 120))
	}
	ev := getEvaluation(t, nsC, "suite")
	if ev.Status.Phase != v1alpha1.PhasePending || len(ev.Status.Conditions) == 0 {
		t.Errorf("the unlisted namespace's Evaluation: phase %s; want Pending, no runner pod started (they could not call)", ev.Status.Phase)
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(nsC)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("the unlisted namespace has %d Jobs (%v), want none", len(jobs.Items), err)
	}
	if c := findCondition(ev, v1alpha1.ConditionEndpointUnavailable); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonEndpointNotReady ||
		!strings.Contains(c.Message, "does not list namespace "+nsC) || ev.Status.Reason != v1alpha1.ReasonEndpointNotReady {
		t.Errorf("the unlisted namespace's Evaluation: reason %q, EndpointUnavailable %+v; want it to say why it waits", ev.Status.Reason, c)
	}
	close(stop)
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if maxSum > limit {
		t.Errorf("the quota's parts allowed %d rpm in sum, over its limit %d", maxSum, limit)
	}
	if settledA != 800 || settledB != 400 {
		t.Errorf("while both ran, the settled parts were %d and %d, want 800 and 400 (weights 2:1 of %d)", settledA, settledB, limit)
	}
	st := srv.Stats()
	if bound := int(limit*window/time.Minute) + 4*2; st.MaxRequestsInWindow > bound {
		t.Errorf("the server saw %d requests within %v, want at most %d: the namespaces did not share the quota", st.MaxRequestsInWindow, window, bound)
	}
	if st.RateLimited != 0 {
		t.Errorf("the server's bucket refused %d of %d calls: the namespaces' calls went in bursts together", st.RateLimited, st.Requests)
	}
}

// teamEndpoint starts the manager and the kubelet for ns, a fake server
// (counting over window) that wants key, and ModelEndpoint team limited to
// limit rpm, its key in Secret team.
func teamEndpoint(t *testing.T, ns, key string, limit int64, window time.Duration) *fakellm.Server {
	// The key's limit as a provider enforces it: a bucket refilled
	// continuously holding a second of it (the server counts over window).
	srv, url := fakeLLM(t, fakellm.Config{APIKey: key, Latency: 10 * time.Millisecond, Window: window,
		RequestsPerMinute: int(limit * int64(window) / int64(time.Minute)), BurstWindow: time.Second})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"}, StringData: map[string]string{"key": key}})
	create(t, testutil.MakeEndpoint("team", ns, url).RequestsPerMinute(limit).APIKeySecret("team", "key").Obj())
	return srv
}

// buildFakeAgent builds test/fakeagent: an agent that makes its own model
// calls through the endpoint in its environment.
func buildFakeAgent(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fakeagent")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/proctor-dev/proctor/test/fakeagent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, out)
	}
	return bin
}

// TestAgentCallsThroughASharedEndpoint: an agent making three model calls per
// sample through its endpoint's proxy, and another Evaluation's model calling
// through the same endpoint, share its limit: the grants never sum above it,
// both get a share while both run, every agent call reaches the server with
// the endpoint's key (from its Secret, in no Job and never in the agent's
// environment) and is counted in its sample's record.
func TestAgentCallsThroughASharedEndpoint(t *testing.T) {
	ns := newNamespace(t)
	const key = "sk-team-agent-0f9e8d7c"
	const window, limit = 3 * time.Second, 1200
	agent := buildFakeAgent(t)
	srv := teamEndpoint(t, ns, key, limit, window)
	w := watchEndpoint(t, ns, "team", 2)
	create(t, testutil.MakeEvaluation("agents", ns).InlineDataset("d", 40).
		AgentModel("bot", []string{agent, "-calls", "3", "-model", "fake-agent", "{{ .Prompt }}"}, "team").
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(20).Parallelism(2).Concurrency(2).Obj())
	create(t, testutil.MakeEvaluation("plain", ns).InlineDataset("d", 120).EndpointModel("m", "team", 1).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(40).Parallelism(2).Concurrency(4).Obj())
	for _, name := range []string{"agents", "plain"} {
		waitPhase(t, ns, name, v1alpha1.PhaseSucceeded, 120*time.Second)
	}
	w.end()
	var calls int64
	for _, rec := range readResults(t, ns, "agents") {
		if rec.Error != "" || rec.AgentCalls != 3 || rec.InputTokens == 0 {
			t.Errorf("sample %s: error %q, agentCalls %d, inputTokens %d; want no error, 3 calls and their tokens", rec.ID, rec.Error, rec.AgentCalls, rec.InputTokens)
		}
		calls += rec.AgentCalls
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxUse > limit {
		t.Errorf("the endpoint's grants allowed %d rpm in sum, over its limit %d", w.maxUse, limit)
	}
	if w.settled["agents"] == 0 || w.settled["plain"] == 0 || w.settled["agents"]+w.settled["plain"] > limit {
		t.Errorf("while both ran, the settled shares were %v, want both within %d", w.settled, limit)
	}
	st := srv.Stats()
	if calls != 120 || st.Succeeded != 240 || st.Rejected != 0 {
		t.Errorf("records count %d agent calls; server stats %+v: want 120 agent calls, 240 answered and none refused for a bad key", calls, st)
	}
	if bound := int(limit*window/time.Minute) + 2*2*4 + 2*4; st.MaxRequestsInWindow > bound {
		t.Errorf("the server saw %d requests within %v, want at most %d", st.MaxRequestsInWindow, window, bound)
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(jobs.Items)
	if strings.Contains(string(b), key) {
		t.Error("the API key appears in a Job")
	}
	if !strings.Contains(string(b), cluster.EndpointKeyEnv("team")) {
		t.Errorf("no Job gives its runner %s", cluster.EndpointKeyEnv("team"))
	}
}

// TestEndpointMaxInFlight: two Evaluations whose shards could have 16 calls in
// flight together call through an endpoint allowing 3: the server never has
// more than 3 at once, the grants never sum above 3, and both finish.
func TestEndpointMaxInFlight(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 100 * time.Millisecond})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEndpoint("gpu", ns, url).MaxInFlight(3).Obj())
	w := watchEndpoint(t, ns, "gpu", 2)
	for _, name := range []string{"first", "second"} {
		create(t, testutil.MakeEvaluation(name, ns).InlineDataset("d", 40).EndpointModel("m", "gpu", 0).
			Scorer(v1alpha1.ScorerExactMatch).ShardSize(20).Parallelism(2).Concurrency(4).Obj())
	}
	for _, name := range []string{"first", "second"} {
		waitPhase(t, ns, name, v1alpha1.PhaseSucceeded, 120*time.Second)
		checkRecords(t, ns, name, []string{"m"}, sampleIDs("d", 40))
	}
	w.end()
	if st := srv.Stats(); st.MaxInFlight > 3 || st.Succeeded != 80 {
		t.Errorf("server stats %+v: want at most 3 requests in flight at once and 80 answered", st)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxPlaces > 3 || w.maxPlaces == 0 {
		t.Errorf("the grants allowed %d calls in flight in sum, want at most 3 (and some)", w.maxPlaces)
	}
	if ep := getEndpoint(t, ns, "gpu"); ep.Status.Limits == nil || ep.Status.Limits.MaxInFlight != 3 {
		t.Errorf("status.limits %+v, want maxInFlight 3 in force", ep.Status.Limits)
	}
}

func getEndpoint(t *testing.T, ns, name string) *v1alpha1.ModelEndpoint {
	t.Helper()
	var ep v1alpha1.ModelEndpoint
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &ep); err != nil {
		t.Fatal(err)
	}
	return &ep
}

// TestAgentEndpointMissing: an agent calling through a ModelEndpoint that does
// not exist keeps its Evaluation Pending, naming the field, until it is made;
// deleted mid-run, it holds the agents (no sample fails for waiting on it)
// until it is back.
func TestAgentEndpointMissing(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 50 * time.Millisecond})
	agent := buildFakeAgent(t)
	startManager(t, ns)
	k := startKubelet(t, ns)
	ev := testutil.MakeEvaluation("waits", ns).InlineDataset("d", 40).
		AgentModel("bot", []string{agent, "-calls", "1", "{{ .Prompt }}"}, "later").Scorer(v1alpha1.ScorerExactMatch).Concurrency(2).Obj()
	ev.Spec.Models[0].Agent.Timeout = &v1alpha1.Timeout{Duration: 2 * time.Second}
	create(t, ev)
	eventually(t, 20*time.Second, "Pending because of the agent's ModelEndpoint", func() (bool, string) {
		ev := getEvaluation(t, ns, "waits")
		c := findCondition(ev, v1alpha1.ConditionProgressing)
		ok := ev.Status.Phase == v1alpha1.PhasePending && c != nil && c.Reason == v1alpha1.ReasonEndpointNotFound &&
			strings.Contains(c.Message, "ModelEndpoint later (spec.models[0].agent.endpoints[0].endpointRef, model bot) not found")
		return ok, fmt.Sprintf("phase %s condition %+v", ev.Status.Phase, c)
	})
	create(t, testutil.MakeEndpoint("later", ns, url).Obj())
	eventually(t, 30*time.Second, "some samples done", func() (bool, string) {
		ev := getEvaluation(t, ns, "waits")
		return ev.Status.Progress != nil && ev.Status.Progress.Completed >= 5, fmt.Sprintf("progress %+v", ev.Status.Progress)
	})
	if err := k8sClient.Delete(context.Background(), testutil.MakeEndpoint("later", ns, url).Obj()); err != nil {
		t.Fatal(err)
	}
	// Longer than the agent's timeout: the agents under way when the pod
	// noticed leave no record, the others do not start.
	heldWhileGone(t, srv, ns, "waits", 6*time.Second)
	create(t, testutil.MakeEndpoint("later", ns, url).Obj())
	waitPhase(t, ns, "waits", v1alpha1.PhaseSucceeded, 60*time.Second)
	if n := k.attempts("bot", 0); n != 1 {
		t.Errorf("the agents' pod started %d times, want once: held, it starts no agent that would only wait", n)
	}
	checkRecords(t, ns, "waits", []string{"bot"}, sampleIDs("d", 40))
	for _, rec := range readResults(t, ns, "waits") {
		if rec.AgentCalls != 1 || rec.Error != "" {
			t.Errorf("sample %s: %d agent calls, error %q; want 1 and none", rec.ID, rec.AgentCalls, rec.Error)
		}
	}
}

// TestEndpointOnePlaceForModelAndJudge: a model and its judge call through
// one endpoint allowing a single call in flight. Their grants cannot both
// hold the place, and a sample waits for its judge: the runner pod pools its
// callers' places, so that the run finishes, never with two calls in flight.
func TestEndpointOnePlaceForModelAndJudge(t *testing.T) {
	ns := newNamespace(t)
	srv, url := fakeLLM(t, fakellm.Config{Latency: 20 * time.Millisecond})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEndpoint("gpu", ns, url).MaxInFlight(1).Obj())
	ev := testutil.MakeEvaluation("judged", ns).InlineDataset("d", 10).EndpointModel("m", "gpu", 0).EndpointModel("j", "gpu", 5).
		Concurrency(4).Obj()
	ev.Spec.Scoring = []v1alpha1.Scorer{{Type: v1alpha1.ScorerJudge, Judge: &v1alpha1.Judge{Model: "j"}}}
	create(t, ev)
	waitPhase(t, ns, "judged", v1alpha1.PhaseSucceeded, 60*time.Second)
	if st := srv.Stats(); st.MaxInFlight != 1 || st.Succeeded != 20 {
		t.Errorf("server stats %+v: want 20 answered (10 answers, 10 verdicts), one at a time", st)
	}
}

// TestProviderLimitsMismatch: a provider whose rate-limit headers say a limit
// other than the declared one is shown: on the endpoint (status.provider, the
// Limits column's condition, a warning event) and on each Evaluation calling
// through it, and on an Evaluation whose own rateLimit is not its key's.
func TestProviderLimitsMismatch(t *testing.T) {
	ns := newNamespace(t)
	// Both servers allow 300 rpm; 600 is declared for each.
	_, epURL := fakeLLM(t, fakellm.Config{RequestsPerMinute: 300, Latency: 20 * time.Millisecond})
	_, ownURL := fakeLLM(t, fakellm.Config{RequestsPerMinute: 300, Latency: 20 * time.Millisecond})
	startManager(t, ns)
	startKubelet(t, ns)
	create(t, testutil.MakeEndpoint("team", ns, epURL).RequestsPerMinute(600).Obj())
	create(t, testutil.MakeEvaluation("via", ns).InlineDataset("d", 80).EndpointModel("m", "team", 0).
		Scorer(v1alpha1.ScorerExactMatch).Concurrency(2).Obj())
	create(t, testutil.MakeEvaluation("own", ns).InlineDataset("d", 80).OpenAIModel("m", ownURL).RateLimit(600).
		Scorer(v1alpha1.ScorerExactMatch).Concurrency(2).Obj())

	eventually(t, 60*time.Second, "the endpoint's LimitsMismatch", func() (bool, string) {
		ep := getEndpoint(t, ns, "team")
		c := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionLimitsMismatch)
		ok := c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonDeclaredLimitDiffers &&
			strings.Contains(c.Message, "300 requests per minute where 600 are declared") &&
			ep.Status.Provider != nil && ep.Status.Provider.RequestsPerMinute == 300
		return ok, fmt.Sprintf("condition %+v, provider %+v", c, ep.Status.Provider)
	})
	for _, tc := range []struct{ name, says string }{
		{"via", "ModelEndpoint team (spec.models[0].endpointRef): the provider's rate-limit headers say 300 requests per minute where 600 are declared"},
		{"own", "model m (spec.models[0].rateLimit): the provider's rate-limit headers say 300 requests per minute where 600 are declared"},
	} {
		eventually(t, 60*time.Second, tc.name+"'s LimitsMismatch", func() (bool, string) {
			ev := getEvaluation(t, ns, tc.name)
			c := findCondition(ev, v1alpha1.ConditionLimitsMismatch)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonDeclaredLimitDiffers && strings.Contains(c.Message, tc.says),
				fmt.Sprintf("%+v", c)
		})
		// Events follow the status write (and the recorder sends them
		// asynchronously), so they are awaited too.
		eventually(t, 10*time.Second, tc.name+"'s "+v1alpha1.ReasonDeclaredLimitDiffers+" event", func() (bool, string) {
			reasons := eventReasons(t, ns, tc.name)
			return slices.Contains(reasons, v1alpha1.ReasonDeclaredLimitDiffers), fmt.Sprint(reasons)
		})
	}
	eventually(t, 10*time.Second, "a warning event on the endpoint", func() (bool, string) {
		var events corev1.EventList
		if err := k8sClient.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "ModelEndpoint" && e.Reason == v1alpha1.ReasonDeclaredLimitDiffers && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(events.Items))
	})
}

// TestEndpointNotReadyEndsByStallTimeout: an Evaluation whose endpoint is not
// Ready (its ModelQuota does not list the namespace) starts no runner pod,
// says why, and fails after spec.runner.stallTimeout; its pods used to sit
// Running, unable to call, with no deadline.
func TestEndpointNotReadyEndsByStallTimeout(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{})
	startManager(t, ns)
	startKubelet(t, ns)
	quota := &v1alpha1.ModelQuota{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere-" + ns},
		Spec: v1alpha1.ModelQuotaSpec{Limits: v1alpha1.EndpointLimits{RequestsPerMinute: 60}, Namespaces: []v1alpha1.QuotaNamespace{{Name: "another"}}}}
	create(t, quota)
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), quota) })
	ep := testutil.MakeEndpoint("team", ns, url).Obj()
	ep.Spec.QuotaRef = &v1alpha1.QuotaReference{Name: quota.Name}
	create(t, ep)
	ev := testutil.MakeEvaluation("waiting", ns).InlineDataset("d", 4).EndpointModel("m", "team", 0).Scorer(v1alpha1.ScorerExactMatch).Obj()
	ev.Spec.Runner = &v1alpha1.Runner{StallTimeout: &v1alpha1.Timeout{Duration: 10 * time.Second}}
	create(t, ev)
	eventually(t, 30*time.Second, "Pending, saying why", func() (bool, string) {
		got := getEvaluation(t, ns, "waiting")
		return got.Status.Phase == v1alpha1.PhasePending && got.Status.Reason == v1alpha1.ReasonEndpointNotReady &&
			strings.Contains(got.Status.Message, "does not list namespace "+ns), fmt.Sprintf("%s %s %q", got.Status.Phase, got.Status.Reason, got.Status.Message)
	})
	got := waitPhase(t, ns, "waiting", v1alpha1.PhaseFailed, 60*time.Second)
	if got.Status.Reason != v1alpha1.ReasonEndpointNotReady || !strings.Contains(got.Status.Message, "spec.runner.stallTimeout") {
		t.Errorf("reason %q, message %q; want EndpointNotReady and the stall timeout", got.Status.Reason, got.Status.Message)
	}
	var jobs batchv1.JobList
	if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("%d Jobs (%v), want none: no pod could call", len(jobs.Items), err)
	}
}
