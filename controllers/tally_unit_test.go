package controllers

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
)

// readLog counts the ConfigMaps a reconciler reads whole (Get), by name.
type readLog struct {
	mu    sync.Mutex
	names []string
}

func (l *readLog) funcs() interceptor.Funcs {
	return interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.ConfigMap); ok {
			l.mu.Lock()
			l.names = append(l.names, key.Name)
			l.mu.Unlock()
		}
		return c.Get(ctx, key, obj, opts...)
	}}
}

// take returns the names read since the last take, sorted, once each.
func (l *readLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Compact(slices.Sorted(slices.Values(l.names)))
	l.names = nil
	return out
}

// tallyRun is finishedRun with models small and big (two shards of d each)
// and a log of the ConfigMaps the reconciler reads.
func tallyRun(t *testing.T) (*harness, *v1alpha1.Evaluation, string, *readLog) {
	t.Helper()
	reads := &readLog{}
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).
		OpenAIModel("small", llmURL).OpenAIModel("big", llmURL).
		Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Generation(1).Obj())
	h := newHarness(t, harnessOpts{objs: []client.Object{ev}, funcs: reads.funcs()})
	h.mustReconcile(ev)
	h.rec.take()
	reads.take()
	return h, ev, cluster.RunID(ev), reads
}

// succeededShard is shard index of model as its runner leaves it: its first
// three records sealed in a chunk, the last three pending in its head, the
// middle one in both (the head's, written later, counts; it errored). A
// changed chunk (changed: its first sample errored) is a zombie runner's
// late write.
func succeededShard(t *testing.T, run, model string, index int, changed bool) []client.Object {
	t.Helper()
	s, first := shardOf(model, index), 5*index
	sealed := recsOf(model, "d", first, first+1, first+2)
	if changed {
		sealed[first] = erroredRec(model, "d", first)
	}
	pending := recsOf(model, "d", first+3, first+4)
	pending[first+2] = erroredRec(model, "d", first+2)
	return []client.Object{
		chunkCM(t, "arith", run, s, 0, sealed, first, first+1, first+2),
		headCM(t, "arith", run, s, cluster.ShardProgress{State: cluster.StateSucceeded, Total: 5, Done: 5, Errored: 1}, pending, first+2, first+3, first+4),
	}
}

// shardNames are the ConfigMaps of shard index of model: its chunk and head.
func shardNames(run, model string, index int) []string {
	head := cluster.HeadName("arith", run, model, index)
	return []string{cluster.ChunkName(head, 0), head}
}

// ended is what a run ended with: its status's results and score, and its
// NAME-results summary and records (uncompressed).
type ended struct {
	Phase   v1alpha1.Phase
	Results []v1alpha1.ModelResult
	Score   string
	Summary string
	Records string
}

func endedWith(t *testing.T, h *harness) ended {
	t.Helper()
	st := h.eval("arith").Status
	cm := h.configMaps()["arith-results"]
	if cm == nil {
		t.Fatalf("no arith-results (phase %s: %s)", st.Phase, st.Message)
	}
	return ended{Phase: st.Phase, Results: st.Results, Score: st.Score, Summary: cm.Data[cluster.ResultsKeySummary],
		Records: string(gunzip(t, cm.BinaryData[cluster.ResultsKeyRecords]))}
}

// gatheredAtOnce is what the run ends with when every shard is there at its
// first pass, changed by change: nothing was tallied before its end.
func gatheredAtOnce(t *testing.T, change func(h *harness, run string)) ended {
	t.Helper()
	h, ev, run, _ := tallyRun(t)
	for _, model := range []string{"small", "big"} {
		for i := range 2 {
			h.create(succeededShard(t, run, model, i, false)...)
		}
	}
	if change != nil {
		change(h, run)
	}
	h.mustReconcile(ev)
	return endedWith(t, h)
}

