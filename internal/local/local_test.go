package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/proctor-dev/proctor/runner"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// evaluation writes an Evaluation of an agent that runs sh with script, on
// samples s1..s3 whose expected answer is their input.
func evaluation(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "eval.yaml")
	yaml := `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata:
  name: local-test
spec:
  datasets:
  - name: d
    source:
      inline:
      - {id: s1, input: "a", expected: "a"}
      - {id: s2, input: "b", expected: "b"}
      - {id: s3, input: "c", expected: "c"}
  models:
  - name: bot
    provider: agent
    agent:
      command: [sh, -c, ` + "'" + script + "'" + `, sh, "{{ .Prompt }}"]
  scoring:
  - type: exact_match
    normalize: [trim]
  concurrency: 1
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestRunWritesResultsAndResumes(t *testing.T) {
	file := evaluation(t, `echo "$1"`)
	out := filepath.Join(t.TempDir(), "out")
	res, err := Run(context.Background(), Options{File: file, Output: out, GracePeriod: time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(res.Summaries) != 1 || res.Summaries[0].Completed != 3 || res.Summaries[0].Metrics["exact_match"] != 1 {
		t.Fatalf("summaries = %+v, want 3 of 3 samples scored 1", res.Summaries)
	}
	for _, f := range []string{results.ResultsFile, results.SummaryFile} {
		if _, err := os.Stat(filepath.Join(res.Dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// A second run finds every sample done: the agent is not run again.
	file2 := evaluation(t, `echo ran >&2; exit 1`)
	if err := os.Rename(file2, file); err != nil {
		t.Fatal(err)
	}
	res, err = Run(context.Background(), Options{File: file, Output: out})
	if err == nil || res != nil {
		// The agent's command is part of the checkpoint's fingerprint: a
		// changed agent must not resume from the other's records.
		var invalid *InvalidError
		if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "--restart") {
			t.Fatalf("resuming with another agent: %v, want an invalid-input error naming --restart", err)
		}
	}
}

func TestRunInvalid(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	cases := map[string]Options{
		"no such file": {File: filepath.Join(t.TempDir(), "missing.yaml"), Output: out},
		"concurrency":  {File: evaluation(t, `echo "$1"`), Output: out, Concurrency: -1},
		"bad template": {File: evaluation(t, `echo "$1" {{ .Nope }}`), Output: out},
	}
	for name, o := range cases {
		res, err := Run(context.Background(), o)
		var invalid *InvalidError
		if !errors.As(err, &invalid) || res != nil {
			t.Errorf("%s: Run = %v, %v; want an *InvalidError", name, res, err)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: invalid input wrote the output directory (%v)", name, err)
		}
	}
}

// TestInterruptDrains: the first interrupt stops taking samples and lets the
// one in flight finish; results are written and say which signal stopped it.
func TestInterruptDrains(t *testing.T) {
	started := filepath.Join(t.TempDir(), "started")
	file := evaluation(t, `touch `+started+`; sleep 0.3; echo "$1"`)
	interrupts := make(chan os.Signal, 2)
	display := &stubDisplay{onStart: func() {
		go func() {
			// Interrupt once the first sample is in flight.
			for {
				if _, err := os.Stat(started); err == nil {
					interrupts <- syscall.SIGINT
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}}
	res, err := Run(context.Background(), Options{
		File: file, Output: filepath.Join(t.TempDir(), "out"), GracePeriod: 30 * time.Second, Interrupts: interrupts,
		Display: func([]results.Pair, *results.Dir, map[string]float64) Display { return display },
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Interrupted != syscall.SIGINT {
		t.Errorf("Interrupted = %v, want SIGINT", res.Interrupted)
	}
	if got := res.Summaries[0].Completed; got != 1 {
		t.Errorf("completed = %d, want 1 (the sample in flight finishes, no other starts)", got)
	}
	if !display.noted() {
		t.Error("the user was not told the run is stopping")
	}
}

type stubDisplay struct {
	onStart func()
	mu      sync.Mutex
	notes   []string
}

func (*stubDisplay) SampleFinished(string, string, *results.Record) {}
func (*stubDisplay) Log() logr.Logger                               { return logr.Discard() }
func (d *stubDisplay) Start(func(string) runner.ThrottleStatus)     { d.onStart() }
func (d *stubDisplay) Note(msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.notes = append(d.notes, msg)
}
func (*stubDisplay) Stop() {}
func (d *stubDisplay) noted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.notes) > 0
}

// TestRunWarnsOfALimitTheProviderDoesNotHave: a model declaring 600 rpm on
// a key the provider's headers say allows 300 is warned of.
func TestRunWarnsOfALimitTheProviderDoesNotHave(t *testing.T) {
	srv := httptest.NewServer(fakellm.New(fakellm.Config{RequestsPerMinute: 300}))
	defer srv.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "eval.yaml")
	yaml := `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata:
  name: declared
