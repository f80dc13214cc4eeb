package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
	"github.com/proctor-dev/proctor/runner/results/parquetpart"
)

// peakRSS polls a process's high-water mark of resident memory (VmHWM)
// until it exits. rusage's Maxrss would count the parent's memory, which a
// child shares until its exec.
func peakRSS(pid int, done <-chan struct{}) (kib int64) {
	read := func() {
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				kib = max(kib, n)
			}
		}
	}
	for {
		read()
		select {
		case <-done:
			return kib
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// BenchmarkProctorResultsFromS31M: `proctor results s3://...` of a location
// holding a million records in 20 Parquet parts (as 20 shards commit them),
// on a real S3-compatible server (weed). Issue 27's goal: at most 10 s and
// 300 MiB.
func BenchmarkProctorResultsFromS31M(b *testing.B) {
	const n, per = 1_000_000, 50_000
	const goal, memGoal = 10 * time.Second, 300 << 10 // KiB
	weed := testutil.StartSeaweed(b)
	st := weed.Bucket(b, "bench", "evals/million")
	ctx := context.Background()
	pp := objects.PairParts{Model: "gpt", Dataset: "qs", Header: json.RawMessage(`{"model":"gpt","dataset":"qs"}`)}
	var size int64
	for p := range n / per {
		lines := partLines(b, p*per, per)
		var buf bytes.Buffer
		if err := parquetpart.Write(&buf, lines); err != nil {
			b.Fatal(err)
		}
		key := objects.PartKey("gpt", "qs", fmt.Sprintf("shard-%05d", p))
		if err := st.Put(ctx, key, buf.Bytes()); err != nil {
			b.Fatal(err)
		}
		size += int64(buf.Len())
		pp.Parts = append(pp.Parts, objects.Part{Key: key, Lines: per, Bytes: int64(buf.Len()), First: p * per, Last: (p+1)*per - 1})
	}
	if err := objects.Commit(ctx, st, "bench", &objects.Manifest{Generation: 1, ID: "bench", Pairs: []objects.PairParts{pp},
		Summary: json.RawMessage(`{"results":[]}`)}); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "proctor")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/proctor-dev/proctor").CombinedOutput(); err != nil {
		b.Fatalf("building proctor: %v\n%s", err, out)
	}
	out := filepath.Join(b.TempDir(), "out")
	cmd := exec.Command(bin, "results", "s3://bench/evals/million", "-o", out)
	cmd.Env = []string{"HOME=" + b.TempDir(), "PATH=" + os.Getenv("PATH")}
	for k, v := range weed.Environment() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	peak := make(chan int64)
	go func() { peak <- peakRSS(cmd.Process.Pid, done) }()
	err := cmd.Wait()
	took := time.Since(start)
	close(done)
	kib := <-peak
	if err != nil {
		b.Fatalf("proctor results: %v\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(filepath.Join(out, results.ResultsFile))
	if err != nil {
		b.Fatal(err)
	}
	if lines := bytes.Count(data, []byte("\n")); lines != n {
		b.Errorf("results.jsonl has %d lines, want %d", lines, n)
	}
	b.Logf("proctor results of %d records in %d parts (%.1f MB): %v, peak RSS %.0f MiB", n, n/per, float64(size)/1e6,
		took.Round(time.Millisecond), float64(kib)/1024)
	b.ReportMetric(took.Seconds()/goal.Seconds(), "time/goal")
	b.ReportMetric(float64(kib)/1024, "peak-RSS-MiB")
	if took > goal || kib > memGoal {
		b.Errorf("goal: at most %v and %d MiB; took %v and %.0f MiB", goal, memGoal>>10, took, float64(kib)/1024)
	}
}
