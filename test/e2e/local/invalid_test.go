package local_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestBadInputExitsTwoWithoutCalls checks that every problem that can be found
// before the run is reported in one line naming the field or file, with exit code
// 2, and that no model is called.
func TestBadInputExitsTwoWithoutCalls(t *testing.T) {
	t.Parallel()
	const data = `{"id":"q1","input":"What is 1 + 1?","expected":"2"}` + "\n"
	dataSum := sha256.Sum256([]byte(data))

	// model is a well-formed openai model on the fake server.
	model := func(srv *fake) string {
		return fmt.Sprintf("  models:\n  - {name: gpt, provider: openai, model: fake-model, baseURL: %s}\n", srv.OpenAIURL())
	}
	fileDataset := "  datasets:\n  - name: qs\n    source: {file: qs.jsonl}\n"
	scoring := "  scoring:\n  - type: exact_match\n"

	for _, tc := range []struct {
		name string
		// setup writes the workspace and returns the arguments of proctor
		// (nil: the usual run arguments).
		setup func(t *testing.T, w *workspace, srv *fake) []string
		// want are substrings of the error line.
		want []string
	}{
		{
			name: "unknown-field",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("bad", "  concurency: 3\n"+fileDataset+model(srv)+scoring)
				return nil
			},
			want: []string{"evaluation.yaml", "concurency"},
		},
		{
			name: "missing-dataset-file",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("bad", "  datasets:\n  - name: qs\n    source: {file: nope.jsonl}\n"+model(srv)+scoring)
				return nil
			},
			want: []string{"spec.datasets[0].source.file", "nope.jsonl"},
		},
		{
			name: "bad-provider",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("bad", fileDataset+fmt.Sprintf("  models:\n  - {name: gpt, provider: gemini, model: fake-model, baseURL: %s}\n", srv.OpenAIURL())+scoring)
				return nil
			},
			want: []string{"spec.models[0].provider", "gemini"},
		},
		{
			name: "missing-template-variable",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("bad", "  prompt:\n    template: \"Q: {{ .Sample.question }}\"\n"+fileDataset+model(srv)+scoring)
				return nil
			},
			want: []string{"spec.prompt.template", "question"},
		},
		{
			name: "missing-api-key",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("bad", fileDataset+fmt.Sprintf(
					"  models:\n  - {name: gpt, provider: openai, model: fake-model, baseURL: %s, apiKey: {env: E2E_UNSET_KEY}}\n", srv.OpenAIURL())+scoring)
				return nil
			},
			want: []string{"spec.models[0].apiKey.env", "E2E_UNSET_KEY"},
		},
		{
			name: "default-endpoint-without-key",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("bad", fileDataset+"  models:\n  - {name: gpt, provider: openai, model: gpt-4.1-mini}\n"+scoring)
				return nil
			},
			want: []string{"spec.models[0].apiKey.env", "OPENAI_API_KEY"},
		},
		{
			name: "sha256-mismatch",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				var gets atomic.Int64
				ds := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
					gets.Add(1)
					fmt.Fprint(rw, data+`{"id":"q2","input":"tampered","expected":"x"}`+"\n")
				}))
				t.Cleanup(func() {
					ds.Close()
					if gets.Load() == 0 {
						t.Errorf("the dataset URL was never fetched")
					}
				})
				w.writeEval("bad", fmt.Sprintf("  datasets:\n  - name: qs\n    source:\n      url: %s/qs.jsonl\n      sha256: %s\n",
					ds.URL, hex.EncodeToString(dataSum[:]))+model(srv)+scoring)
				return nil
			},
			want: []string{"spec.datasets[0].source.sha256", "SHA-256"},
		},
		{
			name: "invalid-yaml",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("bad", "  datasets: [\n    {name: qs\n"+model(srv))
				return nil
			},
			want: []string{"evaluation.yaml", "yaml"},
		},
		{
			name: "missing-file-flag",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				return []string{"run", "-o", w.out, "--progress", "plain"}
			},
			want: []string{`"file"`},
		},
		{
			name: "evaluation-file-absent",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				return []string{"run", "-f", filepath.Join(w.dir, "nothing.yaml"), "-o", w.out}
			},
			want: []string{"nothing.yaml"},
		},
		{
			name: "unknown-flag",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("ok", fileDataset+model(srv)+scoring)
				return w.runArgs("--concurrncy", "3")
			},
			want: []string{"concurrncy"},
		},
		{
			name: "bad-progress",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("ok", fileDataset+model(srv)+scoring)
				return w.runArgs("--progress", "fancy")
			},
			want: []string{"--progress", "fancy"},
		},
		{
			// A stray quote on line 4 would swallow the 49 records after it.
			name: "csv-stray-quote",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				var b strings.Builder
				b.WriteString("id,input,expected\n")
				for i := 1; i <= 52; i++ {
					q := fmt.Sprintf("What is %d + 1?", i)
					if i == 3 {
						q = `"What is 3 + 1?` // opened, never closed
					}
					fmt.Fprintf(&b, "q%d,%s,%d\n", i, q, i+1)
				}
				w.write("qs.csv", b.String())
				w.writeEval("bad", "  datasets:\n  - name: qs\n    source: {file: qs.csv}\n"+model(srv)+scoring)
				return nil
			},
			want: []string{"spec.datasets[0].source.file", "qs.csv", "line 4", "never closed"},
		},
		{
			// Without fields, every prompt would be empty: a paid model asked nothing.
			name: "csv-without-fields-mapping",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.write("qa.csv", "id,question,answer\nq1,What is 1 + 1?,2\nq2,What is 2 + 2?,4\n")
				w.writeEval("bad", "  datasets:\n  - name: qs\n    source: {file: qa.csv}\n"+model(srv)+scoring)
				return nil
			},
			want: []string{"spec.datasets[0].fields.input", `"input"`, `"question"`},
		},
		{
			name: "fields-input-typo",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.write("qa.csv", "id,question,answer\nq1,What is 1 + 1?,2\n")
				w.writeEval("bad", "  datasets:\n  - name: qs\n    source: {file: qa.csv}\n    fields: {input: questoin, expected: answer}\n"+model(srv)+scoring)
				return nil
			},
			want: []string{"spec.datasets[0].fields.input", "questoin", `"question"`},
		},
		{
			name: "duplicate-ids",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.write("qs.jsonl", data+`{"id":"q2","input":"What is 2 + 2?","expected":"4"}`+"\n"+data)
				w.writeEval("bad", fileDataset+model(srv)+scoring)
				return nil
			},
			want: []string{"spec.datasets[0]", "line 3", `"q1"`, "line 1"},
		},
		{
			name: "agent-template-names-missing-field",
			setup: func(t *testing.T, w *workspace, srv *fake) []string {
				w.writeEval("bad", fileDataset+"  models:\n  - name: bot\n    provider: agent\n    agent:\n      command: [/bin/echo, \"{{ .Sample.nothere }}\"]\n"+scoring)
				return nil
			},
			want: []string{"spec.models[0].agent", "nothere"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFake(t, fakellm.Config{})
			w := newWorkspace(t)
			w.write("qs.jsonl", data)
			args := tc.setup(t, w, srv)
			if args == nil {
				args = w.runArgs()
			}
			res := w.proctor(args...)
			if res.Code != 2 {
				t.Fatalf("want exit 2\n%s", res)
			}
			errLines := lines(res.Stderr)
			if len(errLines) != 1 {
				t.Errorf("stderr: %d lines, want one line\n%s", len(errLines), res)
			} else {
				for _, want := range tc.want {
					if !strings.Contains(strings.ToLower(errLines[0]), strings.ToLower(want)) {
						t.Errorf("error line %q does not mention %q", errLines[0], want)
					}
				}
			}
			if res.Stdout != "" {
				t.Errorf("stdout: want nothing, got %q", res.Stdout)
			}
			if st := srv.Stats(); st.Requests != 0 {
				t.Errorf("the model server was called %d times, want 0", st.Requests)
			}
			if _, err := os.Stat(filepath.Join(w.out, "results.jsonl")); err == nil {
				t.Errorf("results.jsonl was written although nothing ran")
			}
			// Not even the checkpoint's lock: invalid input leaves no trace.
			if files := snapshot(t, w.out); files != nil {
				t.Errorf("the output directory was created although the input is invalid: %v", files)
			}
		})
	}
}
