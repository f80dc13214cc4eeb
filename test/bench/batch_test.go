package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// BenchmarkBatch20k: 20,000 samples in batch mode against the fake server
// (batches of 2,500 taking 3 s each, 10% of answers wrong), with proctor run
// killed with -9 three times while its batches are in flight, then run to
// its end. Goals: no sample submitted twice (the server counts them), every
// sample exactly once, the scores of the same run made with calls, and
// exactly half its cost at list prices. (Pod deletion and a manager restart
// are in the cluster e2e, TestBatchModeInACluster.)
func BenchmarkBatch20k(b *testing.B) {
	const n = 20000
	dir := b.TempDir()
	bin := filepath.Join(dir, "proctor")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/proctor-dev/proctor").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	var data bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&data, "{\"id\":\"q%d\",\"input\":\"What is %d+%d?\",\"expected\":\"%d\"}\n", i, i, i, 2*i)
	}
	if err := os.WriteFile(filepath.Join(dir, "qs.jsonl"), data.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	manifest := func(name, url, batch string) string {
		path := filepath.Join(dir, name+".yaml")
		spec := fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: %s}
spec:
  concurrency: 64
  datasets:
  - {name: qs, source: {file: qs.jsonl}}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: %s
    parameters: {maxTokens: 16}
    pricing: {inputPerMillion: 2.5, outputPerMillion: 10}
%s  scoring: [{type: exact_match}]
`, name, url, batch)
		if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
			b.Fatal(err)
		}
		return path
	}
	start := func(file, out string) *exec.Cmd {
		cmd := exec.Command(bin, "run", "-f", file, "-o", out, "--progress", "none")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		return cmd
	}
	summary := func(out string) results.Summary {
		raw, err := os.ReadFile(filepath.Join(out, results.SummaryFile))
		if err != nil {
			b.Fatal(err)
		}
		var s struct{ Results []results.Summary }
		if err := json.Unmarshal(raw, &s); err != nil || len(s.Results) != 1 {
			b.Fatalf("summary: %v %s", err, raw)
		}
		return s.Results[0]
	}

	callSrv := fakellm.New(fakellm.Config{WrongRate: 0.1, Seed: 11})
	calls := httptest.NewServer(callSrv)
	b.Cleanup(calls.Close)
	t0 := time.Now()
	if err := start(manifest("calls", calls.URL+"/v1", ""), filepath.Join(dir, "out-calls")).Wait(); err != nil {
		b.Fatalf("the run with calls: %v", err)
	}
	callTime := time.Since(t0)
	sync := summary(filepath.Join(dir, "out-calls"))

	batchSrv := fakellm.New(fakellm.Config{WrongRate: 0.1, Seed: 11, BatchDelay: 3 * time.Second})
	batches := httptest.NewServer(batchSrv)
	b.Cleanup(batches.Close)
	file := manifest("batched", batches.URL+"/v1", "    batch: {maxRequests: 2500, maxInFlight: 3, pollInterval: 200ms}\n")
	out := filepath.Join(dir, "out-batched")
	t0 = time.Now()
	for kill := 1; kill <= 3; kill++ {
		before := batchSrv.Stats().Batches
		cmd := start(file, out)
		for deadline := time.Now().Add(time.Minute); batchSrv.Stats().Batches <= before; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatal("no batch submitted")
			}
		}
		time.Sleep(time.Duration(kill) * 700 * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	if err := start(file, out).Wait(); err != nil {
		b.Fatalf("the last run: %v", err)
	}
	batchTime := time.Since(t0)
	batched := summary(out)
	st := batchSrv.Stats()

	raw, err := os.ReadFile(filepath.Join(out, results.ResultsFile))
	if err != nil {
		b.Fatal(err)
	}
	ids := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r results.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			b.Fatal(err)
		}
		ids[r.ID]++
	}
	once := len(ids) == n
	for _, c := range ids {
		once = once && c == 1
	}
	ratio := *batched.Cost.Model / *sync.Cost.Model
	b.ReportMetric(float64(st.DuplicateBatchRequests), "duplicate-submissions")
	b.ReportMetric(float64(st.Batches), "batches")
	b.ReportMetric(ratio, "cost-ratio")
	b.ReportMetric(batchTime.Seconds(), "batch-s")
	b.ReportMetric(callTime.Seconds(), "calls-s")
	fmt.Fprintf(os.Stderr, "BenchmarkBatch20k: %d samples, %d batches (%d requests, %d submitted twice), 3 kill -9; every sample once: %v; "+
		"exact_match %.4f in batches, %.4f with calls; cost $%.6f in batches, $%.6f with calls (ratio %.6f); %v in batches, %v with calls\n",
		n, st.Batches, st.BatchRequests, st.DuplicateBatchRequests, once, batched.Metrics["exact_match"], sync.Metrics["exact_match"],
		*batched.Cost.Model, *sync.Cost.Model, ratio, batchTime.Round(time.Second), callTime.Round(time.Second))
	switch {
	case st.DuplicateBatchRequests != 0:
		b.Errorf("%d requests were submitted twice", st.DuplicateBatchRequests)
	case !once:
		b.Errorf("not every sample exactly once: %d ids", len(ids))
	case batched.Metrics["exact_match"] != sync.Metrics["exact_match"]:
		b.Errorf("exact_match %v in batches, %v with calls", batched.Metrics["exact_match"], sync.Metrics["exact_match"])
	case math.Abs(ratio-0.5) > 1e-12:
		b.Errorf("the batches cost %v of the calls, not half", ratio)
	}
}
