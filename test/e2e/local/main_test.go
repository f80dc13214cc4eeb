// Package local_test runs the proctor binary end to end: `proctor run` as a
// subprocess against fake model servers (test/fakellm) started in-process, so a
// test sees both what the CLI wrote and what the server received.
package local_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/proctor-dev/proctor/test/fakellm"
)

// proctorBin is the binary under test, built once by TestMain.
var proctorBin string

// fakeAgentBin is test/fakeagent: an agent making its own model calls.
var fakeAgentBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "proctor-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Tests may run proctor as another user (unprivileged).
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	proctorBin = filepath.Join(dir, "proctor")
	build := exec.Command("go", "build", "-o", proctorBin, "github.com/proctor-dev/proctor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building proctor:", err)
		return 1
	}
	fakeAgentBin = filepath.Join(dir, "fakeagent")
	build = exec.Command("go", "build", "-o", fakeAgentBin, "github.com/proctor-dev/proctor/test/fakeagent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the fake agent:", err)
		return 1
	}
	return m.Run()
}

// runTimeout bounds every proctor process, so a hang fails a test instead of the
// whole package.
const runTimeout = 45 * time.Second

// workspace is one test's little world: a directory holding evaluation.yaml and
// its data, an output directory, a cache directory, a HOME and a TMPDIR of its
// own, and the environment proctor runs with (PATH, HOME, TMPDIR and whatever
// the test adds; never the caller's API keys).
type workspace struct {
	t        *testing.T
	dir      string // the evaluation file and its data
	out      string // -o
	cacheDir string // --cache-dir
	home     string
	tmp      string
	env      map[string]string
	// cred, when set, runs proctor as another user (see unprivileged).
	cred *syscall.Credential
	// wrap, when set, is a command that runs proctor (prlimit ... --).
	wrap []string
	// timeout bounds each proctor process; 0 means runTimeout.
	timeout time.Duration
}

func newWorkspace(t *testing.T) *workspace {
	t.Helper()
	root := t.TempDir()
	w := &workspace{
		t:        t,
		dir:      filepath.Join(root, "eval"),
		out:      filepath.Join(root, "out"),
		cacheDir: filepath.Join(root, "cache"),
		home:     filepath.Join(root, "home"),
		tmp:      filepath.Join(root, "tmp"),
		env:      map[string]string{},
	}
	for _, d := range []string{w.dir, w.home, w.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// evalFile is the path of the workspace's evaluation.yaml.
func (w *workspace) evalFile() string { return filepath.Join(w.dir, "evaluation.yaml") }

// write writes a file into the evaluation directory and returns its path.
func (w *workspace) write(name, content string) string {
	w.t.Helper()
	p := filepath.Join(w.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// writeEval writes evaluation.yaml: an Evaluation named name with the given spec
// (YAML indented by two spaces, as under "spec:").
func (w *workspace) writeEval(name, spec string) {
	w.t.Helper()
	w.write("evaluation.yaml", evaluation(name, spec))
}

func evaluation(name, spec string) string {
	return "apiVersion: proctor.dev/v1alpha1\nkind: Evaluation\nmetadata:\n  name: " + name + "\nspec:\n" + spec
}

func (w *workspace) environ() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.home, "TMPDIR=" + w.tmp}
	for k, v := range w.env {
		env = append(env, k+"="+v)
	}
	return env
}

// result is what one proctor process did.
type result struct {
	Code    int
	Stdout  string
	Stderr  string
	Elapsed time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", r.Code, r.Elapsed.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// runArgs are the usual arguments: run -f evaluation.yaml -o out --progress plain
// --cache-dir cache, then extra.
func (w *workspace) runArgs(extra ...string) []string {
	return append([]string{"run", "-f", w.evalFile(), "-o", w.out, "--progress", "plain", "--cache-dir", w.cacheDir}, extra...)
}

// run runs `proctor run` on the workspace's evaluation with extra flags and waits.
func (w *workspace) run(extra ...string) result {
	w.t.Helper()
	return w.proctor(w.runArgs(extra...)...)
}

// proctor runs the binary with exactly args and waits for it.
func (w *workspace) proctor(args ...string) result {
	w.t.Helper()
	p := w.start(args...)
	return p.wait()
}

// process is a proctor process started in the background.
type process struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdout  *syncBuffer
	stderr  *syncBuffer
	start   time.Time
	done    chan struct{}
	err     error
	cancel  context.CancelFunc
	timeout time.Duration
}

func (w *workspace) start(args ...string) *process {
	w.t.Helper()
	timeout := cmp.Or(w.timeout, runTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, proctorBin, args...)
	if len(w.wrap) > 0 {
		cmd = exec.CommandContext(ctx, w.wrap[0], append(append(w.wrap[1:len(w.wrap):len(w.wrap)], proctorBin), args...)...)
	}
	cmd.Dir = w.dir
	cmd.Env = w.environ()
	if w.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: w.cred}
	}
	p := &process{t: w.t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{}), cancel: cancel, timeout: timeout}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.WaitDelay = 5 * time.Second
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		cancel()
		w.t.Fatalf("starting proctor: %v", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	w.t.Cleanup(func() {
		// A test that failed half-way must not leave its process running.
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		cancel()
	})
	return p
}

