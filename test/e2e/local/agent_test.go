package local_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentScript answers with the content of context.txt, which proctor writes into
// the workspace from agent.files. Given a prompt containing SLOW it first sleeps
// far past the agent's timeout; given the context "env" it reports whether a
// variable of proctor's own environment reached it; given "big" it prints 400 kB,
// more than the results assembler's line buffer holds.
const agentScript = `#!/bin/sh
case "$1" in
*SLOW*) sleep 10 ;;
esac
ctx=$(cat context.txt) || exit 1
if [ "$ctx" = big ]; then
	head -c 400000 /dev/zero | tr '\0' a
	exit 0
fi
if [ "$ctx" = env ]; then
	echo "${E2E_PRIVATE:-unset}"
	exit 0
fi
echo "$ctx"
`

func TestAgentProviderThroughTheCLI(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t)
	script := w.write("agent.sh", agentScript)
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	// Proctor's own environment holds a variable the agent must not inherit.
	w.env["E2E_PRIVATE"] = "leaked"
	w.writeEval("agents", fmt.Sprintf(`  retry: {maxAttempts: 2, initialBackoff: 10ms, maxBackoff: 20ms}
  datasets:
  - name: tasks
    source:
      inline:
      - {id: s1, input: "first", secret: alpha, expected: alpha}
      - {id: s2, input: "second", secret: beta, expected: beta}
      - {id: s3, input: "SLOW one", secret: gamma, expected: gamma}
      - {id: s4, input: "fourth", secret: delta, expected: epsilon}
      - {id: s5, input: "fifth", secret: env, expected: unset}
  models:
  - name: bot
    provider: agent
    agent:
      command: [%q, "{{ .Prompt }}"]
      files:
        context.txt: "{{ .Sample.secret }}"
      timeout: 300ms
  scoring:
  - type: exact_match
`, script))

	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	if got := strings.Join(ids(recs), " "); got != "s1 s2 s3 s4 s5" {
		t.Fatalf("results.jsonl ids %q, want s1..s5 in order", got)
	}
	want := map[string]struct {
		output string
		score  float64
	}{
		"s1": {"alpha", 1},
		"s2": {"beta", 1},
		"s4": {"delta", 0},
		"s5": {"unset", 1}, // the agent does not inherit proctor's environment
	}
	for _, r := range recs {
		if r.ID == "s3" {
			if !strings.Contains(r.Error, "timed out") || !strings.Contains(r.Error, "300ms") {
				t.Errorf("s3 (sleeps past agent.timeout): error %q, want it to say it timed out after 300ms", r.Error)
			}
			if r.Output != "" || !maps.Equal(r.Scores, map[string]float64{"exact_match": 0}) {
				t.Errorf("s3: an error record with output %q and scores %v, want none and exact_match 0", r.Output, r.Scores)
			}
			continue
		}
		wr := want[r.ID]
		if r.Error != "" || r.Output != wr.output || r.Scores["exact_match"] != wr.score {
			t.Errorf("%s: got output %q, scores %v, error %q; want output %q scoring %v",
				r.ID, r.Output, r.Scores, r.Error, wr.output, wr.score)
		}
	}
	// The timed-out agent's whole process group is killed: the run does not wait
	// for its 10s sleep.
	if res.Elapsed > 8*time.Second {
		t.Errorf("the run took %v: the sleeping agent was not killed at its timeout", res.Elapsed)
	}
	if s := readSummary(t, w.out).Results[0]; s.Errored != 1 || s.Completed != 5 || s.Metrics["exact_match"] != 0.6 {
		t.Errorf("summary %+v, want 5 completed, 1 errored, exact_match 0.6", s)
	}
	// Workspaces live under TMPDIR and are removed after each sample.
	if left, _ := filepath.Glob(filepath.Join(w.tmp, "proctor-ws-*")); len(left) != 0 {
		t.Errorf("agent workspaces left behind: %v", left)
	}
}

// TestLargeRecordReachesResults: a record longer than the assembler's 256 KiB read
// buffer (here an agent answering 400 kB) is checkpointed, but must also reach
// results.jsonl and the summary.
func TestLargeRecordReachesResults(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t)
	script := w.write("agent.sh", agentScript)
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	w.writeEval("big", fmt.Sprintf(`  datasets:
  - name: tasks
    source:
      inline:
      - {id: s1, input: "first", secret: alpha, expected: alpha}
      - {id: s2, input: "second", secret: big, expected: "a"}
      - {id: s3, input: "third", secret: gamma, expected: gamma}
  models:
  - name: bot
    provider: agent
    agent:
      command: [%q, "{{ .Prompt }}"]
      files:
        context.txt: "{{ .Sample.secret }}"
  scoring:
  - type: exact_match
`, script))

	res := w.run()
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	if got := journalRecords(t, filepath.Join(w.out, "checkpoint", "bot.tasks.jsonl")); len(got) != 3 {
		t.Fatalf("checkpoint holds %d records, want 3", len(got))
	}
	recs, _ := readRecords(t, w.out)
	if got := strings.Join(ids(recs), " "); got != "s1 s2 s3" {
		t.Fatalf("results.jsonl ids %q, want s1 s2 s3: the 400 kB record is missing", got)
	}
	if len(recs[1].Output) != 400000 {
		t.Errorf("s2 output: %d bytes, want 400000", len(recs[1].Output))
	}
	if s := readSummary(t, w.out).Results[0]; s.Completed != 3 {
		t.Errorf("summary: %d completed, want 3", s.Completed)
	}
}