spec:
  datasets:
  - name: d
    source:
      inline:
      - {id: s1, input: "What is 1+1?", expected: "2"}
      - {id: s2, input: "What is 2+1?", expected: "3"}
  models:
  - name: m
    provider: openai
    model: fake-model
    baseURL: ` + srv.URL + `/v1
    rateLimit: {requestsPerMinute: 600}
  scoring:
  - type: exact_match
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var warned strings.Builder
	if _, err := Run(context.Background(), Options{File: file, Output: filepath.Join(dir, "out"), Warnings: &warned}); err != nil {
		t.Fatal(err)
	}
	if want := "Model m (rateLimit): the provider's rate-limit headers say 300 requests per minute where 600 are declared"; !strings.Contains(warned.String(), want) {
		t.Errorf("warnings %q, want %q", warned.String(), want)
	}
}

// TestRestartWaitsForCancellations: --restart cancels the batches an earlier
// run left in flight and waits for the cancellations to end (they take the
// provider a while) before submitting anew: never more batches in progress
// than maxInFlight, none paid for twice.
func TestRestartWaitsForCancellations(t *testing.T) {
	srv := fakellm.New(fakellm.Config{BatchDelay: time.Hour, BatchCancelDelay: 700 * time.Millisecond})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "eval.yaml")
	var items strings.Builder
	for i := range 10 {
		fmt.Fprintf(&items, "      - {id: s%d, input: \"What is %d+1?\", expected: \"%d\"}\n", i, i, i+1)
	}
	yaml := `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata:
  name: batches
spec:
  datasets:
  - name: d
    source:
      inline:
` + items.String() + `  models:
  - name: m
    provider: openai
    model: fake-model
    baseURL: ` + hs.URL + `/v1
    batch: {maxRequests: 5, maxInFlight: 2, pollInterval: 1s}
  scoring:
  - type: exact_match
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	// The first run submits its two batches, then is interrupted.
	interrupts := make(chan os.Signal, 2)
	go func() {
		for srv.Stats().Batches < 2 {
			time.Sleep(10 * time.Millisecond)
		}
		interrupts <- syscall.SIGINT
	}()
	if _, err := Run(context.Background(), Options{File: file, Output: out, GracePeriod: time.Second, Interrupts: interrupts}); err != nil {
		t.Fatalf("first run: %v", err)
	}
	srv.SetBatchDelay(10 * time.Millisecond)
	var warned strings.Builder
	res, err := Run(context.Background(), Options{File: file, Output: out, Restart: true, Warnings: &warned})
	if err != nil {
		t.Fatalf("--restart: %v", err)
	}
	st := srv.Stats()
	if st.BatchesCancelled != 2 || st.MaxBatchesInProgress > 2 {
		t.Errorf("%d batches cancelled, at most %d in progress at once; want 2 cancelled and at most 2 (maxInFlight)\n%s", st.BatchesCancelled, st.MaxBatchesInProgress, warned.String())
	}
	if res.Summaries[0].Completed != 10 {
		t.Errorf("summaries %+v", res.Summaries)
	}
}

// TestServiceProbesAreNotTheReapersToReap: proctor reaps what agents leave
// behind; the processes it waits for itself (a service's, its probes) are not
// its to reap. With a service probed every second and agents failing fast,
// reaping a probe made it fail ("waitid: no child processes"): a service
// that never went down was blamed for ordinary failures. Every error is the
// agent's.
func TestServiceProbesAreNotTheReapersToReap(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "eval.yaml")
	var items strings.Builder
	for i := range 128 {
		fmt.Fprintf(&items, "      - {id: s%d, input: x, expected: \"y\"}\n", i)
	}
	yaml := `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata:
  name: reaped
