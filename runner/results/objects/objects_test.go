package objects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/parquetpart"
)

// memBucket is an in-memory Bucket for unit tests (test/objstore
// runs the same operations against a real S3-compatible server).
type memBucket struct {
	mu      sync.Mutex
	objects map[string][]byte
}

func newMem() *memBucket { return &memBucket{objects: map[string][]byte{}} }

func (m *memBucket) PutIfAbsent(_ context.Context, key string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objects[key]; ok {
		return ErrExists
	}
	m.objects[key] = bytes.Clone(data)
	return nil
}

func (m *memBucket) Put(_ context.Context, key string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[key] = bytes.Clone(data)
	return nil
}

func (m *memBucket) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[key]
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return b, nil
}

func (m *memBucket) ReaderAt(ctx context.Context, key string) (io.ReaderAt, int64, error) {
	b, err := m.Get(ctx, key)
	return bytes.NewReader(b), int64(len(b)), err
}

func (m *memBucket) List(_ context.Context, prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (m *memBucket) Delete(_ context.Context, keys ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.objects, k)
	}
	return nil
}

func (m *memBucket) keys(prefix string) []string {
	k, _ := m.List(context.Background(), prefix)
	return k
}

func record(i int, out string) *results.Record {
	return &results.Record{ID: fmt.Sprintf("s%d", i), Model: "m", Dataset: "d", Output: out, Scores: map[string]float64{"exact": float64(i % 2)}}
}

