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
		Display: func([]results.Pair, *results.Dir) Display { return display },
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
		fmt.Fprintf(&items, "      - {id: s%d, input: x, expected: y}\n", i)
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
