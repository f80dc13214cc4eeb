package local_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// slowEval writes an evaluation of n arithmetic samples (ids q1..qn) on one
// openai model with the given concurrency, and returns the path of its journal.
func slowEval(w *workspace, srv *fake, n, concurrency int) string {
	w.write("qs.jsonl", arithmeticJSONL("q", n))
	w.writeEval("slow", fmt.Sprintf(`  concurrency: %d
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
`, concurrency, srv.OpenAIURL()))
	return filepath.Join(w.out, "checkpoint", "gpt.qs.jsonl")
}

// settledRequests waits until the server's request count has not moved for
// 200ms (requests a killed client had already sent still arrive) and returns it.
func settledRequests(srv *fake) int64 {
	last, since := srv.Stats().Requests, time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if n := srv.Stats().Requests; n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= 200*time.Millisecond {
			break
		}
	}
	return last
}

// unique returns the distinct values of xs.
func unique(xs []int) map[int]bool {
	m := map[int]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// tearLastLine cuts the last line of the file in half, as a crash in the middle
// of a write would leave it.
func tearLastLine(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.TrimSuffix(data, []byte("\n"))
	start := bytes.LastIndexByte(body, '\n') + 1
	if start == 0 {
		t.Fatalf("%s has no record line to tear:\n%s", path, data)
	}
	cut := start + (len(body)-start)/2
	if err := os.Truncate(path, int64(cut)); err != nil {
		t.Fatal(err)
	}
}

func TestResumeAfterKill9(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		torn bool
	}{
		{"clean", false},
		{"torn-last-line", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n, concurrency = 200, 4
			srv := newFake(t, fakellm.Config{Latency: 50 * time.Millisecond})
			w := newWorkspace(t)
			journal := slowEval(w, srv, n, concurrency)

			p := w.start(w.runArgs()...)
			waitFor(t, 20*time.Second, "records in the checkpoint", func() bool {
				return len(journalRecords(t, journal)) >= 12 || p.exited()
			})
			if p.exited() {
				t.Fatalf("proctor finished before it could be killed\n%s", p.wait())
			}
			p.signal(syscall.SIGKILL)
			if r := p.wait(); r.Code != 128+int(syscall.SIGKILL) {
				t.Fatalf("want death by SIGKILL\n%s", r)
			}
			written := len(unique(journalRecords(t, journal)))
			// Requests already on the wire at the kill still reach the server.
			firstCalls := settledRequests(srv)
			if firstCalls > int64(written+concurrency) {
				t.Errorf("the killed run made %d calls but checkpointed %d samples: more than the %d in flight were lost", firstCalls, written, concurrency)
			}
			// Tearing the last line loses one finished record: its sample runs again.
			allowed := n + concurrency
			if tc.torn {
				tearLastLine(t, journal)
				if after := len(unique(journalRecords(t, journal))); after != written-1 {
					t.Fatalf("tearing the last line left %d whole records, want %d", after, written-1)
				}
				allowed++
			}
			done := unique(journalRecords(t, journal))
			if len(done) == 0 || len(done) >= n {
				t.Fatalf("after the kill the checkpoint holds %d samples, want some but not all", len(done))
			}

			res := w.run()
			if res.Code != 0 {
				t.Fatalf("resumed run: want exit 0\n%s", res)
			}
			recs, _ := readRecords(t, w.out)
			expectIDs(t, recs, "q", n)
			for _, r := range recs {
				if r.Error != "" || r.Scores["exact_match"] != 1 {
					t.Errorf("%s: want a correct answer, got %+v", r.ID, r)
				}
			}
			total := srv.Stats().Requests
			if second := total - firstCalls; second != int64(n-len(done)) {
				t.Errorf("resumed run made %d calls, want %d: one per sample the checkpoint did not hold", second, n-len(done))
			}
			if total > int64(allowed) {
				t.Errorf("%d calls over both runs, want at most %d (%d samples, plus the %d that were in flight at the kill, plus a torn record)", total, allowed, n, concurrency)
			}
			s := readSummary(t, w.out).Results[0]
			if s.Total != n || s.Completed != n || s.Errored != 0 {
				t.Errorf("summary after resume: %+v, want %d of %d completed, none errored", s, n, n)
			}
			row := strings.Fields(lines(res.Stdout)[1])
			if !slices.Contains(row, fmt.Sprintf("%d/%d", n, n)) || row[3] != "0" {
				t.Errorf("summary row after resume %q: want %d/%d done and 0 errors", lines(res.Stdout)[1], n, n)
			}
		})
	}
}

