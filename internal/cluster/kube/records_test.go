package kube

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/results"
)

// TestForEachRunRecord: one record per sample, the last written (chunks by
// their number, HEAD-10 after HEAD-9, then the head), in the order of a local
// run's results.jsonl.
func TestForEachRunRecord(t *testing.T) {
	ctx := context.Background()
	ev := testEvaluation()
	ev.Spec = *testSpec() // model small, dataset d
	plan := cluster.Plan{ShardSize: 3, Totals: map[string]int{"d": 5}}
	shards := plan.Shards(&ev.Spec, "small") // [0,3) [3,5)
	c := newFakeClient(t)
	var names []string
	put := func(sh cluster.Shard, k int, lines ...string) {
		cm := cluster.NewChunkSlot(ev, cluster.HashSpec(&ev.Spec), "r1", sh, k)
		if k < 0 {
			cm = cluster.NewHead(ev, cluster.HashSpec(&ev.Spec), "r1", sh, false)
			cm.BinaryData = map[string][]byte{cluster.KeyPending: mustGzip(t, lines...)}
		} else {
			cm.BinaryData = map[string][]byte{cluster.KeyRecords: mustGzip(t, lines...)}
		}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		names = append(names, cm.Name)
	}
	line := func(i int, id string) string { return fmt.Sprintf(`{"i":%d,"r":{"id":%q}}`, i, id) }
	// Shard 0: twelve chunks; sample 1 is rewritten in chunk 2, then in 10 (the last chunk that has it).
	put(shards[0], 0, line(0, "s0"), line(1, "s1 old"))
	put(shards[0], 2, line(1, "s1 newer"))
	for k := 3; k <= 9; k++ {
		put(shards[0], k)
	}
	put(shards[0], 10, line(1, "s1 newest"))
	put(shards[0], 11, line(2, "s2"), line(7, "outside the shard"))
	// Shard 1: its head's pending records were written after its chunk.
	put(shards[1], 0, line(4, "s4 sealed"), line(3, "s3"))
	put(shards[1], -1, line(4, "s4 pending"))
	slices.Sort(names) // as the controller lists them: HEAD-10 before HEAD-2
	var got []string
	err := ForEachRunRecord(ctx, c, ev, "r1", plan, names, nil, nil, func(sh cluster.Shard, l results.Line) error {
		rec, err := results.Emit(l.Record, nil, nil)
		if err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%d/%d:%s", sh.Index, l.Index, rec.ID))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0/0:s0", "0/1:s1 newest", "0/2:s2", "1/3:s3", "1/4:s4 pending"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}

	// Only the listed ConfigMaps are read.
	got = nil
	err = ForEachRunRecord(ctx, c, ev, "r1", plan, []string{cluster.ChunkName(cluster.HeadName(ev.Name, "r1", "small", 0), 0)}, nil, nil, func(_ cluster.Shard, l results.Line) error {
		got = append(got, fmt.Sprint(l.Index))
		return nil
	})
	if err != nil || !cmp.Equal(got, []string{"0", "1"}) {
		t.Errorf("reading only chunk 0: %v, %v", got, err)
	}
}
