package shard

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// question is the arithmetic question of a fake server's request ("What is 4+1?").
func question(req fakellm.Request) string {
	for _, m := range req.Messages {
		if i := strings.Index(m.Content, "What is "); i >= 0 {
			return m.Content[i:]
		}
	}
	return ""
}

// TestWorkerStreamsIntoTheNextShard: worker 0's shards (0, 2, 4 of two
// samples, concurrency 2) run as one stream: when shard 0's second sample
// is answered, its slot takes shard 2's first sample while shard 0's first
// is still in flight. The server holds sample 0 until sample 4 (shard 2's)
// arrives: shard by shard, it would arrive only after sample 0 was
// answered.
func TestWorkerStreamsIntoTheNextShard(t *testing.T) {
	next := make(chan struct{})
	var once sync.Once
	var waitedOut bool
	f := newWorkerFixture(t, nil, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		switch question(req) {
		case "What is 0+1?":
			select {
			case <-next:
			case <-time.After(5 * time.Second):
				waitedOut = true
			}
		case "What is 4+1?":
			once.Do(func() { close(next) })
		}
		return fakellm.DefaultReply(req)
	}})
	if err := Run(context.Background(), f.c, f.options(t, 0)); err != nil {
		t.Fatalf("worker 0: %v", err)
	}
	if waitedOut {
		t.Error("shard 2 began only after shard 0's last sample was answered: the slots waited for the shard to drain")
	}
	for _, i := range []int{0, 2, 4} {
		if p := f.head(t, i); p.State != cluster.StateSucceeded || p.Done != 2 || p.Attempts != 1 {
			t.Errorf("shard %d: %+v, want succeeded, 2 done, 1 attempt", i, p)
		}
	}
	if got := f.llm.Stats().Requests; got != 6 {
		t.Errorf("the server answered %d requests, want 6", got)
	}
}

// TestWorkerStreamDrainedWithTwoShardsOpen: SIGTERM while the tail of shard
// 0 and the head of shard 2 are in flight leaves both to resume, with what
// finished of them kept and no attempt counted, and shard 4 not begun; the
// next pod asks only what is left.
func TestWorkerStreamDrainedWithTwoShardsOpen(t *testing.T) {
	var mu sync.Mutex
	holding := true
	asked := map[string]int{}
	release := make(chan struct{})
	bothOpen := make(chan struct{})
	f := newWorkerFixture(t, nil, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		q := question(req)
		mu.Lock()
		asked[q]++
		hold := holding && (q == "What is 0+1?" || q == "What is 4+1?")
		if holding && q == "What is 4+1?" {
			close(bothOpen)
		}
		mu.Unlock()
		if hold {
			<-release // answered only once the test ends: the pod cut it off
		}
		return fakellm.DefaultReply(req)
	}})
	t.Cleanup(func() { close(release) }) // before the server closes
	sigterm := f.runUntilSIGTERM(t, 0)
	select {
	case <-bothOpen:
	case <-time.After(10 * time.Second):
		t.Fatal("shard 2's first sample was never sent")
	}
	sigterm()
	for i, want := range map[int]int{0: 1, 2: 0} {
		if p := f.head(t, i); p.State != cluster.StateRunning || p.Done != want || p.Attempts != 0 {
			t.Errorf("shard %d after the drain: %+v, want running, %d done, no attempt counted", i, p, want)
		}
	}
	if n := f.wrote[cluster.HeadName("arith", f.run, "m", 4)]; n != 0 {
		t.Errorf("shard 4 was begun during the drain (%d writes)", n)
	}

	mu.Lock()
	holding = false
	mu.Unlock()
	if err := Run(context.Background(), f.c, f.options(t, 0)); err != nil {
		t.Fatalf("worker 0's next pod: %v", err)
	}
	for _, i := range []int{0, 2, 4} {
		if p := f.head(t, i); p.State != cluster.StateSucceeded || p.Done != 2 || p.Attempts != 1 {
			t.Errorf("shard %d: %+v, want succeeded, 2 done, 1 attempt", i, p)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"What is 0+1?": 2, "What is 1+1?": 1, "What is 4+1?": 2, "What is 5+1?": 1, "What is 8+1?": 1, "What is 9+1?": 1}
	if diff := cmp.Diff(want, asked); diff != "" {
		t.Errorf("questions asked, by how often (-want +got):\n%s", diff)
	}
}

// TestWorkerStreamSavesAShardFoundDone: a shard whose samples all have
// records, left unsaved by the pod before (it ended between its last
// checkpoint and marking the shard succeeded), succeeds as soon as the next
// pod begins it, without a call.
func TestWorkerStreamSavesAShardFoundDone(t *testing.T) {
	f := newWorkerFixture(t, map[int]cluster.ShardProgress{2: {State: cluster.StateRunning, Total: 2, Done: 2, Attempts: 1}}, fakellm.Config{})
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: "ns", Name: cluster.HeadName("arith", f.run, "m", 2)}
	if err := f.c.Get(context.Background(), key, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{cluster.KeyDone: "4-5"}
	if err := f.c.Update(context.Background(), &cm); err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), f.c, f.options(t, 0)); err != nil {
		t.Fatalf("worker 0: %v", err)
	}
	if p := f.head(t, 2); p.State != cluster.StateSucceeded || p.Done != 2 || p.Attempts != 2 {
		t.Errorf("shard 2: %+v, want succeeded, 2 done, on its second attempt", p)
	}
	if got := f.llm.Stats().Requests; got != 4 {
		t.Errorf("the server answered %d requests, want 4 (shards 0 and 4)", got)
	}
}

// TestWorkerStreams: what keeps a worker's shards one at a time.
func TestWorkerStreams(t *testing.T) {
	shards := []cluster.Shard{{Model: "m", Dataset: "d", Index: 0, Start: 0, End: 2}, {Model: "m", Dataset: "d", Index: 2, Start: 4, End: 6}}
	plan := func(batch ...string) *runner.Plan {
		p := &runner.Plan{Models: []*runner.Model{{Name: "m"}, {Name: "judge"}}}
		for _, m := range p.Models {
			if strings.Contains(strings.Join(batch, ","), m.Name) {
				m.Batch = &runner.BatchConfig{}
			}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		w    *worker
		want bool
	}{
		{"two shards", &worker{shards: shards, p: plan()}, true},
		{"one shard", &worker{shards: shards[:1], p: plan()}, false},
		{"a rate-limited model", &worker{shards: shards, p: plan(), limited: map[string]bool{"judge": true}}, false},
		{"a model calling through an endpoint", &worker{shards: shards, p: plan(), viaEndpoint: map[string]string{"m": "ep"}}, false},
		{"a spend budget", &worker{shards: shards, p: plan(), ev: &v1alpha1.Evaluation{Spec: v1alpha1.EvaluationSpec{Budget: &v1alpha1.Budget{}}}}, false},
		{"the response cache", &worker{shards: shards, p: plan(), ev: &v1alpha1.Evaluation{Spec: v1alpha1.EvaluationSpec{Cache: &v1alpha1.Cache{Enabled: true}}}}, false},
		{"a model in batch mode", &worker{shards: shards, p: plan("m")}, false},
		{"a judge in batch mode", &worker{shards: shards, p: plan("judge")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.w
			w.models = []string{"m", "judge"}
			w.log = testr.New(t)
			if w.ev == nil {
				w.ev = &v1alpha1.Evaluation{}
			}
			if got := w.streams(); got != tc.want {
				t.Errorf("streams() = %v, want %v", got, tc.want)
			}
		})
	}
}
