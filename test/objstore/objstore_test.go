// Package objstore_test runs the results store's client and layout against a
// real S3-compatible server (SeaweedFS's weed, built from source into bin/):
// the conditional writes, ranged reads and listings a results location
// relies on, as a server implements them rather than as our unit tests'
// in-memory bucket does.
package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
	"github.com/proctor-dev/proctor/runner/results/parquetpart"
)

func TestS3(t *testing.T) {
	weed := testutil.StartSeaweed(t)
	ctx := context.Background()

	t.Run("OneOfConcurrentConditionalCreatesWins", func(t *testing.T) {
		st := weed.Bucket(t, "race", "run")
		const writers = 8
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() { errs[i] = st.PutIfAbsent(ctx, "manifests/1.json", []byte(fmt.Sprintf("writer %d", i))) })
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("writers %d and %d both created the key", won, i)
			case err == nil:
				won = i
			case !errors.Is(err, objstore.ErrExists):
				t.Errorf("writer %d: %v, want ErrExists", i, err)
			}
		}
		if won < 0 {
			t.Fatal("no writer created the key")
		}
		got, err := st.Get(ctx, "manifests/1.json")
		if err != nil || string(got) != fmt.Sprintf("writer %d", won) {
			t.Errorf("the key holds %q (%v), want the winner's", got, err)
		}
	})

	t.Run("MissingKeysAndListing", func(t *testing.T) {
		st := weed.Bucket(t, "listing", "a/b")
		if _, err := st.Get(ctx, "nothing"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
		}
		for _, k := range []string{"parts/m/d/1.parquet", "parts/m/d/2.parquet", "parts/n/d/1.parquet", "manifests/x.json"} {
			if err := st.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		// A sibling prefix is not listed.
		if err := weed.Store(t, "s3://listing/a/bc").Put(ctx, "parts/m/d/9.parquet", []byte("x")); err != nil {
			t.Fatal(err)
		}
		keys, err := st.List(ctx, "parts/")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"parts/m/d/1.parquet", "parts/m/d/2.parquet", "parts/n/d/1.parquet"}, keys); diff != "" {
			t.Errorf("List(parts/) (-want +got):\n%s", diff)
		}
		dirs, err := st.Dirs(ctx, "parts/")
		if err != nil || !cmp.Equal(dirs, []string{"m", "n"}) {
			t.Errorf("Dirs(parts/) = %v, %v; want [m n]", dirs, err)
		}
		if err := st.Delete(ctx, "parts/m/d/1.parquet", "not/there"); err != nil {
			t.Errorf("Delete of a key and a missing one: %v", err)
		}
		if _, err := st.Get(ctx, "parts/m/d/1.parquet"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("a deleted key: %v", err)
		}
	})

	t.Run("PartsReadByRanges", func(t *testing.T) {
		weed.Bucket(t, "ranges", "")
		loc, _ := objstore.ParseURL("s3://ranges/run")
		// Every object read by ranges, as parts over 64 MiB are.
		st, err := objstore.Open(ctx, loc, objstore.Options{Endpoint: weed.Endpoint, AccessKeyID: weed.AccessKey, SecretAccessKey: weed.SecretKey,
			WholeBelow: 1, HTTPClient: &http.Client{Timeout: 30 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		var lines []results.Line
		for i := range 3000 {
			b, _ := results.AppendLine(nil, i, &results.Record{ID: fmt.Sprint(i), Model: "m", Dataset: "d", Output: strings.Repeat("x", i%500), Scores: map[string]float64{"exact": float64(i % 2)}})
			l, _ := results.ParseLine(b)
			lines = append(lines, l)
		}
		var buf bytes.Buffer
		if err := parquetpart.Write(&buf, lines); err != nil {
			t.Fatal(err)
		}
		key := objects.PartKey("m", "d", "p")
		if err := st.Put(ctx, key, buf.Bytes()); err != nil {
			t.Fatal(err)
		}
		pp := &objects.PairParts{Model: "m", Dataset: "d", Parts: []objects.Part{{Key: key, Lines: len(lines), Bytes: int64(buf.Len()), First: 0, Last: 2999}}}
		n := 0
		err = objects.ReadPair(ctx, st, pp, func(l results.Line) error {
			if l.Index != n || !bytes.Equal(l.Record, lines[n].Record) {
				return fmt.Errorf("line %d: sample %d %s, want %s", n, l.Index, l.Record, lines[n].Record)
			}
			n++
			return nil
		})
		if err != nil || n != len(lines) {
			t.Fatalf("read %d of %d lines by ranges: %v", n, len(lines), err)
		}
	})

	t.Run("TwoWritersOfOneLocation", func(t *testing.T) {
		st := weed.Bucket(t, "writers", "evals/nightly")
		pair := results.Pair{Model: "m", Dataset: "d", Fingerprint: "f", Total: 100, Metrics: []string{"exact"}}
		alpha, beta := t.TempDir(), t.TempDir()
		ma := objects.NewMirror(st, "s3://writers/evals/nightly", alpha, "alpha", time.Now)
		mb := objects.NewMirror(st, "s3://writers/evals/nightly", beta, "beta", time.Now)
		for _, m := range []*objects.Mirror{ma, mb} {
			if err := m.Hydrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		write(t, alpha, pair, 0, 40)
		write(t, beta, pair, 50, 60)
		var wg sync.WaitGroup
		var ea, eb error
		wg.Go(func() { ea = ma.Sync(ctx) })
		wg.Go(func() { eb = mb.Sync(ctx) })
		wg.Wait()
		var ce *objects.ConflictError
		if (ea == nil) == (eb == nil) || !errors.As(errors.Join(ea, eb), &ce) {
			t.Fatalf("two writers committing generation 1: %v and %v; want one commit and one ConflictError", ea, eb)
		}
		winner, want := alpha, 40
		if ea != nil {
			winner, want = beta, 10
		}
		// The location reads as the winner wrote it, from a third machine.
		out := t.TempDir()
		res, err := objects.ReadResults(ctx, st, "s3://writers/evals/nightly")
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Export(ctx, out); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(out, results.ResultsFile))
		if n := bytes.Count(got, []byte("\n")); n != want {
			t.Errorf("the location holds %d records, want the %d of the winner (%s)", n, want, winner)
		}
		// The loser's part was uploaded but never committed: it is not read,
		// and nothing names it.
		keys, _ := st.List(ctx, "parts/")
		if len(keys) != 2 {
			t.Errorf("parts in the location: %v; want the winner's and the loser's uncommitted one", keys)
		}
	})

	t.Run("PresignedURLsReachOnlyTheirKey", func(t *testing.T) {
		st := weed.Bucket(t, "presigned", "ns/run")
		hc := &http.Client{Timeout: 10 * time.Second}
		put, err := st.PresignPut(ctx, "staging/head/000000.jsonl.gz", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := objstore.PutURL(ctx, hc, put, []byte("records")); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Get(ctx, "staging/head/000000.jsonl.gz"); err != nil || string(got) != "records" {
			t.Errorf("the key holds %q (%v), want what was put through its URL", got, err)
		}
		// The signature covers the key: the same URL made to name
		// another key is refused, so a pod writes only what it was given.
		other := strings.Replace(put, "000000.jsonl.gz", "000001.jsonl.gz", 1)
		if err := objstore.PutURL(ctx, hc, other, []byte("x")); !errors.Is(err, objstore.ErrRefused) {
			t.Errorf("a write to another key with the URL: %v, want ErrRefused", err)
		}
		if strings.Contains(fmt.Sprint(objstore.PutURL(ctx, hc, other, nil)), "X-Amz-Signature") {
			t.Error("an error of a presigned write shows the URL's signature")
		}
		get, err := st.PresignGet(ctx, "staging/head/000000.jsonl.gz", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := objstore.GetURL(ctx, hc, get); err != nil || string(got) != "records" {
			t.Errorf("read through a presigned URL: %q (%v)", got, err)
		}
		missing, _ := st.PresignGet(ctx, "staging/head/000009.jsonl.gz", time.Hour)
		if _, err := objstore.GetURL(ctx, hc, missing); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("read of a missing key through its URL: %v, want ErrNotFound", err)
		}
		short, _ := st.PresignPut(ctx, "staging/head/000002.jsonl.gz", time.Second)
		time.Sleep(2100 * time.Millisecond)
		if err := objstore.PutURL(ctx, hc, short, []byte("late")); !errors.Is(err, objstore.ErrRefused) {
			t.Errorf("a write with an expired URL: %v, want ErrRefused", err)
		}
	})
}

// write records samples [from, to) of pair into the results directory root.
func write(t *testing.T, root string, pair results.Pair, from, to int) {
	t.Helper()
	d, err := results.OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Unlock() }()
	if _, err := d.Open(pair, results.OpenOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := from; i < to; i++ {
		if err := d.Put(pair.Model, pair.Dataset, i, &results.Record{ID: fmt.Sprint(i), Model: pair.Model, Dataset: pair.Dataset, Output: "o", Scores: map[string]float64{"exact": 1}}); err != nil {
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
