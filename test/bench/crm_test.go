package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/results"
)

// BenchmarkCRMIsolation measures what per-sample isolation costs, on the CRM
// example (docs/examples/crm: an agent working in its slot's PostgreSQL
// database, recreated from a template and seeded before each conversation):
//   - the wall time of 24 conversations with 8 in flight (8 slots, 8
//     databases) against the same work one at a time (concurrency 1, what a
//     shared database forced); goal: at least 2× faster (2 cores bound it:
//     each conversation runs a dozen psql processes);
//   - the reset hook's overhead per sample: 40 conversations one at a time
//     with an agent that does nothing, with the hook and without it.
//
// It needs PostgreSQL's programs (hack/install-host-deps.sh images); as root
// it runs proctor as nobody, since PostgreSQL refuses root.
func BenchmarkCRMIsolation(b *testing.B) {
	dir := b.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // nobody's, below
		if err := os.Chmod(d, 0o777); err != nil {
			b.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "proctor")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/proctor-dev/proctor").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	example := filepath.Join("..", "..", "docs", "examples", "crm")
	src, err := os.ReadFile(filepath.Join(example, "evaluation.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(example, "conversations.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conversations.jsonl"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	// One agent model, n conversations, edited by edit.
	file := func(name string, n int, edit func(string) string) string {
		s := string(src)
		s = testutil.CRMFirstAgentOnly(b, s)
		s = strings.Replace(s, "source: {file: conversations.jsonl}", fmt.Sprintf("source: {file: conversations.jsonl}\n    limit: %d", n), 1)
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(edit(s)), 0o644); err != nil {
			b.Fatal(err)
		}
		return path
	}
	same := func(s string) string { return s }
	pgBin := ""
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
		slices.Sort(dirs)
		pgBin = dirs[len(dirs)-1]
	}
	run := func(manifest string, n int, extra ...string) time.Duration {
		out := filepath.Join(dir, "out-"+filepath.Base(manifest)+strings.Join(extra, ""))
		cmd := exec.Command(bin, append([]string{"run", "-f", manifest, "-o", out, "--progress", "none"}, extra...)...)
		cmd.Env = []string{"PATH=" + pgBin + ":" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir}
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("proctor run %s: %v\n%s", manifest, err, stderr.String())
		}
		wall := time.Since(start)
		ss := readSummary(b, filepath.Join(out, results.SummaryFile))
		if ss.Completed != int64(n) || ss.Errored != 0 || ss.Metrics["exact_match"] != 1 {
			b.Fatalf("%s: %+v, want %d conversations all right\n%s", manifest, ss, n, stderr.String())
		}
		return wall
	}
	idle := func(withHook bool) func(string) string {
		return func(s string) string {
			// The agent answers at once what the hook would have seeded.
			s = testutil.CutSpan(b, s, "      command:\n      - sh\n      - -c\n      - |\n        set -eu", "      files:")
			s = strings.Replace(s, "      files:", "      command: [echo, \"{{ .Sample.expected }}\"]\n      files:", 1)
			if !withHook {
				s = testutil.CutSpan(b, s, "    beforeSample:", "  models:")
			}
			return s
		}
	}
	for range b.N {
		const n, m = 24, 40
		parallel := run(file("parallel", n, same), n, "--concurrency", "8")
		serial := run(file("serial", n, same), n, "--concurrency", "1")
		with := run(file("hook", m, idle(true)), m, "--concurrency", "1")
		without := run(file("nohook", m, idle(false)), m, "--concurrency", "1")
		overhead := (with - without) / m
		b.ReportMetric(parallel.Seconds(), "wall-8-slots-s")
		b.ReportMetric(serial.Seconds(), "wall-1-slot-s")
		b.ReportMetric(serial.Seconds()/parallel.Seconds(), "speedup")
		b.ReportMetric(float64(overhead.Milliseconds()), "reset-ms/sample")
		b.Logf("%d conversations: %s with 8 slots, %s one at a time (%.1f×); the reset hook: %s per sample (%d samples: %s with it, %s without)",
			n, parallel.Round(100*time.Millisecond), serial.Round(100*time.Millisecond), serial.Seconds()/parallel.Seconds(),
			overhead.Round(time.Millisecond), m, with.Round(100*time.Millisecond), without.Round(100*time.Millisecond))
		if serial < 2*parallel {
			b.Errorf("goal: 8 slots at least 2× faster than one at a time; got %.2f×", serial.Seconds()/parallel.Seconds())
		}
	}
}

func readSummary(tb testing.TB, path string) results.Summary {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var s struct {
		Results []results.Summary `json:"results"`
	}
	if err := json.Unmarshal(b, &s); err != nil || len(s.Results) != 1 {
		tb.Fatalf("%s: %v (%d results)", path, err, len(s.Results))
	}
	return s.Results[0]
}