func (p *process) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("sending %v to proctor: %v", sig, err)
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) wait() result {
	p.t.Helper()
	<-p.done
	p.cancel()
	r := result{Stdout: p.stdout.String(), Stderr: p.stderr.String(), Elapsed: time.Since(p.start), Code: -1}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		r.Code = 0
	case errors.As(p.err, &ee):
		r.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Code = 128 + int(ws.Signal())
		}
	default:
		p.t.Fatalf("waiting for proctor: %v\n%s", p.err, r)
	}
	if r.Elapsed >= p.timeout {
		p.t.Fatalf("proctor did not finish within %v\n%s", p.timeout, r)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe to read while the process writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fake starts a fake model server for the test; it is closed at cleanup.
type fake struct {
	*fakellm.Server
	URL string
}

func newFake(t *testing.T, cfg fakellm.Config) *fake {
	t.Helper()
	s := fakellm.New(cfg)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &fake{Server: s, URL: srv.URL}
}

// OpenAIURL and AnthropicURL are the base URLs for the two providers.
func (f *fake) OpenAIURL() string    { return f.URL + "/v1" }
func (f *fake) AnthropicURL() string { return f.URL }

// record is one line of results.jsonl.
type record struct {
	ID            string             `json:"id"`
	Model         string             `json:"model"`
	Dataset       string             `json:"dataset"`
	Output        string             `json:"output"`
	Scores        map[string]float64 `json:"scores"`
	Error         string             `json:"error"`
	ErrorKind     string             `json:"errorKind"`
	ScoreErrors   map[string]string  `json:"scoreErrors"`
	Rescored      bool               `json:"rescored"`
	Attempts      int                `json:"attempts"`
	LatencyMillis int64              `json:"latencyMillis"`
	InputTokens   int64              `json:"inputTokens"`
	OutputTokens  int64              `json:"outputTokens"`
	ToolCalls     json.RawMessage    `json:"toolCalls"`
	MaxTokens     bool               `json:"maxTokensReached"`
	JudgeIn       int64              `json:"judgeInputTokens"`
	JudgeOut      int64              `json:"judgeOutputTokens"`
	AgentCalls    int64              `json:"agentCalls"`
	ProxiedCalls  []struct {
		Endpoint, Model, Path, Error             string
		Status, Attempts                         int
		StartedAt                                time.Time
		LatencyMillis, InputTokens, OutputTokens int64
		Cost                                     *float64
	} `json:"proxiedCalls"`
	Cost      *float64          `json:"cost"`
	JudgeCost *float64          `json:"judgeCost"`
	Batch     string            `json:"batch"`
	Expected  json.RawMessage   `json:"expected"`
	Input     []message         `json:"input"`
	InputCut  bool              `json:"inputTruncated"`
	Reasons   map[string]string `json:"reasons"`
	StartedAt *time.Time        `json:"startedAt"`
	EndedAt   *time.Time        `json:"endedAt"`
}

// message is one message of a record's input.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// readRecords reads DIR/results.jsonl; raw holds each line's keys, in order.
func readRecords(t *testing.T, dir string) (recs []record, raw [][]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		t.Fatalf("reading results.jsonl: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		var r record
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("results.jsonl line %d: %v: %s", n, err, line)
		}
		keys, err := objectKeys(line)
		if err != nil {
			t.Fatalf("results.jsonl line %d: %v", n, err)
		}
		recs = append(recs, r)
		raw = append(raw, keys)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recs, raw
}

// objectKeys returns the keys of a JSON object in the order they appear.
func objectKeys(b []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %s", b)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// summary is summary.json.
type summary struct {
	Results    []summaryEntry `json:"results"`
	Comparison *struct {
		Baseline string `json:"baseline"`
		Results  []struct {
			Model             string `json:"model"`
			BaselineModel     string `json:"baselineModel"`
			Dataset           string `json:"dataset"`
			Paired            int64  `json:"paired"`
			Unmatched         int64  `json:"unmatched"`
			BaselineUnmatched int64  `json:"baselineUnmatched"`
			Metrics           []struct {
				Metric   string  `json:"metric"`
				Baseline float64 `json:"baseline"`
				Current  float64 `json:"current"`
				Diff     float64 `json:"diff"`
				Interval struct {
					Lo float64 `json:"lo"`
					Hi float64 `json:"hi"`
				} `json:"interval"`
				PValue    float64 `json:"pValue"`
				Test      string  `json:"test"`
				Improved  int64   `json:"improved"`
				Regressed int64   `json:"regressed"`
			} `json:"metrics"`
		} `json:"results"`
	} `json:"comparison"`
	Gate *struct {
		Passed     bool     `json:"passed"`
		Violations []string `json:"violations"`
		Incomplete string   `json:"incomplete"`
	} `json:"gate"`
}

type summaryEntry struct {
	Model     string             `json:"model"`
	Dataset   string             `json:"dataset"`
	Total     int64              `json:"total"`
	Completed int64              `json:"completed"`
	Errored   int64              `json:"errored"`
	Cut       int64              `json:"maxTokensReached"`
	Metrics   map[string]float64 `json:"metrics"`
	Intervals map[string]struct {
		Lo float64 `json:"lo"`
		Hi float64 `json:"hi"`
	} `json:"intervals"`
	LatencyMillis struct {
		P50 int64 `json:"p50"`
		P95 int64 `json:"p95"`
	} `json:"latencyMillis"`
	Tokens struct {
		Input       int64 `json:"input"`
		Output      int64 `json:"output"`
		JudgeInput  int64 `json:"judgeInput"`
		JudgeOutput int64 `json:"judgeOutput"`
	} `json:"tokens"`
	// Cost holds "model" and, when judged, "judge": nil values are unknown.
	Cost map[string]*float64 `json:"cost"`
}

func readSummary(t *testing.T, dir string) summary {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatalf("reading summary.json: %v", err)
	}
	var s summary
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("summary.json: %v\n%s", err, data)
	}
	return s
}

