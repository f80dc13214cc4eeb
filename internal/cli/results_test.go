package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/runner/results"
)

// TestFetchNeverReplacesOtherResults: proctor results refreshes what it
// fetched of the same Evaluation, and refuses, naming --overwrite, to replace
// a local run's results or another Evaluation's.
func TestFetchNeverReplacesOtherResults(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  string // "" means allowed
	}{
		{name: "empty", files: nil},
		{name: "same evaluation fetched before", files: map[string]string{
			results.ResultsFile: "{}\n", fetchedFrom: `{"namespace":"evals","name":"arith"}`}},
		{name: "another evaluation", files: map[string]string{
			results.ResultsFile: "{}\n", fetchedFrom: `{"namespace":"evals","name":"other"}`},
			want: "holds the results of Evaluation evals/other"},
		{name: "a local run", files: map[string]string{
			results.ResultsFile: "{}\n", results.CheckpointDir + "/bot.d.jsonl": "{}\n"},
			want: "holds a local run's results"},
		{name: "unknown results", files: map[string]string{results.SummaryFile: "{}\n"},
			want: "already has results not fetched from Evaluation evals/arith"},
		{name: "other files only", files: map[string]string{"notes.txt": "mine"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range c.files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := checkFetchDir(dir, fetchedSource{Namespace: "evals", Name: "arith"})
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--overwrite")):
				t.Errorf("error %v; want one saying %q and --overwrite", err, c.want)
			}
		})
	}
}
