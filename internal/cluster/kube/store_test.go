package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/spend"
)

func doneSet(n int, positions ...int) []bool {
	d := make([]bool, n)
	for _, p := range positions {
		d[p] = true
	}
	return d
}

func TestFormatRanges(t *testing.T) {
	cases := []struct {
		done   []bool
		offset int
		want   string
	}{
		{doneSet(5), 0, ""},
		{doneSet(5, 0), 0, "0"},
		{doneSet(5, 0, 1, 2, 3, 4), 0, "0-4"},
		{doneSet(8, 0, 1, 2, 5), 0, "0-2,5"},
		{doneSet(8, 1, 3, 4, 7), 100, "101,103-104,107"},
		{nil, 0, ""},
	}
	for _, tc := range cases {
		if got := formatRanges(tc.done, tc.offset); got != tc.want {
			t.Errorf("formatRanges(%v, %d) = %q, want %q", tc.done, tc.offset, got, tc.want)
		}
	}
}

func TestParseRanges(t *testing.T) {
	cases := []struct {
		in      string
		offset  int
		n       int
		want    []bool
		wantErr bool
	}{
		{"", 0, 3, doneSet(3), false},
		{"0-2,5", 0, 8, doneSet(8, 0, 1, 2, 5), false},
		{"101,103-104", 100, 5, doneSet(5, 1, 3, 4), false},
		// Positions outside the shard are ignored.
		{"98-101,200", 100, 3, doneSet(3, 0, 1), false},
		{"x", 0, 3, doneSet(3), true},
		{"1-", 0, 3, doneSet(3), true},
		{"1,,2", 0, 3, doneSet(3, 1), true},
		{"-1", 0, 3, doneSet(3), true},
	}
	for _, tc := range cases {
		got := make([]bool, tc.n)
		err := parseRanges(tc.in, tc.offset, got)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseRanges(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
		}
		if err != nil {
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("parseRanges(%q, %d) (-want +got):\n%s", tc.in, tc.offset, diff)
		}
	}
}

func TestRangesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		n := rng.IntN(200)
		offset := rng.IntN(10_000)
		done := make([]bool, n)
		density := rng.Float64()
		for i := range done {
			done[i] = rng.Float64() < density
		}
		s := formatRanges(done, offset)
		got := make([]bool, n)
		if err := parseRanges(s, offset, got); err != nil {
			t.Fatalf("parseRanges(%q): %v", s, err)
		}
		if !cmp.Equal(done, got) {
			t.Fatalf("round trip of %v at %d through %q gave %v", done, offset, s, got)
		}
	}
}

// randomLines are lines that do not compress much (hex digits).
func randomLines(rng *rand.Rand, n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		b := make([]byte, size/2)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		out[i] = fmt.Appendf(nil, `{"i":%d,"r":"%x"}`, i, b)
	}
	return out
}

func TestPackChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const maxChunk = 4096
	cases := []struct {
		name       string
		lines      [][]byte
		wantChunks int // at least
	}{
		{"none", nil, 0},
		{"one small line", [][]byte{[]byte(`{"i":0,"r":{}}`)}, 1},
		{"fits one chunk", randomLines(rng, 5, 200), 1},
		{"needs several", randomLines(rng, 60, 1000), 8},
		{"uneven sizes", append(randomLines(rng, 3, 6000), randomLines(rng, 40, 100)...), 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			chunks, err := packChunks(tc.lines, maxChunk)
			if err != nil {
				t.Fatal(err)
			}
			if len(chunks) < tc.wantChunks {
				t.Errorf("%d chunks, want at least %d", len(chunks), tc.wantChunks)
			}
			var all [][]byte
			for i, c := range chunks {
				if len(c.gz) > maxChunk {
					t.Errorf("chunk %d is %d bytes, over %d", i, len(c.gz), maxChunk)
				}
				lines, err := results.GunzipLines(c.gz)
				if err != nil {
					t.Fatal(err)
				}
				if len(lines) == 0 {
					t.Errorf("chunk %d is empty", i)
				}
				if !cmp.Equal(lines, c.lines) {
					t.Errorf("chunk %d's lines differ from its gzip's", i)
				}
				all = append(all, lines...)
			}
			if !cmp.Equal(tc.lines, all) {
				t.Errorf("chunks hold %d lines, want the %d lines in order", len(all), len(tc.lines))
			}
		})
	}
	// A record that cannot fit any chunk is an error, not a dropped record.
	huge := randomLines(rng, 1, 20_000)
	if _, err := packChunks(append(randomLines(rng, 3, 100), huge...), maxChunk); err == nil || !strings.Contains(err.Error(), "more than a chunk holds") {
		t.Errorf("packChunks with a huge record: error = %v", err)
	}
}