// journalRecords returns the sample positions of the whole, valid records in a
// checkpoint journal (its first line is a header), in file order.
func journalRecords(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		t.Fatal(err)
	}
	var out []int
	for i, line := range bytes.SplitAfter(data, []byte("\n")) {
		if i == 0 || len(line) == 0 || line[len(line)-1] != '\n' {
			continue
		}
		var e struct {
			I *int            `json:"i"`
			R json.RawMessage `json:"r"`
		}
		if json.Unmarshal(line, &e) == nil && e.I != nil && len(e.R) > 0 {
			out = append(out, *e.I)
		}
	}
	return out
}

// waitFor polls cond every few milliseconds until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// arithmeticJSONL returns n jsonl samples "What is a + b?" with their sums as
// expected answers, ids prefix1..prefixN.
func arithmeticJSONL(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"id":"%s%d","input":"What is %d + %d?","expected":"%d"}`+"\n", prefix, i, i, 2*i, 3*i)
	}
	return b.String()
}

// ids returns the ids of records, in order.
func ids(recs []record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// expectIDs checks that recs hold exactly prefix1..prefixN, once each, in order.
func expectIDs(t *testing.T, recs []record, prefix string, n int) {
	t.Helper()
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	if got := ids(recs); !slices.Equal(got, want) {
		t.Errorf("results.jsonl ids: got %d records %v, want each of %s1..%s%d exactly once, in order", len(got), got, prefix, prefix, n)
	}
}

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
