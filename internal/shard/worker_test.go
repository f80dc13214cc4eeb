package shard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// workerFixture is a run of 10 samples in shards of 2 (5 shards) on a fake
// API server, with its plan and heads as the controller makes them.
type workerFixture struct {
	c     client.WithWatch
	ev    *v1alpha1.Evaluation
	run   string
	llm   *fakellm.Server
	mu    sync.Mutex
	wrote map[string]int // head updates by name
	// onGet, if set, answers a Get of the named object instead of the client.
	onGet func(name string) error
}

func newWorkerFixture(t *testing.T, heads map[int]cluster.ShardProgress, cfg fakellm.Config) *workerFixture {
	t.Helper()
	f := &workerFixture{llm: fakellm.New(cfg), wrote: map[string]int{}}
	hs := httptest.NewServer(f.llm)
	t.Cleanup(hs.Close)
	ev := testutil.MakeEvaluation("arith", "ns").InlineDataset("d", 10).OpenAIModel("m", hs.URL+"/v1").
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(2).Parallelism(2).Concurrency(2).Obj()
	ev.UID = "uid-1"
	v1alpha1.SetDefaults(&ev.Spec)
	f.run = cluster.RunID(ev)
	f.ev = ev
	plan := cluster.NewPlan(&ev.Spec, map[string]int{"d": 10}, 0)
	planCM := cluster.NewPlanConfigMap(ev, f.run)
	cluster.SetPlan(planCM.Annotations, plan)
	objs := []client.Object{ev, planCM}
	for _, sh := range plan.Shards(&ev.Spec, "m") {
		head := cluster.NewHead(ev, cluster.HashSpec(&ev.Spec), f.run, sh, false)
		if p, ok := heads[sh.Index]; ok {
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			head.Annotations[cluster.AnnotationProgress] = string(b)
		}
		objs = append(objs, head)
	}
	f.c = fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			f.mu.Lock()
			onGet := f.onGet
			f.mu.Unlock()
			if onGet != nil {
				if err := onGet(key.Name); err != nil {
					return err
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				f.mu.Lock()
				f.wrote[obj.GetName()]++
				f.mu.Unlock()
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	return f
}

func (f *workerFixture) options(t *testing.T, worker int) Options {
	return Options{Namespace: "ns", Evaluation: "arith", Run: f.run, Model: "m", Index: worker, Workers: 2, ShardRetries: 3,
		Pod: "arith-m-" + f.run + "-0", LookupEnv: func(string) (string, bool) { return "", false }, WorkDir: t.TempDir(),
		FlushEvery: time.Hour, GracePeriod: time.Second, Log: testr.New(t)}
}

// runUntilSIGTERM runs a worker's pod in the background, with a short
// grace period; sigterm stops it as SIGTERM would, and fails the test
// unless the pod then drained (Run returned context.Canceled).
func (f *workerFixture) runUntilSIGTERM(t *testing.T, worker int) (sigterm func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o := f.options(t, worker)
	o.GracePeriod = 10 * time.Millisecond
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, f.c, o) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-ran; !errors.Is(err, context.Canceled) {
			t.Fatalf("worker %d = %v, want context.Canceled", worker, err)
		}
	}
}

func (f *workerFixture) head(t *testing.T, index int) cluster.ShardProgress {
	t.Helper()
	var cm corev1.ConfigMap
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: cluster.HeadName("arith", f.run, "m", index)}, &cm); err != nil {
		t.Fatal(err)
	}
	p, _ := cluster.ParseProgress(cm.Annotations)
	return p
}

// TestWorkerRunsItsShardsInTurn: worker 0 of 2 evaluates shards 0, 2 and
// 4, one after another, in one process, passing over the one an earlier pod
// finished (its head is not written); each shard it begins counts one
// attempt; worker 1's shards are left alone.
func TestWorkerRunsItsShardsInTurn(t *testing.T) {
	done := cluster.ShardProgress{State: cluster.StateSucceeded, Total: 2, Done: 2, Attempts: 1}
	f := newWorkerFixture(t, map[int]cluster.ShardProgress{2: done}, fakellm.Config{})
	if err := Run(context.Background(), f.c, f.options(t, 0)); err != nil {
		t.Fatalf("worker 0: %v", err)
	}
	for _, i := range []int{0, 4} {
		if p := f.head(t, i); p.State != cluster.StateSucceeded || p.Done != 2 || p.Attempts != 1 {
			t.Errorf("shard %d: %+v, want succeeded, 2 done, 1 attempt", i, p)
		}
	}
	if f.wrote[cluster.HeadName("arith", f.run, "m", 2)] != 0 {
		t.Error("the shard an earlier pod finished was written again")
	}
	for _, i := range []int{1, 3} {
		if p := f.head(t, i); p.State != "" || f.wrote[cluster.HeadName("arith", f.run, "m", i)] != 0 {
			t.Errorf("worker 1's shard %d was touched: %+v", i, p)
		}
	}
	if got := f.llm.Stats().Requests; got != 4 {
		t.Errorf("the server answered %d requests, want 4 (shards 0 and 4)", got)
	}
}