// testSpec names the shards' model (small) and dataset (d).
func testSpec() *v1alpha1.EvaluationSpec {
	return &testutil.MakeEvaluation("arith", "ns").InlineDataset("d", 3).OpenAIModel("small", "http://llm/v1").Scorer(v1alpha1.ScorerExactMatch).Obj().Spec
}

func testEvaluation() *v1alpha1.Evaluation {
	return &v1alpha1.Evaluation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "arith", UID: "uid-1"}}
}

// controllerMakes creates what the controller makes for a shard before its
// runner starts: the head, and n chunk slots.
func controllerMakes(t *testing.T, c client.Client, ev *v1alpha1.Evaluation, run string, sh cluster.Shard, n int) {
	t.Helper()
	objs := []client.Object{cluster.NewHead(ev, cluster.HashSpec(&ev.Spec), run, sh, false)}
	for k := range n {
		objs = append(objs, cluster.NewChunkSlot(ev, cluster.HashSpec(&ev.Spec), run, sh, k))
	}
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

func newFakeClient(t *testing.T) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).Build()
}

func record(i int, score float64) *results.Record {
	return &results.Record{ID: fmt.Sprint(i), Model: "small", Dataset: "d", Output: "out", Scores: map[string]float64{"exact_match": score}, InputTokens: 3, OutputTokens: 1}
}

func listShardCMs(t *testing.T, c client.Client) (head *corev1.ConfigMap, chunks []corev1.ConfigMap) {
	t.Helper()
	var list corev1.ConfigMapList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		cm := list.Items[i]
		switch cm.Labels[cluster.LabelComponent] {
		case cluster.ComponentShard:
			head = &cm
		case cluster.ComponentRecords:
			chunks = append(chunks, cm)
		}
	}
	return head, chunks
}

