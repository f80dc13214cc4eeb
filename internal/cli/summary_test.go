package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTopErrors(t *testing.T) {
	rec := func(model, errText string) string {
		return `{"id":"x","model":"` + model + `","dataset":"qs","output":"","scores":{},"error":"` + errText + `","attempts":1}`
	}
	tests := []struct {
		name  string
		lines []string
		n     int
		want  []errorCount
	}{
		{
			name:  "no errors",
			lines: []string{rec("a", ""), rec("a", "")},
			n:     3,
			want:  []errorCount{},
		},
		{
			name: "most common first, then by pair",
			lines: []string{
				rec("a", "refused"), rec("b", "refused"), rec("a", "refused"),
				rec("a", "timeout"), rec("a", ""), rec("b", "refused"), rec("a", "refused"),
			},
			n: 2,
			want: []errorCount{
				{Pair: "a/qs", Error: "refused", Count: 3},
				{Pair: "b/qs", Error: "refused", Count: 2},
			},
		},
		{
			// One fault in many records is one error, with its first locations.
			name: "record errors counted without their location",
			lines: []string{
				rec("a", "line 2: invalid JSON: unexpected end of JSON input"),
				rec("a", "line 5: not a JSON object"),
				rec("a", "line 7: invalid JSON: unexpected end of JSON input"),
				rec("a", "line 9: invalid JSON: unexpected end of JSON input"),
				rec("a", "line 12: invalid JSON: unexpected end of JSON input"),
				rec("a", "scorer numeric: line 3: x"),
			},
			n: 3,
			want: []errorCount{
				{Pair: "a/qs", Error: "invalid JSON: unexpected end of JSON input", Count: 4, Unit: "line", At: []int{2, 7, 9}},
				{Pair: "a/qs", Error: "not a JSON object", Count: 1, Unit: "line", At: []int{5}},
				{Pair: "a/qs", Error: "scorer numeric: line 3: x", Count: 1},
			},
		},
		{
			name:  "fewer than n",
			lines: []string{rec("a", "boom")},
			n:     3,
			want:  []errorCount{{Pair: "a/qs", Error: "boom", Count: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "results.jsonl")
			if err := os.WriteFile(p, []byte(strings.Join(tt.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := topErrors(p, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("topErrors mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrintErrors(t *testing.T) {
	tests := []struct {
		name string
		errs []errorCount
		want string
	}{
		{name: "none", errs: nil, want: ""},
		{
			name: "one line each, whitespace collapsed",
			errs: []errorCount{{Pair: "gpt/qs", Error: "call: dial tcp:\n  connection refused", Count: 12}},
			want: "\nMost common errors:\n  12× gpt/qs: call: dial tcp: connection refused\n",
		},
		{
			name: "record errors name their first lines",
			errs: []errorCount{
				{Pair: "m/d", Error: "not a JSON object", Count: 5, Unit: "line", At: []int{2, 3, 4}},
				{Pair: "m/d", Error: "invalid JSON", Count: 1, Unit: "element", At: []int{7}},
			},
			want: "\nMost common errors:\n  5× m/d: not a JSON object (lines 2, 3, 4 and 2 more)\n  1× m/d: invalid JSON (element 7)\n",
		},
		{
			name: "long errors cut",
			errs: []errorCount{{Pair: "a/b", Error: strings.Repeat("x", maxErrorText+5), Count: 1}},
			want: "\nMost common errors:\n  1× a/b: " + strings.Repeat("x", maxErrorText) + "…\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printErrors(&b, tt.errs)
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("printErrors mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