var interruptedRE = regexp.MustCompile(`interrupted with (\d+) of (\d+) samples done; run the same command again to resume`)

func TestGracefulInterrupt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{
		{syscall.SIGINT, 130},
		{syscall.SIGTERM, 143},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			t.Parallel()
			const n, concurrency, grace = 100, 4, 10 * time.Second
			srv := newFake(t, fakellm.Config{Latency: 50 * time.Millisecond})
			w := newWorkspace(t)
			journal := slowEval(w, srv, n, concurrency)

			p := w.start(w.runArgs("--grace-period", grace.String())...)
			waitFor(t, 20*time.Second, "records in the checkpoint", func() bool {
				return len(journalRecords(t, journal)) >= 8 || p.exited()
			})
			if p.exited() {
				t.Fatalf("proctor finished before it could be interrupted\n%s", p.wait())
			}
			sent := time.Now()
			p.signal(tc.sig)
			res := p.wait()
			if took := time.Since(sent); took > grace {
				t.Errorf("proctor took %v to exit after %v, more than the %v grace period", took, tc.sig, grace)
			}
			if res.Code != tc.code {
				t.Fatalf("after %v: want exit %d\n%s", tc.sig, tc.code, res)
			}
			m := interruptedRE.FindStringSubmatch(res.Stderr)
			if m == nil {
				t.Fatalf("stderr does not say how many samples are done and how to resume\n%s", res)
			}
			doneN, _ := strconv.Atoi(m[1])
			if m[2] != strconv.Itoa(n) || doneN == 0 || doneN >= n {
				t.Fatalf("interrupt message %q: want some but not all of %d samples done", m[0], n)
			}

			recs, _ := readRecords(t, w.out)
			if len(recs) != doneN {
				t.Errorf("results.jsonl after the interrupt: %d records, but the message says %d done", len(recs), doneN)
			}
			for i := 1; i < len(recs); i++ {
				a, _ := strconv.Atoi(strings.TrimPrefix(recs[i-1].ID, "q"))
				b, _ := strconv.Atoi(strings.TrimPrefix(recs[i].ID, "q"))
				if a >= b {
					t.Errorf("results.jsonl after the interrupt is not in sample order: %s before %s", recs[i-1].ID, recs[i].ID)
				}
			}
			if s := readSummary(t, w.out).Results[0]; s.Completed != int64(doneN) || s.Total != n || s.Errored != 0 {
				t.Errorf("summary.json after the interrupt: %+v, want %d of %d completed", s, doneN, n)
			}
			// A graceful stop lets samples in flight finish: nothing is thrown away.
			if calls := srv.Stats().Requests; calls != int64(doneN) {
				t.Errorf("the interrupted run made %d calls but kept %d records: in-flight samples were lost", calls, doneN)
			}

			again := w.run()
			if again.Code != 0 {
				t.Fatalf("rerun: want exit 0\n%s", again)
			}
			recs, _ = readRecords(t, w.out)
			expectIDs(t, recs, "q", n)
			if calls := srv.Stats().Requests; calls != n {
				t.Errorf("%d calls over both runs, want exactly %d", calls, n)
			}
		})
	}
}