// TestWorkerFailsAShardPastItsRetries: a shard begun by shardRetries+1 pods
// that failed is failed for good (RetriesUsedError, exit code 4) before any
// call; one below that is begun again.
func TestWorkerFailsAShardPastItsRetries(t *testing.T) {
	failedOn := func(pods int) cluster.ShardProgress {
		return cluster.ShardProgress{State: cluster.StateRunning, Total: 2, Attempts: pods}
	}
	f := newWorkerFixture(t, map[int]cluster.ShardProgress{1: failedOn(3), 3: failedOn(4)}, fakellm.Config{})
	err := Run(context.Background(), f.c, f.options(t, 1))
	var used *RetriesUsedError
	if !errors.As(err, &used) || used.Shard.Index != 3 || used.Attempts != 4 {
		t.Fatalf("worker 1 = %v, want shard 3's retries used up after 4 pods", err)
	}
	// Shard 1, failed by 3 pods, ran on the fourth.
	if p := f.head(t, 1); p.State != cluster.StateSucceeded || p.Attempts != 4 {
		t.Errorf("shard 1: %+v, want succeeded on attempt 4", p)
	}
	if p := f.head(t, 3); p.Attempts != 4 || p.Done != 0 {
		t.Errorf("shard 3: %+v, want untouched (4 attempts, nothing done)", p)
	}
	if got := f.llm.Stats().Requests; got != 2 {
		t.Errorf("the server answered %d requests, want 2 (shard 1 only)", got)
	}
}

// TestWorkerDrainedTakesItsAttemptBack: a pod stopped by SIGTERM (a
// preemption, an eviction, a suspension) did not fail its shard.
func TestWorkerDrainedTakesItsAttemptBack(t *testing.T) {
	f := newWorkerFixture(t, nil, fakellm.Config{Latency: time.Second})
	sigterm := f.runUntilSIGTERM(t, 0)
	deadline := time.Now().Add(10 * time.Second)
	for f.head(t, 0).Attempts != 1 {
		if time.Now().After(deadline) {
			t.Fatal("shard 0 was never begun")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sigterm() // while its first calls are in flight
	if p := f.head(t, 0); p.Attempts != 0 || p.State != cluster.StateRunning {
		t.Errorf("shard 0 after a drain: %+v, want no attempt counted, still to run", p)
	}
	for _, i := range []int{2, 4} {
		if p := f.head(t, i); p.Attempts != 0 {
			t.Errorf("shard %d: begun after the drain (%+v)", i, p)
		}
	}
}

// TestWorkerOfAnObsoleteRun: an edit that starts another run deletes this
// run's heads; a worker that finds its next head gone ends as obsolete (exit
// 0), not failed.
func TestWorkerOfAnObsoleteRun(t *testing.T) {
	f := newWorkerFixture(t, nil, fakellm.Config{})
	next := cluster.HeadName("arith", f.run, "m", 2)
	f.onGet = func(name string) error {
		if name != next {
			return nil
		}
		f.mu.Lock()
		f.onGet = nil
		f.mu.Unlock()
		ev := f.ev.DeepCopy()
		if err := f.c.Delete(context.Background(), ev); err != nil {
			t.Error(err)
		}
		return apierrors.NewNotFound(corev1.Resource("configmaps"), name)
	}
	if err := Run(context.Background(), f.c, f.options(t, 0)); !errors.Is(err, kube.ErrObsolete) {
		t.Fatalf("worker 0 = %v, want kube.ErrObsolete", err)
	}
	if p := f.head(t, 0); p.State != cluster.StateSucceeded {
		t.Errorf("shard 0 before the edit: %+v, want succeeded", p)
	}
}

// TestWorkerReadsItsStartAtOnce: a pod's start reads its plan, the cache
// sources and its first shard's head while it reads the Evaluation, not
// after (four round trips in a row were most of a runner's start on a busy
// node), and each of them once: the read ahead serves the first Get.
func TestWorkerReadsItsStartAtOnce(t *testing.T) {
	f := newWorkerFixture(t, nil, fakellm.Config{})
	ahead := []string{cluster.PlanName("arith", f.run), cluster.CacheSourcesName("arith", f.run), cluster.HeadName("arith", f.run, "m", 1)}
	var mu sync.Mutex
	reads := map[string]int{}
	allAhead := make(chan struct{})
	var once sync.Once
	f.onGet = func(name string) error {
		mu.Lock()
		reads[name]++
		seen := 0
		for _, n := range ahead {
			if reads[n] > 0 {
				seen++
			}
		}
		mu.Unlock()
		if seen == len(ahead) {
			once.Do(func() { close(allAhead) })
		}
		if name != "arith" {
			return nil
		}
		select {
		case <-allAhead:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the Evaluation was read before the ConfigMaps read ahead were asked for")
		}
	}
	if err := Run(context.Background(), f.c, f.options(t, 1)); err != nil {
		t.Fatalf("worker 1: %v", err)
	}
	mu.Lock()
	for _, n := range ahead {
		if reads[n] != 1 {
			t.Errorf("%s read %d times, want once", n, reads[n])
		}
	}
	mu.Unlock()
	if p := f.head(t, 1); p.State != cluster.StateSucceeded {
		t.Errorf("shard 1: %+v, want succeeded", p)
	}
}
