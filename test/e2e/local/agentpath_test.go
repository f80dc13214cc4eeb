package local_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAgentCommandRelativeToTheEvaluationFile runs an Evaluation kept in a
// subdirectory from its parent: a relative agent command with a slash is found
// next to the YAML file, as data files are, not in the current directory.
func TestAgentCommandRelativeToTheEvaluationFile(t *testing.T) {
	t.Parallel()
	w := newWorkspace(t)
	script := w.write("evals/bin/agent.sh", "#!/bin/sh\necho \"$1\"\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	w.write("evals/tasks.jsonl", `{"id":"t1","input":"hello","expected":"hello"}`+"\n")
	w.write("evals/evaluation.yaml", evaluation("paths", `  datasets:
  - name: tasks
    source: {file: tasks.jsonl}
  models:
  - name: bot
    provider: agent
    agent:
      command: [./bin/agent.sh, "{{ .Prompt }}"]
  scoring:
  - type: exact_match
`))
	// proctor runs in w.dir, the YAML file's parent.
	res := w.proctor("run", "-f", filepath.Join("evals", "evaluation.yaml"), "-o", w.out, "--progress", "plain")
	if res.Code != 0 {
		t.Fatalf("want exit 0\n%s", res)
	}
	recs, _ := readRecords(t, w.out)
	if len(recs) != 1 || recs[0].Error != "" || recs[0].Output != "hello" {
		t.Errorf("records: %+v, want one answer \"hello\" from evals/bin/agent.sh\n%s", recs, res)
	}
}