// TestInterruptCutsInFlightSamples covers the ends of the grace period: a second
// signal, or the period running out, stops at once; the sample cut off leaves no
// record and runs again next time.
func TestInterruptCutsInFlightSamples(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		grace         time.Duration
		secondSignal  bool
		maxAfterFirst time.Duration
	}{
		{"second-signal", 30 * time.Second, true, 10 * time.Second},
		{"grace-expires", 300 * time.Millisecond, false, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The slow sample hangs on its first call only, so the rerun is quick.
			var mu sync.Mutex
			seen := map[string]bool{}
			srv := newFake(t, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
				reply := fakellm.DefaultReply(req)
				last := req.Messages[len(req.Messages)-1].Content
				mu.Lock()
				defer mu.Unlock()
				if strings.Contains(last, "2 + 4") && !seen[last] {
					seen[last] = true
					reply.Delay = time.Minute
				}
				return reply
			}})
			w := newWorkspace(t)
			journal := slowEval(w, srv, 3, 3) // q2 is "What is 2 + 4?"

			p := w.start(w.runArgs("--grace-period", tc.grace.String())...)
			waitFor(t, 20*time.Second, "the two quick samples", func() bool {
				return len(journalRecords(t, journal)) == 2 || p.exited()
			})
			if p.exited() {
				t.Fatalf("proctor finished although a sample hangs\n%s", p.wait())
			}
			sent := time.Now()
			p.signal(syscall.SIGINT)
			if tc.secondSignal {
				waitFor(t, 10*time.Second, "the stopping note", func() bool {
					return strings.Contains(p.stderr.String(), "Stopping")
				})
				p.signal(syscall.SIGINT)
			}
			res := p.wait()
			if took := time.Since(sent); took > tc.maxAfterFirst {
				t.Errorf("proctor took %v to exit, want under %v", took, tc.maxAfterFirst)
			}
			if res.Code != 130 {
				t.Fatalf("want exit 130\n%s", res)
			}
			if m := interruptedRE.FindStringSubmatch(res.Stderr); m == nil || m[1] != "2" || m[2] != "3" {
				t.Errorf("want the message to say 2 of 3 samples are done\n%s", res)
			}
			recs, _ := readRecords(t, w.out)
			if got := ids(recs); !slices.Equal(got, []string{"q1", "q3"}) {
				t.Errorf("results.jsonl after the cut: ids %v, want [q1 q3] (the cut sample leaves no record)", got)
			}

			again := w.run()
			if again.Code != 0 {
				t.Fatalf("rerun: want exit 0\n%s", again)
			}
			recs, _ = readRecords(t, w.out)
			expectIDs(t, recs, "q", 3)
			if calls := srv.Stats().Requests; calls != 4 {
				t.Errorf("%d calls over both runs, want 4 (the cut sample twice)", calls)
			}
		})
	}
}

// TestInterruptWhileDownloading interrupts the preparation (a url: dataset that
// never finishes downloading): nothing has run, and the exit code still tells the
// signal apart.
func TestInterruptWhileDownloading(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{
		{syscall.SIGINT, 130},
		{syscall.SIGTERM, 143},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{}, 1)
			data := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				select { // hang until the client gives up
				case <-r.Context().Done():
				case <-time.After(runTimeout):
				}
			}))
			t.Cleanup(data.Close)
			srv := newFake(t, fakellm.Config{})
			w := newWorkspace(t)
			w.writeEval("downloading", fmt.Sprintf(`  datasets:
  - name: qs
    source: {url: %s/qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
`, data.URL, srv.OpenAIURL()))

			p := w.start(w.runArgs()...)
			select {
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatalf("proctor never started downloading\n%s", p.wait())
			}
			p.signal(tc.sig)
			res := p.wait()
			if res.Code != tc.code {
				t.Errorf("%v while downloading: exit %d, want %d\n%s", tc.sig, res.Code, tc.code, res)
			}
			if !strings.Contains(res.Stderr, "interrupted before the run started") {
				t.Errorf("stderr does not say the run never started\n%s", res)
			}
			if st := srv.Stats(); st.Requests != 0 {
				t.Errorf("the model server was called %d times", st.Requests)
			}
		})
	}
}

// blockedOnFIFO reports whether a thread of process pid waits in open(2) for the
// writer of a FIFO (Linux: the kernel's wait_for_partner).
func blockedOnFIFO(pid int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), "wait_for_partner") {
			return true
		}
	}
	return false
}

