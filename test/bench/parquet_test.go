package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/parquetpart"
)

// BenchmarkParquetParts1M: a million records written as 20 Parquet parts of
// 50,000 (as shards would write them), then read back part by part from
// their files. Issue 27's goal for `proctor results` on a 1M-record result is
// 10 s and 300 MiB; this measures the part format's share of it: the read
// time against those 10 s, and the heap in use while reading.
func BenchmarkParquetParts1M(b *testing.B) {
	const n, per = 1_000_000, 50_000
	const goal, heapGoal = 10 * time.Second, 300 << 20
	dir := b.TempDir()
	var size int64
	start := time.Now()
	for p := range n / per {
		lines := partLines(b, p*per, per)
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("part-%d.parquet", p)))
		if err != nil {
			b.Fatal(err)
		}
		if err := parquetpart.Write(f, lines); err != nil {
			b.Fatal(err)
		}
		st, _ := f.Stat()
		size += st.Size()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	write := time.Since(start)
	runtime.GC()
	var peak uint64
	start = time.Now()
	read := 0
	for p := range n / per {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("part-%d.parquet", p)))
		if err != nil {
			b.Fatal(err)
		}
		st, _ := f.Stat()
		if err := parquetpart.Read(f, st.Size(), func(l results.Line) error {
			read++
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		f.Close()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
	}
	took := time.Since(start)
	if read != n {
		b.Errorf("read %d records, want %d", read, n)
	}
	b.Logf("%d records in %d parts: %.1f MB written in %v, read in %v, heap in use at most %.0f MiB",
		n, n/per, float64(size)/1e6, write.Round(time.Millisecond), took.Round(time.Millisecond), float64(peak)/(1<<20))
	b.ReportMetric(took.Seconds()/goal.Seconds(), "read/goal")
	b.ReportMetric(float64(peak)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(size)/1e6, "MB")
	if took > goal || peak > heapGoal {
		b.Errorf("goal: a million records read in at most %v with at most %d MiB of heap; took %v and %.0f MiB", goal, heapGoal>>20, took, float64(peak)/(1<<20))
	}
}

// partLines are n records of a model's answers, samples first to first+n-1,
// as a shard of a million-sample run writes them.
func partLines(b *testing.B, first, n int) []results.Line {
	b.Helper()
	cost := 0.00012
	lines := make([]results.Line, 0, n)
	for idx := first; idx < first+n; idx++ {
		rec, err := json.Marshal(&results.Record{ID: fmt.Sprintf("q%d", idx), Model: "gpt", Dataset: "qs",
			Output: fmt.Sprintf("The answer to question %d is %d: it takes a sentence or two to say why, as models do.", idx, 7*idx),
			Scores: map[string]float64{"exact_match": float64(idx % 2)}, Attempts: 1, LatencyMillis: int64(idx % 900),
			InputTokens: 40, OutputTokens: 20, Cost: &cost})
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, results.Line{Index: idx, Record: rec})
	}
	return lines
}
