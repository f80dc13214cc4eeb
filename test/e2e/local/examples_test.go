package local_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// examplesDir is the repository's docs/examples.
const examplesDir = "../../../docs/examples"

// exampleWorkspace copies docs/examples into a workspace as the repository
// holds it, with the fake server in place of http://127.0.0.1:8080 and of
// OpenAI's API: the examples are run from the copy's root, as their headers say.
func exampleWorkspace(t *testing.T, url string) *workspace {
	t.Helper()
	w := newWorkspace(t)
	err := filepath.WalkDir(examplesDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(examplesDir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := strings.ReplaceAll(string(b), "http://127.0.0.1:8080", url)
		s = strings.ReplaceAll(s, "https://api.openai.com/v1", url+"/v1")
		dst := w.write(filepath.Join("docs", "examples", rel), s)
		st, _ := os.Stat(p)
		return os.Chmod(dst, st.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	w.env["OPENAI_API_KEY"] = "sk-example"
	return w
}

// TestEveryExampleRuns runs every Evaluation in docs/examples as its header
// says (from the repository's root, against the fake server): each finishes
// with exit 0. A new example is run without being listed here; the CRM
// example, which needs PostgreSQL, has its own test.
func TestEveryExampleRuns(t *testing.T) {
	t.Parallel()
	srv := newFake(t, fakellm.Config{WrongRate: 0.25, Seed: 1, BatchDelay: 200 * time.Millisecond})
	w := exampleWorkspace(t, srv.URL)
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	// gated's baseline is out/offline: offline runs first.
	slices.SortStableFunc(names, func(a, b string) int {
		switch {
		case a == "offline":
			return -1
		case b == "offline":
			return 1
		}
		return 0
	})
	for _, name := range names {
		r := w.proctor("run", "-f", filepath.Join("docs", "examples", name+".yaml"), "-o", filepath.Join("out", name), "--progress", "none")
		if r.Code != 0 {
			t.Errorf("docs/examples/%s.yaml: want exit 0\n%s", name, r)
		}
	}
}

// TestReferenceEvaluationRuns copies the reference Evaluation of
// docs/concepts/evaluation.md (the README links it as the Evaluation file's reference)
// as a new user would, with its data file, an agent-cli on PATH and the
// variables it names, against the fake server: it runs (exit 0).
func TestReferenceEvaluationRuns(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../../docs/concepts/evaluation.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```yaml\n(apiVersion: proctor.dev/v1alpha1\nkind: Evaluation\nmetadata: \\{name: arithmetic\\}\n.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("docs/concepts/evaluation.md has no reference Evaluation (metadata: {name: arithmetic})")
	}
	srv := newFake(t, fakellm.Config{})
	w := newWorkspace(t)
	w.write("evaluation.yaml", strings.ReplaceAll(string(block[1]), "https://api.openai.com/v1", srv.OpenAIURL()))
	w.write("data/arithmetic.jsonl", arithmeticJSONL("q", 5))
	bin := filepath.Join(w.dir, "tools")
	cli := w.write("tools/agent-cli", "#!/bin/sh\n# answers the last argument's sum\necho 0\n")
	if err := os.Chmod(cli, 0o755); err != nil {
		t.Fatal(err)
	}
	w.env["PATH"] = bin + ":" + os.Getenv("PATH")
	w.env["OPENAI_API_KEY"] = "sk-example"
	w.env["GITHUB_TOKEN"] = "ghp-example"
	if r := w.run(); r.Code != 0 {
		t.Errorf("the reference Evaluation of docs/concepts/evaluation.md: want exit 0\n%s", r)
	}
}