// The shards that succeed while a run runs are tallied then, each pair's in
// sample order (big's second shard waits for its first): the run's end
// reads only the shards left, and ends with what gathering every shard at
// the end gives.
func TestRunningTallyReadsOnlyWhatTheEndLeft(t *testing.T) {
	h, ev, run, reads := tallyRun(t)
	h.create(succeededShard(t, run, "small", 0, false)...)
	h.create(succeededShard(t, run, "big", 1, false)...)
	h.mustReconcile(ev)
	if got := h.eval("arith").Status.Phase; got != v1alpha1.PhaseRunning {
		t.Fatalf("phase %s with two shards running, want Running", got)
	}
	// (Chunks hold only records; heads are read for more.)
	read := reads.take()
	if chunk := shardNames(run, "small", 0)[0]; !slices.Contains(read, chunk) {
		t.Errorf("read %v while running: not %s, of the shard that succeeded", read, chunk)
	}
	if chunk := shardNames(run, "big", 1)[0]; slices.Contains(read, chunk) {
		t.Errorf("read %v while running: %s, of a shard whose pair's first is running", read, chunk)
	}

	h.create(succeededShard(t, run, "small", 1, false)...)
	h.create(succeededShard(t, run, "big", 0, false)...)
	h.mustReconcile(ev)
	// The end reads its last shards' records, big's two in order.
	want := slices.Concat(shardNames(run, "small", 1), shardNames(run, "big", 0), shardNames(run, "big", 1))
	var gotRecords []string
	for _, n := range reads.take() {
		if n != "arith-results" && n != cluster.PlanName("arith", run) {
			gotRecords = append(gotRecords, n)
		}
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(want)), gotRecords); diff != "" {
		t.Errorf("records read at the end (-want +got):\n%s", diff)
	}
	got := endedWith(t, h)
	if got.Phase != v1alpha1.PhaseSucceeded {
		t.Fatalf("phase %s, want Succeeded", got.Phase)
	}
	if diff := cmp.Diff(gatheredAtOnce(t, nil), got); diff != "" {
		t.Errorf("the run's end (-gathered at once +tallied while running):\n%s", diff)
	}
	if got.Results[0].Completed != 10 || got.Results[0].Errored != 2 {
		t.Errorf("small: %d completed, %d errored; want 10 and 2 (each sample once, the later record)", got.Results[0].Completed, got.Results[0].Errored)
	}
}

// A shard tallied while the run ran whose ConfigMaps changed since (a late
// write, one added or gone) is read again at the end, with all the others:
// the run ends with what its ConfigMaps hold then.
func TestRunningTallyNotUsedOnceAShardChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *harness, run string)
	}{{
		name: "a chunk rewritten",
		change: func(h *harness, run string) {
			h.create(succeededShard(t, run, "small", 0, true)[0])
		},
	}, {
		name: "a chunk added",
		change: func(h *harness, run string) {
			// Sealed after chunk 0: its record of sample 1 is the later.
			h.create(chunkCM(t, "arith", run, shardOf("small", 0), 1, map[int]results.Record{1: erroredRec("small", "d", 1)}, 1))
		},
	}, {
		name: "a chunk gone",
		change: func(h *harness, run string) {
			cm := &corev1.ConfigMap{}
			cm.Namespace, cm.Name = testNS, shardNames(run, "small", 0)[0]
			if err := h.c.Delete(h.ctx, cm); err != nil {
				t.Fatal(err)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h, ev, run, reads := tallyRun(t)
			h.create(succeededShard(t, run, "small", 0, false)...)
			h.mustReconcile(ev)
			if got := reads.take(); !slices.Contains(got, shardNames(run, "small", 0)[0]) {
				t.Fatalf("read %v while running: the succeeded shard was not tallied", got)
			}
			tc.change(h, run)
			h.create(succeededShard(t, run, "small", 1, false)...)
			h.create(succeededShard(t, run, "big", 0, false)...)
			h.create(succeededShard(t, run, "big", 1, false)...)
			h.mustReconcile(ev)
			if got := reads.take(); !slices.Contains(got, shardNames(run, "small", 0)[1]) {
				t.Errorf("read %v at the end: the changed shard was not read again", got)
			}
			got := endedWith(t, h)
			want := gatheredAtOnce(t, tc.change)
			if got.Records == gatheredAtOnce(t, nil).Records {
				t.Fatalf("the change changed no record: the test shows nothing")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the run's end (-gathered at once +tallied while running):\n%s", diff)
			}
		})
	}
}

// A running tally whose parts went to another store location or generation
// than the end commits (the run stopped and went on, or has no store now),
// or to none while the end writes some, is not used.
func TestRunningTallyWroteWhereTheEndCommits(t *testing.T) {
	open := func(location string) *objstore.Store {
		loc, err := objstore.ParseURL(location)
		if err != nil {
			t.Fatal(err)
		}
		s, err := objstore.Open(context.Background(), loc, objstore.Options{Endpoint: "http://127.0.0.1:1", AccessKeyID: "id", SecretAccessKey: "key"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	writer := func(location string, gen int64) *storeWriter {
		return &storeWriter{at: open(location), gen: gen}
	}
	for _, tc := range []struct {
		name       string
		tallied    *storeWriter
		end        *storeWriter
		wantUsable bool
	}{
		{name: "no store", wantUsable: true},
		{name: "the same generation at the same location", tallied: writer("s3://runs/a", 1), end: writer("s3://runs/a", 1), wantUsable: true},
		{name: "the next generation", tallied: writer("s3://runs/a", 1), end: writer("s3://runs/a", 2)},
		{name: "another location", tallied: writer("s3://runs/a", 1), end: writer("s3://runs/b", 1)},
		{name: "a store only at the end", end: writer("s3://runs/a", 1)},
		{name: "a store only while running", tallied: writer("s3://runs/a", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &runningTally{t: &tally{}, store: tc.tallied}
			if got := rt.usable(nil, tc.end); got != tc.wantUsable {
				t.Errorf("usable = %v, want %v", got, tc.wantUsable)
			}
		})
	}
}