func indexes(t *testing.T, cms ...corev1.ConfigMap) []int {
	t.Helper()
	var out []int
	for i := range cms {
		lines, err := cluster.ReadRecords(&cms[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			out = append(out, l.Index)
		}
	}
	return out
}

func TestStoreCheckpointAndResume(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t)
	ev := testEvaluation()
	sh := cluster.Shard{Model: "small", Dataset: "d", Index: 2, Start: 10, End: 15}

	if _, err := OpenStore(ctx, c, ev, "r1", sh, "pod-a"); !apierrors.IsNotFound(err) {
		t.Fatalf("OpenStore before the controller made the head: %v, want not found (runners create nothing)", err)
	}
	controllerMakes(t, c, ev, "r1", sh, 0)
	s, err := OpenStore(ctx, c, ev, "r1", sh, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	head, _ := listShardCMs(t, c)
	if head == nil || head.Name != "arith-r1-small-2" {
		t.Fatalf("head = %v, want arith-r1-small-2", head)
	}
	wantLabels := map[string]string{
		cluster.LabelManagedBy: cluster.ManagedBy, cluster.LabelEvaluation: "arith", cluster.LabelRun: "r1", cluster.LabelComponent: cluster.ComponentShard,
		cluster.LabelModel: "small", cluster.LabelDataset: "d", cluster.LabelAnswers: cluster.AnswersHash(&ev.Spec, "small"),
	}
	if diff := cmp.Diff(wantLabels, head.Labels); diff != "" {
		t.Errorf("head labels (-want +got):\n%s", diff)
	}
	if ref := metav1.GetControllerOf(head); ref == nil || ref.UID != ev.UID {
		t.Errorf("head owner = %v", ref)
	}

	if err := s.Put("small", "d", 9, record(9, 1)); err == nil {
		t.Errorf("Put outside the shard succeeded")
	}
	for _, i := range []int{10, 11, 12} {
		if err := s.Put("small", "d", i, record(i, float64(i%2))); err != nil {
			t.Fatal(err)
		}
	}
	errored := &results.Record{ID: "13", Model: "small", Dataset: "d", Error: "boom", InputTokens: 3}
	if err := s.Put("small", "d", 13, errored); err != nil {
		t.Fatal(err)
	}
	// The same sample again (a retry after a crash) is stored but counted once.
	if err := s.Put("small", "d", 12, record(12, 0)); err != nil {
		t.Fatal(err)
	}
	if !s.Done("small", "d", 12) || s.Done("small", "d", 14) {
		t.Errorf("Done: 12 %v, 14 %v", s.Done("small", "d", 12), s.Done("small", "d", 14))
	}
	s.SetBudget(4)
	if err := s.Flush(ctx, false); err != nil {
		t.Fatal(err)
	}

	head, chunks := listShardCMs(t, c)
	if len(chunks) != 0 {
		t.Errorf("a small flush sealed %d chunks", len(chunks))
	}
	prog, ok := cluster.ParseProgress(head.Annotations)
	if !ok {
		t.Fatalf("no progress annotation: %v", head.Annotations)
	}
	wantProg := cluster.ShardProgress{
		State: cluster.StateRunning, Total: 5, Done: 4, Errored: 1, Scores: map[string]float64{"exact_match": 1},
		Tokens: results.Tokens{Input: 12, Output: 3}, Budget: 4, Pod: "pod-a", // the duplicate counts once
		Spent: spend.Totals{Tokens: 19}, // but was paid for twice
	}
	if prog.Stored < 5*50 || prog.Stored > 5*200 {
		t.Errorf("stored %d bytes for 5 small records", prog.Stored) // the duplicate is stored too
	}
	prog.Stored = 0
	if diff := cmp.Diff(wantProg, prog); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if got := head.Data[cluster.KeyDone]; got != "10-13" {
		t.Errorf("done = %q, want 10-13", got)
	}
	if diff := cmp.Diff([]int{10, 11, 12, 13, 12}, indexes(t, *head)); diff != "" {
		t.Errorf("pending records (-want +got):\n%s", diff)
	}

	// A new pod resumes from the head.
	s2, err := OpenStore(ctx, c, ev, "r1", sh, "pod-b")
	if err != nil {
		t.Fatal(err)
	}
	if p := s2.Progress(); p.Done != 4 || p.Pod != "pod-b" || p.State != cluster.StateRunning {
		t.Errorf("resumed progress = %+v", p)
	}
	for i := 10; i < 15; i++ {
		if got, want := s2.Done("small", "d", i), i < 14; got != want {
			t.Errorf("resumed Done(%d) = %v, want %v", i, got, want)
		}
	}
	if err := s2.Put("small", "d", 14, record(14, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s2.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}

	// Few records stay in the head: the final flush marks it succeeded.
	head, chunks = listShardCMs(t, c)
	if len(chunks) != 0 {
		t.Fatalf("final flush of small records sealed %d chunks", len(chunks))
	}
	prog, _ = cluster.ParseProgress(head.Annotations)
	if prog.State != cluster.StateSucceeded || prog.Done != 5 || prog.Chunks != 0 || prog.Pod != "pod-b" {
		t.Errorf("final progress = %+v", prog)
	}
	if diff := cmp.Diff([]int{10, 11, 12, 13, 12, 14}, indexes(t, *head)); diff != "" {
		t.Errorf("stored records (-want +got):\n%s", diff)
	}
	lines, _ := cluster.ReadRecords(head)
	var r results.Record
	if err := json.Unmarshal(lines[3].Record, &r); err != nil || r.Error != "boom" {
		t.Errorf("record 13 = %+v, %v", r, err)
	}
}

// incompressible returns n bytes that gzip cannot shrink.
func incompressible(rng *rand.Rand, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

func TestStoreSealsIntoTheSlotsItIsGiven(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t)
	ev := testEvaluation()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 70
	sh := cluster.Shard{Model: "small", Dataset: "d", Index: 0, Start: 0, End: n}
	controllerMakes(t, c, ev, "r1", sh, 1) // one slot to begin with
	s, err := OpenStore(ctx, c, ev, "r1", sh, "p")
	if err != nil {
		t.Fatal(err)
	}
	// About 1.8 MiB of records once compressed: more than a slot and the head
	// hold.
	for i := range 60 {
		r := record(i, 1)
		r.Output = incompressible(rng, 40<<10)
		if err := s.Put("small", "d", i, r); err != nil {
			t.Fatal(err)
		}
	}
	headBefore, _ := listShardCMs(t, c)
	err = s.Flush(ctx, false)
	if !errors.Is(err, ErrNoSlot) {
		t.Fatalf("Flush with too few slots: %v, want ErrNoSlot", err)
	}
	head, chunks := listShardCMs(t, c)
	prog, _ := cluster.ParseProgress(head.Annotations)
	if prog.Want < 2 || head.Data[cluster.KeyDone] != headBefore.Data[cluster.KeyDone] || len(head.BinaryData) != 0 {
		t.Errorf("after a blocked flush: want %d slots, done %q, %d binary keys; want slots asked for and the head's records untouched",
			prog.Want, head.Data[cluster.KeyDone], len(head.BinaryData))
	}
	if got := indexes(t, chunks...); len(got) == 0 {
		t.Errorf("the one slot given was not filled")
	}
	// The controller grants what the head asks for; the next flush goes through.
	controllerMakes(t, c, ev, "r1", sh, cluster.SlotsWanted(prog))
	if err := s.Flush(ctx, false); err != nil {
		t.Fatal(err)
	}
	for i := 60; i < n; i++ {
		if err := s.Put("small", "d", i, record(i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}
	head, chunks = listShardCMs(t, c)
	prog, _ = cluster.ParseProgress(head.Annotations)
	if prog.State != cluster.StateSucceeded || prog.Done != n {
		t.Errorf("final progress %+v", prog)
	}
	got := indexes(t, append(chunks, *head)...)
	slices.Sort(got)
	got = slices.Compact(got)
	if len(got) != n {
		t.Errorf("%d samples stored in the head and %d slots, want %d", len(got), len(chunks), n)
	}
	for _, ch := range chunks {
		if len(ch.BinaryData[cluster.KeyRecords]) > cluster.MaxChunkBytes {
			t.Errorf("slot %s holds %d bytes", ch.Name, len(ch.BinaryData[cluster.KeyRecords]))
		}
	}
}

func TestStoreRefusesObjectsItDoesNotOwn(t *testing.T) {
	ctx := context.Background()
	ev := testEvaluation()
	sh := cluster.Shard{Model: "small", Dataset: "d", Index: 0, Start: 0, End: 2}
	other := ev.DeepCopy()
	other.UID = "uid-of-another"

	// A head made by someone else (a user, or before the Evaluation existed).
	c := newFakeClient(t)
	controllerMakes(t, c, other, "r1", sh, 0)
	var fe *cluster.ForeignError
	if _, err := OpenStore(ctx, c, ev, "r1", sh, "p"); !errors.As(err, &fe) {
		t.Fatalf("OpenStore on a foreign head: %v, want a ForeignError", err)
	}
	c = newFakeClient(t)
	forged := cluster.NewHead(ev, cluster.HashSpec(&ev.Spec), "r1", sh, false)
	forged.OwnerReferences = nil
	forged.Data = map[string]string{cluster.KeyDone: "0-1"}
	if err := c.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(ctx, c, ev, "r1", sh, "p"); !errors.As(err, &fe) || !strings.Contains(err.Error(), "has no controller") {
		t.Fatalf("OpenStore on an unowned head: %v", err)
	}

	// A foreign slot is never written to.
	c = newFakeClient(t)
	controllerMakes(t, c, ev, "r1", sh, 0)
	if err := c.Create(ctx, cluster.NewChunkSlot(other, cluster.HashSpec(&other.Spec), "r1", sh, 0)); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(ctx, c, ev, "r1", sh, "p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.fillSlot(ctx, 0, []byte("x")); !errors.As(err, &fe) {
		t.Errorf("fillSlot into a foreign slot: %v", err)
	}

	// ForEachRunRecord skips (and reports) ConfigMaps the Evaluation does not control.
	mine := cluster.NewChunkSlot(ev, cluster.HashSpec(&ev.Spec), "r2", sh, 0)
	mine.BinaryData = map[string][]byte{cluster.KeyRecords: mustGzip(t, `{"i":0,"r":{"id":"real"}}`)}
	theirs := cluster.NewChunkSlot(other, cluster.HashSpec(&other.Spec), "r2", sh, 1)
	theirs.BinaryData = map[string][]byte{cluster.KeyRecords: mustGzip(t, `{"i":1,"r":{"id":"FORGED"}}`)}
	for _, o := range []client.Object{mine, theirs} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	var seen, skipped []string
	withSpec := ev.DeepCopy() // the same Evaluation, whose spec names the shard's model and dataset
	withSpec.Spec = *testSpec()
	plan := cluster.Plan{ShardSize: sh.End - sh.Start, Totals: map[string]int{sh.Dataset: sh.End}}
	err = ForEachRunRecord(ctx, c, withSpec, "r2", plan, []string{mine.Name, theirs.Name}, nil, func(fe *cluster.ForeignError) { skipped = append(skipped, fe.Name) },
		func(_ cluster.Shard, l results.Line) error {
			rec, err := results.Emit(l.Record, nil, nil)
			if err == nil {
				seen = append(seen, rec.ID)
			}
			return err
		})
	if err != nil || !cmp.Equal(seen, []string{"real"}) || !cmp.Equal(skipped, []string{theirs.Name}) {
		t.Errorf("ForEachRunRecord: %v; read %v, skipped %v", err, seen, skipped)
	}
}

func mustGzip(t *testing.T, lines ...string) []byte {
	t.Helper()
	var b [][]byte
	for _, l := range lines {
		b = append(b, []byte(l))
	}
	gz, err := gzipRecordLines(b)
	if err != nil {
		t.Fatal(err)
	}
	return gz
}

func TestStoreCutsLongOutputs(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t)
	sh := cluster.Shard{Model: "small", Dataset: "d", Start: 0, End: 1}
	controllerMakes(t, c, testEvaluation(), "r1", sh, 0)
	s, err := OpenStore(ctx, c, testEvaluation(), "r1", sh, "p")
	if err != nil {
		t.Fatal(err)
	}
	r := record(0, 1)
	// A 3-byte character straddles the cap: the cut must not split it.
	r.Output = strings.Repeat("x", cluster.MaxOutputBytes-1) + "€" + strings.Repeat("y", 10)
	whole := len(r.Output)
	if err := s.Put("small", "d", 0, r); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}
	head, _ := listShardCMs(t, c)
	lines, err := cluster.ReadRecords(head)
	if err != nil {
		t.Fatal(err)
	}
	var got results.Record
	if err := json.Unmarshal(lines[0].Record, &got); err != nil {
		t.Fatal(err)
	}
	if got.Output != strings.Repeat("x", cluster.MaxOutputBytes-1) || !got.OutputTruncated || got.OutputBytes != whole || got.Scores["exact_match"] != 1 {
		t.Errorf("stored output of %d bytes, truncated %v, outputBytes %d (want %d), scores %v",
			len(got.Output), got.OutputTruncated, got.OutputBytes, whole, got.Scores)
	}
	if p := s.Progress(); p.Cut != 1 || p.Dropped != 0 {
		t.Errorf("progress %+v, want one output cut", p)
	}
}

// TestStoreCutsLongInputs: a record's input (the rendered request) is cut
// to MaxInputBytes in all, first messages kept whole, not inside a
// character, and the record says so.
func TestStoreCutsLongInputs(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t)
	sh := cluster.Shard{Model: "small", Dataset: "d", Start: 0, End: 2}
	controllerMakes(t, c, testEvaluation(), "r1", sh, 0)
	s, err := OpenStore(ctx, c, testEvaluation(), "r1", sh, "p")
	if err != nil {
		t.Fatal(err)
	}
	system := strings.Repeat("s", 1000)
	long := record(0, 1)
	long.Input = []provider.Message{{Role: "system", Content: system},
		{Role: "user", Content: strings.Repeat("u", cluster.MaxInputBytes-1000-1) + "€" + "tail"}, {Role: "user", Content: "more"}}
	short := record(1, 1)
	short.Input = []provider.Message{{Role: "user", Content: "What is 2+2?"}}
	for i, r := range []*results.Record{long, short} {
		if err := s.Put("small", "d", i, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}
	head, _ := listShardCMs(t, c)
	lines, err := cluster.ReadRecords(head)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]results.Record, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal(l.Record, &got[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := []provider.Message{{Role: "system", Content: system},
		// The character that straddled the cap is left out; the byte it
		// leaves goes to the next message.
		{Role: "user", Content: strings.Repeat("u", cluster.MaxInputBytes-1000-1)}, {Role: "user", Content: "m"}}
	if diff := cmp.Diff(want, got[0].Input); diff != "" || !got[0].InputTruncated {
		t.Errorf("a long input, truncated %v (-want +got):\n%s", got[0].InputTruncated, diff)
	}
	if got[1].Input[0].Content != "What is 2+2?" || got[1].InputTruncated {
		t.Errorf("a short input: %+v, truncated %v", got[1].Input, got[1].InputTruncated)
	}
}

func TestStoreStorageBudget(t *testing.T) {
	// Past the shard's share of the storage budget, records are stored without
	// their output, flagged, and keep their scores; the stored bytes stay within
	// the budget but for those small records.
	ctx := context.Background()
	c := newFakeClient(t)
	const n = 40
	sh := cluster.Shard{Model: "small", Dataset: "d", Start: 0, End: n}
	controllerMakes(t, c, testEvaluation(), "r1", sh, 4)
	s, err := OpenStore(ctx, c, testEvaluation(), "r1", sh, "p")
	if err != nil {
		t.Fatal(err)
	}
	const budget = 100 << 10
	s.SetStorageBudget(budget)
	for i := range n {
		r := record(i, 1)
		r.Output = strings.Repeat("z", 10<<10)
		if err := s.Put("small", "d", i, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}
	p := s.Progress()
	if p.Dropped == 0 || p.Dropped == n || p.Stored > budget+int64(p.Dropped)*200 {
		t.Errorf("progress %+v: want some outputs dropped and about %d bytes stored", p, budget)
	}
	head, chunks := listShardCMs(t, c)
	kept, dropped := 0, 0
	for _, ch := range append(chunks, *head) {
		lines, err := cluster.ReadRecords(&ch)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			var got results.Record
			if err := json.Unmarshal(l.Record, &got); err != nil {
				t.Fatal(err)
			}
			if got.Scores["exact_match"] != 1 {
				t.Errorf("record %d lost its score: %+v", l.Index, got.Scores)
			}
			switch {
			case got.Output == "" && got.OutputTruncated && got.OutputBytes == 10<<10:
				dropped++
			case len(got.Output) == 10<<10 && !got.OutputTruncated:
				kept++
			default:
				t.Errorf("record %d: output %d bytes, truncated %v, outputBytes %d", l.Index, len(got.Output), got.OutputTruncated, got.OutputBytes)
			}
		}
	}
	if kept+dropped != n || dropped != p.Dropped {
		t.Errorf("%d kept and %d dropped, want %d records with %d dropped", kept, dropped, n, p.Dropped)
	}
}

func TestReadRecordsKeysAndErrors(t *testing.T) {
	mk := func(lines ...string) []byte {
		gz, err := gzipRecordLines(func() [][]byte {
			var out [][]byte
			for _, l := range lines {
				out = append(out, []byte(l))
			}
			return out
		}())
		if err != nil {
			t.Fatal(err)
		}
		return gz
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "h"}, BinaryData: map[string][]byte{
		cluster.KeyPending: mk(`{"i":3,"r":{"id":"c"}}`),
		cluster.KeyRecords: mk(`{"i":1,"k":"abc","r":{"id":"a"}}`, `{"i":2,"r":{"id":"b"}}`),
	}}
	lines, err := cluster.ReadRecords(cm)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lines {
		got = append(got, fmt.Sprintf("%d:%s:%s", l.Index, l.Key, l.Record))
	}
	want := []string{`3::{"id":"c"}`, `1:abc:{"id":"a"}`, `2::{"id":"b"}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadRecords (-want +got):\n%s", diff)
	}

	for name, bad := range map[string][]byte{
		"not gzip":   []byte("plain"),
		"not json":   mk(`{"i":1,"r":`),
		"truncated":  mk(`{"i":1,"r":{}}`)[:10],
		"wrong type": mk(`{"i":"x","r":{}}`),
	} {
		_, err := cluster.ReadRecords(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "h"}, BinaryData: map[string][]byte{cluster.KeyRecords: bad}})
		if err == nil || !strings.HasPrefix(err.Error(), "h/"+cluster.KeyRecords+": ") {
			t.Errorf("%s: error = %v, want one naming h/%s", name, err, cluster.KeyRecords)
		}
	}
	if lines, err := cluster.ReadRecords(&corev1.ConfigMap{}); err != nil || lines != nil {
		t.Errorf("empty ConfigMap: %v, %v", lines, err)
	}
}

// TestStoreKeepsBatches: a batch recorded by one pod is in the head at once,
// and the next pod of the shard reads it back.
func TestStoreKeepsBatches(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t)
	ev := testEvaluation()
	sh := cluster.Shard{Model: "small", Dataset: "d", Index: 0, Start: 0, End: 100}
	controllerMakes(t, c, ev, "r1", sh, 0)
	s, err := OpenStore(ctx, c, ev, "r1", sh, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	b := results.BatchRecord{Key: "k1", Model: "small", Dataset: "d", Indexes: results.Indexes{0, 1, 2, 5}, State: results.BatchIntended,
		Since: time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)}
	if err := s.PutBatch(b); err != nil {
		t.Fatal(err)
	}
	b.ID, b.State = "batch_1", results.BatchSubmitted
	if err := s.PutBatch(b); err != nil {
		t.Fatal(err)
	}
	head, _ := listShardCMs(t, c)
	got, err := cluster.ParseBatches(head.Annotations)
	if err != nil || len(got) != 1 || got[0].ID != "batch_1" || got[0].Indexes.String() != "0-2,5" {
		t.Fatalf("head batches %+v, %v; annotation %q", got, err, head.Annotations[cluster.AnnotationBatches])
	}
	s2, err := OpenStore(ctx, c, ev, "r1", sh, "pod-b")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s2.Batches("small")
	if diff := cmp.Diff([]results.BatchRecord{b}, again); diff != "" {
		t.Errorf("the next pod's batches (-want +got):\n%s", diff)
	}
	if other, _ := s2.Batches("big"); len(other) != 0 {
		t.Errorf("another model's batches: %+v", other)
	}
}

// TestStoreKeepsRecordsAwaitingJudging: records awaiting a judge's batch
// are done, and found again by the shard's next pod (from its sealed chunks
// too); the record that replaces one ends its wait and takes its place in
// the progress, its calls counted once.
func TestStoreKeepsRecordsAwaitingJudging(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t)
	ev := testEvaluation()
	sh := cluster.Shard{Model: "small", Dataset: "d", Index: 0, Start: 10, End: 15}
	controllerMakes(t, c, ev, "r1", sh, 3)
	cost := func(d float64) *float64 { return &d }
	awaiting := func(i int) *results.Record {
		r := record(i, 1)
		r.Cost, r.JudgePending = cost(0.001), []string{"graded"}
		return r
	}
	judged := func(i int, verdict float64) *results.Record {
		r := record(i, 1)
		r.Cost, r.JudgeCost, r.JudgeInputTokens = cost(0.001), cost(0.0005), 7
		r.Scores["graded"] = verdict
		return r
	}
	s, err := OpenStore(ctx, c, ev, "r1", sh, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{10, 11, 12} {
		if err := s.Put("small", "d", i, awaiting(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put("small", "d", 10, judged(10, 1)); err != nil {
		t.Fatal(err)
	}
	// Finished once judged; answered and paid for already.
	p := s.Progress()
	if p.Done != 1 || p.Scores["exact_match"] != 1 || p.Scores["graded"] != 1 || p.Tokens.Input != 9 || fmt.Sprintf("%.6f", p.Spent.Cost.Dollars()) != "0.003500" {
		t.Errorf("progress: done %d, scores %v, %d input tokens, spent %v; want 1 done, exact_match 1 and graded 1, 9 tokens, $0.0035", p.Done, p.Scores, p.Tokens.Input, p.Spent.Cost)
	}
	// Sealed into a chunk (as a full head's records are), then the pod goes.
	s.mu.Lock()
	_, err = s.seal(ctx)
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, chunks := listShardCMs(t, c); len(chunks) == 0 || len(indexes(t, chunks...)) == 0 {
		t.Fatalf("nothing sealed")
	}

	s, err = OpenStore(ctx, c, ev, "r1", sh, "pod-b")
	if err != nil {
		t.Fatal(err)
	}
	got := s.Awaiting("small", "d")
	if len(got) != 2 || got[11] == nil || got[12] == nil || got[11].Output != "out" || !slices.Equal(got[12].JudgePending, []string{"graded"}) {
		t.Fatalf("awaiting after a restart: %+v, want samples 11 and 12 with their answers", got)
	}
	if !s.Done("small", "d", 11) {
		t.Error("a sample awaiting judging is not done")
	}
	errored := judged(11, 0)
	errored.Scores, errored.Error = map[string]float64{}, "scorer graded: no verdict"
	if err := s.Put("small", "d", 11, errored); err != nil {
		t.Fatal(err)
	}
	p = s.Progress()
	if len(s.Awaiting("small", "d")) != 1 || p.Done != 2 || p.Errored != 1 || p.Scores["exact_match"] != 1 || p.Tokens.Input != 9 || fmt.Sprintf("%.6f", p.Spent.Cost.Dollars()) != "0.004000" {
		t.Errorf("after judging 11: awaiting %v, progress done %d errored %d scores %v spent %v", s.Awaiting("small", "d"), p.Done, p.Errored, p.Scores, p.Spent.Cost)
	}
}
