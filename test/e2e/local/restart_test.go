package local_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// snapshot returns every file under dir with its content (nil map when dir is absent).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel] = string(b)
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRestartKeepsResultsWhenTheRunCannotStart runs an Evaluation, then runs it
// again with --restart after breaking it: a run that cannot start (exit 2,
// nothing run) must leave the paid results and the checkpoint as they were.
func TestRestartKeepsResultsWhenTheRunCannotStart(t *testing.T) {
	t.Parallel()
	scoring := "  scoring:\n  - type: exact_match\n"
	dataset := "  datasets:\n  - name: qs\n    source: {file: qs.jsonl}\n"
	for _, tc := range []struct {
		name string
		// spec is the broken Evaluation's spec, given the fake server's URL.
		spec func(url string) string
		want string
	}{
		{
			name: "missing-api-key",
			spec: func(url string) string {
				return dataset + fmt.Sprintf("  models:\n  - {name: gpt, provider: openai, model: fake-model, baseURL: %s, apiKey: {env: E2E_UNSET_KEY}}\n", url) + scoring
			},
			want: "E2E_UNSET_KEY",
		},
		{
			name: "missing-data-file",
			spec: func(url string) string {
				return "  datasets:\n  - name: qs\n    source: {file: gone.jsonl}\n" +
					fmt.Sprintf("  models:\n  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}\n", url) + scoring
			},
			want: "gone.jsonl",
		},
		{
			name: "unreachable-url",
			spec: func(url string) string {
				return "  datasets:\n  - name: qs\n    source: {url: \"http://127.0.0.1:1/qs.jsonl\"}\n" +
					fmt.Sprintf("  models:\n  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}\n", url) + scoring
			},
			want: "spec.datasets[0].source.url",
		},
		{
			name: "bad-template",
			spec: func(url string) string {
				return "  prompt: {template: \"{{ .Sample.nothere }}\"}\n" + dataset +
					fmt.Sprintf("  models:\n  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}\n", url) + scoring
			},
			want: "nothere",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFake(t, fakellm.Config{})
			w := newWorkspace(t)
			w.write("qs.jsonl", arithmeticJSONL("q", 3))
			w.writeEval("paid", dataset+fmt.Sprintf("  models:\n  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}\n", srv.OpenAIURL())+scoring)
			if res := w.run(); res.Code != 0 {
				t.Fatalf("first run: want exit 0\n%s", res)
			}
			before := snapshot(t, w.out)
			if before["results.jsonl"] == "" {
				t.Fatalf("the first run wrote no results: %v", before)
			}

			w.writeEval("paid", tc.spec(srv.OpenAIURL()))
			res := w.run("--restart")
			if res.Code != 2 {
				t.Fatalf("--restart of a broken Evaluation: want exit 2\n%s", res)
			}
			if !strings.Contains(res.Stderr, tc.want) {
				t.Errorf("stderr does not mention %q\n%s", tc.want, res)
			}
			if diff := cmp.Diff(before, snapshot(t, w.out)); diff != "" {
				t.Errorf("the output directory changed although nothing ran (-before +after):\n%s", diff)
			}
		})
	}
}
