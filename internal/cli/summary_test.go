package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/results"
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

// Text from outside reaches the terminal in the summary table and the error
// summary: escape sequences (colours, OSC 8 links, window titles, cursor moves
// that overwrite earlier lines), bidirectional overrides and bytes that are
// not UTF-8 are shown escaped; ordinary text, accents and emoji are not.
func TestTerminalSafe(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "connection refused", "connection refused"},
		{"unicode kept", "réponse ✓ 日本 👍🏽", "réponse ✓ 日本 👍🏽"},
		{"CSI colour", "\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"OSC title with BEL", "\x1b]0;pwned\x07", `\x1b]0;pwned\a`},
		{"OSC 8 link", "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", `\x1b]8;;https://evil.example\x1b\click\x1b]8;;\x1b\`},
		{"C1 CSI", "\u009b2J", `\u009b2J`},
		{"carriage return", "ok\rFAKE", `ok\rFAKE`},
		{"tab", "a\tb", `a\tb`},
		{"NUL", "a\x00b", `a\x00b`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"bidi override", "file\u202egpj.exe", `file\u202egpj.exe`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, terminalSafe(tt.in)); diff != "" {
				t.Errorf("terminalSafe(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestTerminalSafeLines(t *testing.T) {
	in := "spec.models[0]: bad\n\tspec.models[1]: \x1b[31mred\r"
	if diff := cmp.Diff("spec.models[0]: bad\n\tspec.models[1]: \\x1b[31mred\\r", terminalSafeLines(in)); diff != "" {
		t.Errorf("terminalSafeLines (-want +got):\n%s", diff)
	}
}

func TestPrintErrorsEscapesControls(t *testing.T) {
	var b bytes.Buffer
	printErrors(&b, []errorCount{{Pair: "m/d", Error: "HTTP 500: \x1b[2J\x1b[Hall good\x1b]0;owned\x07", Count: 2}})
	want := "\nMost common errors:\n  2× m/d: HTTP 500: \\x1b[2J\\x1b[Hall good\\x1b]0;owned\\a\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printErrors (-want +got):\n%s", diff)
	}
}

// proctor results prints a summary.json read from a cluster: a name in it
// cannot break the table or reach the terminal raw.
func TestPrintSummaryEscapesNames(t *testing.T) {
	var b bytes.Buffer
	printSummary(&b, []results.Summary{{Model: "m\tX", Dataset: "\x1b[31md", Total: 1, Completed: 1,
		Metrics: map[string]float64{"exact_match": 1}}}, []string{"exact_match"})
	if strings.ContainsAny(b.String(), "\x1b") || !strings.Contains(b.String(), `m\tX`) {
		t.Errorf("summary table:\n%s", b.String())
	}
}

// A record whose line is longer than any line buffer (a 16 MiB answer of
// control characters is 96 MiB of JSON) is read, not a failure of the run.
func TestTopErrorsLongLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "results.jsonl")
	huge := `{"id":"x","model":"m","dataset":"d","output":"` + strings.Repeat(`\u0000`, 12<<20) + `","error":"scorer judge: no verdict"}`
	if err := os.WriteFile(p, []byte(huge+"\n"+`{"model":"m","dataset":"d","error":"boom"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := topErrors(p, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []errorCount{{Pair: "m/d", Error: "boom", Count: 1}, {Pair: "m/d", Error: "scorer judge: no verdict", Count: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("topErrors (-want +got):\n%s", diff)
	}
}