func line(t *testing.T, i int, out string) results.Line {
	t.Helper()
	b, err := results.AppendLine(nil, i, record(i, out))
	if err != nil {
		t.Fatal(err)
	}
	l, err := results.ParseLine(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func putPart(t *testing.T, b Bucket, key string, lines []results.Line) Part {
	t.Helper()
	var buf bytes.Buffer
	if err := parquetpart.Write(&buf, lines); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(context.Background(), key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	return Part{Key: key, Lines: len(lines), Bytes: int64(buf.Len()), First: lines[0].Index, Last: lines[len(lines)-1].Index}
}

func TestCommitConflictNamesTheWinner(t *testing.T) {
	ctx := context.Background()
	b := newMem()
	if err := Commit(ctx, b, "s3://b/p", &Manifest{Generation: 1, ID: "a", Writer: "proctor run on alpha"}); err != nil {
		t.Fatal(err)
	}
	err := Commit(ctx, b, "s3://b/p", &Manifest{Generation: 1, ID: "b", Writer: "proctor run on beta"})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("the second commit of generation 1: %v, want a ConflictError", err)
	}
	if ce.Writer != "proctor run on alpha" || !strings.Contains(err.Error(), "two runs cannot write to one location") {
		t.Errorf("conflict %q does not name the winner and say why", err)
	}
	m, err := Latest(ctx, b)
	if err != nil || m.ID != "a" {
		t.Fatalf("Latest = %+v, %v; want the first commit", m, err)
	}
}

// TestReadPairLastWritten checks the merge against a map filled in the
// order the parts were written, over random overlapping parts.
func TestReadPairLastWritten(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		b := newMem()
		want := map[int]string{}
		pp := &PairParts{Model: "m", Dataset: "d"}
		for n := range 1 + rng.IntN(6) {
			first := rng.IntN(40)
			var lines []results.Line
			for i := first; i < first+1+rng.IntN(30); i++ {
				if rng.IntN(3) == 0 {
					continue
				}
				out := fmt.Sprintf("round %d part %d", round, n)
				lines = append(lines, line(t, i, out))
				want[i] = out
			}
			if len(lines) == 0 {
				continue
			}
			pp.Parts = append(pp.Parts, putPart(t, b, PartKey("m", "d", fmt.Sprint(n)), lines))
		}
		got := map[int]string{}
		prev := -1
		err := ReadPair(ctx, b, pp, func(l results.Line) error {
			if l.Index <= prev {
				return fmt.Errorf("sample %d after %d", l.Index, prev)
			}
			prev = l.Index
			var r results.Record
			if err := json.Unmarshal(l.Record, &r); err != nil {
				return err
			}
			got[l.Index] = r.Output
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("round %d: samples (-last written +read):\n%s", round, diff)
		}
	}
}

func TestReadPairRefusesAPartItsManifestDoesNotDescribe(t *testing.T) {
	b := newMem()
	pt := putPart(t, b, PartKey("m", "d", "x"), []results.Line{line(t, 0, "a")})
	pt.Bytes++
	err := ReadPair(context.Background(), b, &PairParts{Model: "m", Dataset: "d", Parts: []Part{pt}}, func(results.Line) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "its manifest says") {
		t.Fatalf("ReadPair of a part of another size: %v", err)
	}
}

// run writes records into a results directory as a run does.
func run(t *testing.T, root string, pair results.Pair, recs map[int]string) {
	t.Helper()
	d, err := results.OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Unlock() }()
	if _, err := d.Open(pair, results.OpenOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, i := range slices.Sorted(func(yield func(int) bool) {
		for i := range recs {
			if !yield(i) {
				return
			}
		}
	}) {
		if err := d.Put(pair.Model, pair.Dataset, i, record(i, recs[i])); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Assemble([]results.Pair{pair}); err != nil {
		t.Fatal(err)
	}
}

func clock() time.Time { return time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) }

func TestMirrorSyncsAndHydrates(t *testing.T) {
	ctx := context.Background()
	b := newMem()
	pair := results.Pair{Model: "m", Dataset: "d", Fingerprint: "f1", Total: 10, Metrics: []string{"exact"}}
	alpha := t.TempDir()
	ma := NewMirror(b, "s3://b/p", alpha, "alpha", clock)
	if err := ma.Hydrate(ctx); err != nil {
		t.Fatal(err)
	}
	run(t, alpha, pair, map[int]string{0: "a0", 1: "a1", 2: "a2"})
	if err := ma.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing new: no commit.
	if err := ma.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.keys("manifests/"); len(got) != 1 {
		t.Errorf("manifests after a sync with nothing new: %v, want one", got)
	}
	run(t, alpha, pair, map[int]string{1: "a1 again", 5: "a5"})
	if err := ma.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	m := ma.Committed()
	if m.Generation != 2 || len(m.Pairs) != 1 || len(m.Pairs[0].Parts) != 2 {
		t.Fatalf("after the journal grew: generation %d, pairs %+v; want generation 2, one pair of two parts", m.Generation, m.Pairs)
	}
	if got := b.keys("manifests/"); len(got) != 1 {
		t.Errorf("manifests after the second commit: %v, want the newest only", got)
	}

	// Another machine rebuilds the copy from the location and reads the
	// same results.
	beta := t.TempDir()
	mb := NewMirror(b, "s3://b/p", beta, "beta", clock)
	if err := mb.Hydrate(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := results.OpenDir(beta)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check([]results.Pair{pair}); err != nil {
		t.Fatalf("the rebuilt copy: %v", err)
	}
	if _, err := d.Open(pair, results.OpenOptions{}); err != nil {
		t.Fatal(err)
	}
	if done, _ := d.Counts("m", "d"); done != 4 {
		t.Errorf("the rebuilt copy has %d samples done, want 4", done)
	}
	_ = d.Close()
	if _, err := d.Assemble([]results.Pair{pair}); err != nil {
		t.Fatal(err)
	}
	_ = d.Unlock()
	want, _ := os.ReadFile(filepath.Join(alpha, results.ResultsFile))
	got, _ := os.ReadFile(filepath.Join(beta, results.ResultsFile))
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("results.jsonl of the rebuilt copy (-written +rebuilt):\n%s", diff)
	}

	// The export reads the location alone.
	res, err := ReadResults(ctx, b, "s3://b/p")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := res.Export(ctx, out); err != nil {
		t.Fatal(err)
	}
	exported, _ := os.ReadFile(filepath.Join(out, results.ResultsFile))
	if diff := cmp.Diff(string(want), string(exported)); diff != "" {
		t.Errorf("exported results.jsonl (-written +exported):\n%s", diff)
	}
	var sum struct{ Results []results.Summary }
	sb, _ := os.ReadFile(filepath.Join(out, results.SummaryFile))
	if err := json.Unmarshal(sb, &sum); err != nil || len(sum.Results) != 1 || sum.Results[0].Completed != 4 {
		t.Errorf("exported summary.json: %s (%v)", sb, err)
	}

	// The first machine's copy is not the latest commit any more once beta
	// commits: alpha's next sync is refused, naming beta.
	if err := mb.Sync(ctx); err != nil {
		t.Fatal(err) // nothing new: no commit
	}
	run(t, beta, pair, map[int]string{7: "b7"})
	if err := mb.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	run(t, alpha, pair, map[int]string{8: "a8"})
	var ce *ConflictError
	if err := ma.Sync(ctx); !errors.As(err, &ce) || ce.Writer != "beta" {
		t.Fatalf("alpha's sync after beta's commit: %v, want a ConflictError naming beta", err)
	}
}

func TestMirrorReplacesThePartsOfAJournalWrittenAnew(t *testing.T) {
	ctx := context.Background()
	b := newMem()
	pair := results.Pair{Model: "m", Dataset: "d", Fingerprint: "f1", Total: 10, Metrics: []string{"exact"}}
	root := t.TempDir()
	mi := NewMirror(b, "s3://b/p", root, "alpha", clock)
	if err := mi.Hydrate(ctx); err != nil {
		t.Fatal(err)
	}
	run(t, root, pair, map[int]string{0: "a", 1: "b"})
	if err := mi.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	old := mi.Committed().Pairs[0].Parts[0].Key
	// --restart: the journal is discarded and written again.
	if err := os.Remove(filepath.Join(root, results.CheckpointDir, results.JournalName("m", "d"))); err != nil {
		t.Fatal(err)
	}
	mi.Restarted()
	run(t, root, pair, map[int]string{3: "c"})
	if err := mi.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	parts := mi.Committed().Pairs[0].Parts
	if len(parts) != 1 || parts[0].First != 3 || parts[0].Lines != 1 {
		t.Fatalf("parts after the journal was written anew: %+v, want one part of sample 3", parts)
	}
	if _, err := b.Get(ctx, old); !errors.Is(err, ErrNotFound) {
		t.Errorf("the replaced part %s is still there (%v)", old, err)
	}
}

func TestLatestIgnoresOtherKeys(t *testing.T) {
	ctx := context.Background()
	b := newMem()
	_ = b.Put(ctx, "manifests/notes.txt", []byte("x"))
	if m, err := Latest(ctx, b); m != nil || err != nil {
		t.Fatalf("Latest of a location with no manifest = %v, %v", m, err)
	}
	if _, err := ReadResults(ctx, b, "s3://b/p"); err == nil || !strings.Contains(err.Error(), "holds no committed results") {
		t.Errorf("ReadResults of an empty location: %v", err)
	}
	_ = b.Put(ctx, manifestKey(3), []byte(`{"format":1,"generation":3,"pairs":[{"model":"m","dataset":"d","parts":[{"key":"parts/x/d/a.parquet","lines":1}]}]}`))
	if _, err := Latest(ctx, b); err == nil || !strings.Contains(err.Error(), "is not under parts/") {
		t.Errorf("Latest of a manifest naming a part outside its pair: %v", err)
	}
}
