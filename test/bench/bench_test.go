// Package bench checks Proctor's performance goals against the fake model server
// on loopback. Run with `make bench`; each benchmark runs once (-benchtime 1x),
// reports its figures as ratios and fails if its goal is not met.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/evalfile"
	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// evaluation is a manifest for one openai-compatible model on a jsonl file of
// arithmetic questions, with extra spec lines appended under the model.
func evaluation(baseURL, dataFile, modelExtra string, concurrency int) string {
	return fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: bench}
spec:
  datasets:
  - name: arith
    source: {file: %s}
  models:
  - name: m
    provider: openai
    model: fake
    baseURL: %s/v1
%s
  scoring:
  - type: exact_match
  concurrency: %d
  retry: {maxAttempts: 100, initialBackoff: 100ms, maxBackoff: 2s}
`, dataFile, baseURL, modelExtra, concurrency)
}

// writeArithmetic writes n questions "What is i+1?" with their answers.
func writeArithmetic(tb testing.TB, dir string, n int) string {
	tb.Helper()
	path := filepath.Join(dir, "data.jsonl")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range n {
		fmt.Fprintf(w, `{"id":"q%d","input":"What is %d+1?","expected":"%d"}`+"\n", i, i, i+1)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	return path
}

// runEngine compiles the manifest and runs it into a fresh output directory,
// returning the summary and the wall time.
func runEngine(tb testing.TB, manifest string) (results.Summary, time.Duration) {
	tb.Helper()
	return runEngineWith(tb, manifest, runner.Options{})
}

// runEngineWith is runEngine with the engine's options.
func runEngineWith(tb testing.TB, manifest string, opts runner.Options) (results.Summary, time.Duration) {
	tb.Helper()
	dir := tb.TempDir()
	ev, err := evalfile.Decode("bench.yaml", []byte(manifest))
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	plan, err := compile.Build(ctx, ev, compile.Env{BaseDir: dir, DataDir: dir, CacheDir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	out, err := results.OpenDir(filepath.Join(dir, "out"))
	if err != nil {
		tb.Fatal(err)
	}
	tasks := plan.Tasks()
	var pairs []results.Pair
	for _, t := range tasks {
		m, d := plan.Model(t.Model), plan.Dataset(t.Dataset)
		p := results.Pair{Model: m.Name, Dataset: d.Name, Fingerprint: plan.CheckpointFingerprint(m, d), Total: d.Total, Metrics: plan.MetricNames()}
		if _, err := out.Open(p, results.OpenOptions{}); err != nil {
			tb.Fatal(err)
		}
		pairs = append(pairs, p)
	}
	eng, err := runner.New(plan, opts)
	if err != nil {
		tb.Fatal(err)
	}
	compiled := time.Now()
	if err := eng.Run(ctx, tasks, out); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
	ran := time.Now()
	ss, err := out.Assemble(pairs)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("compile %v, run %v, assemble %v", compiled.Sub(start).Round(time.Millisecond),
		ran.Sub(compiled).Round(time.Millisecond), time.Since(ran).Round(time.Millisecond))
	return ss[0], time.Since(start)
}

func fakeServer(tb testing.TB, cfg fakellm.Config) (*fakellm.Server, string) {
	tb.Helper()
	s := fakellm.New(cfg)
	hs := httptest.NewServer(s)
	tb.Cleanup(hs.Close)
	return s, hs.URL
}

func checkAllCorrect(tb testing.TB, s results.Summary, n int) {
	tb.Helper()
	if s.Completed != int64(n) || s.Errored != 0 || s.Metrics["exact_match"] != 1 {
		tb.Errorf("summary %+v: want %d samples all correct", s, n)
	}
}

// BenchmarkDeclaredLimit: the model declares the server's own limit (1,200 rpm,
// 200 ms latency, enforced as the providers document it: a bucket refilled
// continuously that holds one second of the limit, 20 requests). Goal: achieved
// rpm / limit >= 0.97 with zero 429s.
func BenchmarkDeclaredLimit(b *testing.B) {
	const rpm, n = 1200, 1200
	for range b.N {
		srv, url := fakeServer(b, fakellm.Config{Latency: 200 * time.Millisecond, RequestsPerMinute: rpm})
		data := writeArithmetic(b, b.TempDir(), n)
		sum, wall := runEngine(b, evaluation(url, data, fmt.Sprintf("    rateLimit: {requestsPerMinute: %d}", rpm), 10))
		checkAllCorrect(b, sum, n)
		st := srv.Stats()
		achieved := float64(st.Requests) / wall.Minutes()
		ratio := achieved / rpm
		b.ReportMetric(ratio, "rpm/limit")
		b.ReportMetric(float64(st.RateLimited), "429s")
		b.ReportMetric(float64(st.MaxRequestsInWindow), "max/minute")
		b.Logf("%d requests in %v: %.0f rpm against a limit of %d (%.3f), %d answered 429, at most %d in any minute",
			st.Requests, wall.Round(time.Millisecond), achieved, rpm, ratio, st.RateLimited, st.MaxRequestsInWindow)
		if ratio < 0.97 || st.RateLimited != 0 {
			b.Errorf("goal: rpm/limit >= 0.97 and no 429s; got %.3f and %d", ratio, st.RateLimited)
		}
	}
}

// BenchmarkUndeclaredLimit: the server allows 1,200 rpm as a token bucket refilled
// continuously (as Anthropic documents) with one second of burst, but the model
// declares no limit. Goal: every sample correct and ideal time / wall time >= 0.85,
// the ideal being what the server's rate allows.
func BenchmarkUndeclaredLimit(b *testing.B) {
	const rpm, burst, n = 1200, 20, 1200
	for range b.N {
		srv, url := fakeServer(b, fakellm.Config{Latency: 200 * time.Millisecond, RequestsPerMinute: rpm, LimitMode: fakellm.LimitBucket, Burst: burst})
		data := writeArithmetic(b, b.TempDir(), n)
		sum, wall := runEngine(b, evaluation(url, data, "", 32))
		checkAllCorrect(b, sum, n)
		st := srv.Stats()
		ideal := time.Duration(float64(n-burst) / (rpm / 60.0) * float64(time.Second))
		eff := ideal.Seconds() / wall.Seconds()
		b.ReportMetric(eff, "efficiency")
		b.ReportMetric(float64(st.RateLimited), "429s")
		b.Logf("%d samples in %v (ideal %v): efficiency %.3f, %d answered 429 and retried", n, wall.Round(time.Millisecond), ideal, eff, st.RateLimited)
		if eff < 0.85 {
			b.Errorf("goal: efficiency >= 0.85; got %.3f", eff)
		}
	}
}

// BenchmarkRunnerVsBareHTTP: a zero-latency server, no limits. Goal: the runner's
// samples/s >= 0.7 x a bare net/http loop making the same requests at the same
// concurrency. Client and server share the machine, so each round measures both
// back to back against fresh servers, and the median round's ratio is the result.
func BenchmarkRunnerVsBareHTTP(b *testing.B) {
	const n, concurrency, rounds = 20000, 32, 3
	data := writeArithmetic(b, b.TempDir(), n)
	for range b.N {
		var ratios []float64
		for r := range rounds {
			_, url := fakeServer(b, fakellm.Config{})
			bare := bareLoop(b, url+"/v1/chat/completions", n, concurrency)
			_, url = fakeServer(b, fakellm.Config{})
			sum, wall := runEngine(b, evaluation(url, data, "", concurrency))
			checkAllCorrect(b, sum, n)
			runnerRate := float64(n) / wall.Seconds()
			ratios = append(ratios, runnerRate/bare)
			b.Logf("round %d: bare loop %.0f req/s, runner %.0f samples/s (%.3f of bare)", r+1, bare, runnerRate, runnerRate/bare)
		}
		slices.Sort(ratios)
		ratio := ratios[len(ratios)/2]
		b.ReportMetric(ratio, "runner/bare")
		if ratio < 0.7 {
			b.Errorf("goal: runner/bare >= 0.7; got %.3f (median of %d rounds)", ratio, rounds)
		}
	}
}

// bareLoop posts n chat completions from concurrency goroutines and decodes each
// answer, returning requests per second: the floor any client pays.
func bareLoop(b *testing.B, url string, n, concurrency int) float64 {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for i := range jobs {
				body := fmt.Sprintf(`{"model":"fake","messages":[{"role":"user","content":"What is %d+1?"}]}`, i)
				resp, err := client.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				var out struct {
					Choices []struct {
						Message struct{ Content string } `json:"message"`
					} `json:"choices"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) == 0 {
					b.Errorf("bad answer: %v", err)
				}
				_, _ = io.Copy(io.Discard, resp.Body) // drained, so that the connection is reused
				resp.Body.Close()
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkMillionSamplesMemory: `proctor run` over a 1,000,000-line JSONL file
// against a zero-latency server. Goal: peak RSS <= 150 MiB.
func BenchmarkMillionSamplesMemory(b *testing.B) {
	const n = 1_000_000
	dir := b.TempDir()
	bin := filepath.Join(dir, "proctor")
	build := exec.Command("go", "build", "-o", bin, "github.com/proctor-dev/proctor")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	for range b.N {
		_, url := fakeServer(b, fakellm.Config{})
		data := writeArithmetic(b, dir, n)
		manifest := filepath.Join(dir, "evaluation.yaml")
		if err := os.WriteFile(manifest, []byte(evaluation(url, data, "", 32)), 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, "run", "-f", manifest, "-o", filepath.Join(dir, "out"), "--progress", "none")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("proctor run: %v\n%s", err, stderr.String())
		}
		wall := time.Since(start)
		peak := float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024 // KiB → MiB
		b.ReportMetric(peak, "peakRSS-MiB")
		b.ReportMetric(float64(n)/wall.Seconds(), "samples/s")
		b.Logf("%d samples in %v, peak RSS %.1f MiB", n, wall.Round(time.Second), peak)
		if peak > 150 {
			b.Errorf("goal: peak RSS <= 150 MiB; got %.1f", peak)
		}
		lines := countLines(b, filepath.Join(dir, "out", results.ResultsFile))
		if lines != n {
			b.Errorf("results.jsonl has %d lines, want %d", lines, n)
		}
	}
}

func countLines(tb testing.TB, path string) int {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	n := 0
	buf := make([]byte, 1<<20)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err != nil {
			return n
		}
	}
}