spec:
  datasets:
  - name: d
    source:
      inline:
` + items.String() + `  services:
  - name: idle
    image: busybox
    command: [sh, -c, "exec sleep 600"]
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
  models:
  - name: bot
    provider: agent
    agent:
      command: [sh, -c, "sleep 0.02; exit 1"]
  scoring:
  - type: exact_match
  concurrency: 16
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{File: file, Output: filepath.Join(dir, "out")}); err != nil {
		t.Logf("run: %v", err) // every sample errored: the run says so
	}
	kinds := map[string]int{}
	f, err := os.Open(filepath.Join(dir, "out", results.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := results.EachRecordLine(f, func(_ int, line []byte) error {
		var r results.Record
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		kinds[r.ErrorKind]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if kinds[results.ErrorKindCall] != 128 {
		t.Errorf("error kinds %v; want all 128 the agent's (call)", kinds)
	}
}

// TestResultsAreNeverReplacedUnasked: a run into a directory holding results it
// would drop (a model or dataset renamed, another Evaluation's, files no
// checkpoint accounts for, its own data) is refused before anything runs,
// naming what differs and the flags that would allow it; the results stay as
// they were. A model added keeps the others' results, and --restart discards
// them when told to, checking first that it can.
func TestResultsAreNeverReplacedUnasked(t *testing.T) {
	write := func(t *testing.T, dir, name, models, datasetSource string) string {
		t.Helper()
		file := filepath.Join(dir, name)
		if datasetSource == "" {
			datasetSource = `inline: [{id: s1, input: "a", expected: "a"}, {id: s2, input: "b", expected: "b"}]`
		}
		var ms strings.Builder
		for _, m := range strings.Fields(models) {
			fmt.Fprintf(&ms, "  - {name: %s, provider: agent, agent: {command: [sh, -c, 'echo \"$1\"', sh, \"{{ .Prompt }}\"]}}\n", m)
		}
		yaml := "apiVersion: proctor.dev/v1alpha1\nkind: Evaluation\nmetadata: {name: keep}\nspec:\n  datasets:\n  - name: d\n    source: {" + datasetSource + "}\n" +
			"  models:\n" + ms.String() + "  scoring: [{type: exact_match}]\n"
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	refused := func(t *testing.T, err error, want ...string) {
		t.Helper()
		var invalid *InvalidError
		if !errors.As(err, &invalid) {
			t.Fatalf("Run: %v; want an *InvalidError", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
	}
	first := func(t *testing.T) (dir, out string, before []byte) {
		t.Helper()
		dir = t.TempDir()
		out = filepath.Join(dir, "out")
		if _, err := Run(context.Background(), Options{File: write(t, dir, "a.yaml", "bot", ""), Output: out}); err != nil {
			t.Fatal(err)
		}
		before, err := os.ReadFile(filepath.Join(out, results.ResultsFile))
		if err != nil {
			t.Fatal(err)
		}
		return dir, out, before
	}
	unchanged := func(t *testing.T, out string, before []byte) {
		t.Helper()
		after, err := os.ReadFile(filepath.Join(out, results.ResultsFile))
		if err != nil || string(after) != string(before) {
			t.Errorf("results.jsonl changed: %v\n%s\nwas\n%s", err, after, before)
		}
	}

	t.Run("model renamed", func(t *testing.T) {
		dir, out, before := first(t)
		_, err := Run(context.Background(), Options{File: write(t, dir, "b.yaml", "bot2", ""), Output: out})
		refused(t, err, `model "bot" on dataset "d" (2 records)`, "renamed", "-o", "--restart")
		unchanged(t, out, before)
		// Told to: --restart discards them.
		res, err := Run(context.Background(), Options{File: write(t, dir, "b.yaml", "bot2", ""), Output: out, Restart: true})
		if err != nil || res.Summaries[0].Model != "bot2" || res.Summaries[0].Completed != 2 {
			t.Fatalf("--restart: %v %+v", err, res)
		}
	})
	t.Run("model added", func(t *testing.T) {
		dir, out, _ := first(t)
		res, err := Run(context.Background(), Options{File: write(t, dir, "b.yaml", "bot bot2", ""), Output: out})
		if err != nil || len(res.Summaries) != 2 || res.Summaries[0].Completed != 2 || res.Summaries[1].Completed != 2 {
			t.Fatalf("Run: %v %+v", err, res)
		}
	})
	t.Run("results no checkpoint accounts for", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
		before := []byte(`{"id":"x","model":"other-tool"}` + "\n")
		if err := os.WriteFile(filepath.Join(out, results.ResultsFile), before, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Run(context.Background(), Options{File: write(t, t.TempDir(), "a.yaml", "bot", ""), Output: out})
		refused(t, err, "results.jsonl that no checkpoint of it accounts for", "--restart")
		unchanged(t, out, before)
	})
	t.Run("the data is the output", func(t *testing.T) {
		dir, out, _ := first(t)
		if err := os.WriteFile(filepath.Join(out, results.ResultsFile), []byte(`{"id":"s1","input":"a","expected":"a"}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(filepath.Join(out, results.ResultsFile))
		_, err := Run(context.Background(), Options{File: write(t, dir, "b.yaml", "bot", "file: out/results.jsonl"), Output: out, Restart: true})
		refused(t, err, "spec.datasets[0] (d) reads "+filepath.Join(out, results.ResultsFile)+", the output directory's results.jsonl")
		unchanged(t, out, before)
	})
	t.Run("restart that cannot complete discards nothing", func(t *testing.T) {
		dir, out, _ := first(t)
		if err := os.Remove(filepath.Join(out, results.SummaryFile)); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(out, results.SummaryFile, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := Run(context.Background(), Options{File: write(t, dir, "a.yaml", "bot", ""), Output: out, Restart: true})
		refused(t, err, "--restart", "summary.json is a directory", "nothing was discarded")
		if _, err := os.Stat(filepath.Join(out, results.CheckpointDir, "bot.d.jsonl")); err != nil {
			t.Errorf("the checkpoint: %v", err)
		}
	})
}

// TestEvaluationFromStdin: File "-" reads the Evaluation from standard
// input, and a negative grace period is refused before anything runs.
func TestEvaluationFromStdin(t *testing.T) {
	yaml, err := os.ReadFile(evaluation(t, `echo "$1"`))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	res, err := Run(context.Background(), Options{File: StdinFile, Stdin: strings.NewReader(string(yaml)), Output: out})
	if err != nil || res.Summaries[0].Completed != 3 {
		t.Fatalf("Run from stdin: %v %+v", err, res)
	}
	_, err = Run(context.Background(), Options{File: StdinFile, Stdin: strings.NewReader(string(yaml)), Output: filepath.Join(t.TempDir(), "o"), GracePeriod: -5 * time.Second})
	var invalid *InvalidError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "--grace-period: -5s is negative") {
		t.Errorf("a negative grace period: %v", err)
	}
}