// feedFIFO writes data to every reader that opens the FIFO at path, until stop.
func feedFIFO(path string, data []byte, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil { // ENXIO: no reader yet
			time.Sleep(2 * time.Millisecond)
			continue
		}
		_, _ = f.Write(data) // best effort: the test checks what the reader got
		f.Close()
		// Let the reader see EOF and close before the next writer opens.
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInterruptWhileReadingLocalData interrupts proctor while it is still reading
// a local dataset to count it (here a FIFO whose writer comes late, standing in
// for a huge file on a slow disk). The run must not start as if nothing happened.
func TestInterruptWhileReadingLocalData(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("needs Linux /proc")
	}
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	fifo := filepath.Join(w.dir, "qs.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	w.writeEval("fifo", fmt.Sprintf(`  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}
  scoring:
  - type: exact_match
`, srv.OpenAIURL()))

	p := w.start(w.runArgs()...)
	waitFor(t, 20*time.Second, "proctor to open the dataset", func() bool {
		return blockedOnFIFO(p.cmd.Process.Pid) || p.exited()
	})
	p.signal(syscall.SIGINT)
	// The data arrives only after the interrupt.
	stop := make(chan struct{})
	defer close(stop)
	go feedFIFO(fifo, []byte(arithmeticJSONL("q", 5)), stop)
	res := p.wait()
	if res.Code != 130 {
		t.Errorf("SIGINT while reading the dataset: exit %d, want 130\n%s", res.Code, res)
	}
	if st := srv.Stats(); st.Requests != 0 {
		t.Errorf("after the interrupt proctor still called the model %d times", st.Requests)
	}
}

// TestTwoRunsOnOneOutputDirectory starts the same command twice at once (two
// terminals, a retried CI job). Either one must refuse the busy directory, or the
// results that both report as complete must be complete.
func TestTwoRunsOnOneOutputDirectory(t *testing.T) {
	t.Parallel()
	const n = 100
	srv := newFake(t, fakellm.Config{Latency: 20 * time.Millisecond})
	w := newWorkspace(t)
	slowEval(w, srv, n, 4)
	a := w.start(w.runArgs()...)
	b := w.start(w.runArgs()...)
	ra, rb := a.wait(), b.wait()
	if ra.Code != 0 || rb.Code != 0 {
		return // one of them refused: fine
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != n {
		t.Errorf("both runs exited 0, but results.jsonl holds %d of %d samples\nA: %s\nB: %s", len(recs), n, ra, rb)
	}
}

// TestEarlierErrorsAreSaidToBeEarlier: rerun after the server came back, a
// run whose samples all failed last time makes no call (the errors are
// results), and says so: these are an earlier run's errors, and
// --retry-errors retries them; with it, every sample is right.
func TestEarlierErrorsAreSaidToBeEarlier(t *testing.T) {
	t.Parallel()
	// A port nothing listens on yet: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	w := newWorkspace(t)
	w.write("qs.jsonl", arithmeticJSONL("q", 5))
	w.writeEval("down", fmt.Sprintf(`  retry: {maxAttempts: 1}
  datasets:
  - name: qs
    source: {file: qs.jsonl}
  models:
  - name: gpt
    provider: openai
    model: fake-model
    baseURL: http://%s/v1
  scoring:
  - type: exact_match
`, addr))
	if r := w.run(); r.Code != 1 || !strings.Contains(r.Stderr, "connection refused") {
		t.Fatalf("the server down: want exit 1, connection refused\n%s", r)
	}

	// The server is back, on the same address.
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := httptest.NewUnstartedServer(fakellm.New(fakellm.Config{}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	again := w.run()
	if again.Code != 1 || !strings.Contains(again.Stderr, "5 of these errors were recorded by an earlier run") ||
		!strings.Contains(again.Stderr, "--retry-errors") {
		t.Fatalf("rerun: want exit 1 saying the errors are earlier ones and how to retry them\n%s", again)
	}
	retried := w.run("--retry-errors")
	if retried.Code != 0 || strings.Contains(retried.Stderr, "earlier run") {
		t.Fatalf("--retry-errors:\n%s", retried)
	}
	recs, _ := readRecords(t, w.out)
	for _, rec := range recs {
		if rec.Error != "" || rec.Scores["exact_match"] != 1 {
			t.Errorf("%s: %q %v", rec.ID, rec.Error, rec.Scores)
		}
	}
}
