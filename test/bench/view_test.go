package bench

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// writeRun writes a results directory of n records of model gpt on
// dataset qs: sample i is answered right unless wrong(i), with latency and
// tokens that vary, and its summary.json.
func writeRun(tb testing.TB, dir string, n int, wrong func(int) bool) {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	right := 0
	for i := range n {
		score, out := 1, fmt.Sprint(i%997+3)
		if wrong(i) {
			score, out = 0, fmt.Sprint(i%997+4)
		} else {
			right++
		}
		fmt.Fprintf(w, `{"id":"s-%07d","model":"gpt","dataset":"qs","output":"%s","scores":{"exact_match":%d},"error":"","attempts":1,"latencyMillis":%d,"inputTokens":%d,"outputTokens":2,"cost":%g,"expected":"%d","startedAt":"2026-11-28T01:02:03.101Z","endedAt":"2026-11-28T01:02:03.313Z"}`+"\n",
			i, out, score, 80+i%400, 20+i%50, float64(20+i%50)*1e-7, i%997+3)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	summary := fmt.Sprintf(`{"results":[{"model":"gpt","dataset":"qs","total":%d,"completed":%d,"errored":0,"metrics":{"exact_match":%g},"latencyMillis":{"p50":280,"p95":460},"tokens":{"input":0,"output":0},"cost":{"model":null}}]}`,
		n, n, float64(right)/float64(n))
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), []byte(summary), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkView1M: proctor view of runs of a million records each (issue
// 28's goals): from its start, the first page of one run's samples in at
// most 2 s, and two runs' comparison in at most 5 s, with the viewer under
// 500 MiB; and (ours) a text search of the million in at most 1 s.
func BenchmarkView1M(b *testing.B) {
	const n = 1_000_000
	const pageGoal, compareGoal, searchGoal, memGoal = 2 * time.Second, 5 * time.Second, time.Second, 500 << 10 // KiB
	dir := b.TempDir()
	writeRun(b, filepath.Join(dir, "nightly"), n, func(i int) bool { return i%10 == 9 })
	// The candidate regresses on 1% of the samples.
	writeRun(b, filepath.Join(dir, "candidate"), n, func(i int) bool { return i%10 == 9 || i%100 == 42 })
	bin := filepath.Join(b.TempDir(), "proctor")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/proctor-dev/proctor").CombinedOutput(); err != nil {
		b.Fatalf("building proctor: %v\n%s", err, out)
	}
	// view serves the runs and asks for paths in turn: it times the first
	// from the process's start, the others from their own.
	view := func(paths []string, runs ...string) ([]time.Duration, int64, [][]byte) {
		b.Helper()
		cmd := exec.Command(bin, append(append([]string{"view"}, runs...), "--addr", "127.0.0.1:0")...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + b.TempDir(), "PATH=" + os.Getenv("PATH"), "TMPDIR=" + b.TempDir()}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		peak := make(chan int64)
		go func() { peak <- peakRSS(cmd.Process.Pid, done) }()
		defer func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}()
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			b.Fatalf("proctor view: %v", err)
		}
		m := regexp.MustCompile(`at (http://[^ ]+/) `).FindStringSubmatch(line)
		if m == nil {
			b.Fatalf("proctor view said %q", line)
		}
		var took []time.Duration
		var bodies [][]byte
		for i, path := range paths {
			if i > 0 {
				start = time.Now()
			}
			resp, err := http.Get(m[1] + path)
			if err != nil {
				b.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			took = append(took, time.Since(start))
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %d %v %s", path, resp.StatusCode, err, body)
			}
			bodies = append(bodies, body)
		}
		close(done)
		return took, <-peak, bodies
	}
	for range b.N {
		// What the page asks first; then a text search over every sample's
		// id, input, output and expected value (sample 100,999 says 1003).
		took, pageKiB, bodies := view([]string{"api/runs/1/samples?limit=200", "api/runs/1/samples?limit=200&q=s-0100999"}, "candidate")
		page, search := took[0], took[1]
		if !regexp.MustCompile(`"total":1000000`).Match(bodies[0]) {
			b.Errorf("the first page: %.200s", bodies[0])
		}
		if !regexp.MustCompile(`"total":1,.*"id":"s-0100999"`).Match(bodies[1]) {
			b.Errorf("the search: %.200s", bodies[1])
		}
		took, cmpKiB, bodies := view([]string{"api/compare?base=1&cand=2&limit=100"}, "nightly", "candidate")
		cmp, body := took[0], bodies[0]
		if !regexp.MustCompile(`"regressed":10000,`).Match(body) || !regexp.MustCompile(`"pairs":\[\{"model":"gpt","baselineModel":"gpt","dataset":"qs","id":"s-0000042"`).Match(body) {
			b.Errorf("the comparison: %.400s", body)
		}
		kib := max(pageKiB, cmpKiB)
		b.Logf("a million records: the first page %v after the start (peak RSS %.0f MiB), a text search %v; two runs compared %v after the start (peak RSS %.0f MiB)",
			page.Round(time.Millisecond), float64(pageKiB)/1024, search.Round(time.Millisecond), cmp.Round(time.Millisecond), float64(cmpKiB)/1024)
		b.ReportMetric(page.Seconds(), "first-page-s")
		b.ReportMetric(search.Seconds(), "search-s")
		b.ReportMetric(cmp.Seconds(), "compare-s")
		b.ReportMetric(float64(kib)/1024, "peak-RSS-MiB")
		if page > pageGoal || cmp > compareGoal || kib > memGoal || search > searchGoal {
			b.Errorf("goal: the first page in %v, a text search in %v, a comparison in %v, at most %d MiB; took %v, %v, %v and %.0f MiB",
				pageGoal, searchGoal, compareGoal, memGoal>>10, page, search, cmp, float64(kib)/1024)
		}
	}
}
