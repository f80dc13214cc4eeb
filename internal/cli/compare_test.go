package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/runner/compare"
)

// writeRun writes a results directory of model m on dataset d: samples q0–q(n-1),
// passing those pass says, with summary.json.
func writeRun(t *testing.T, model string, n int, pass func(i int) bool) string {
	t.Helper()
	dir := t.TempDir()
	var lines []string
	done := 0
	for i := range n {
		s := 0
		if pass(i) {
			s = 1
			done++
		}
		lines = append(lines, fmt.Sprintf(`{"id":"q%d","model":%q,"dataset":"d","output":"","scores":{"exact_match":%d},"error":"","attempts":1}`, i, model, s))
	}
	if err := os.WriteFile(filepath.Join(dir, "results.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf(`{"results":[{"model":%q,"dataset":"d","total":%d,"completed":%d,"errored":0,"metrics":{"exact_match":%v}}]}`,
		model, n, n, float64(done)/float64(n))
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCompareCommand(t *testing.T) {
	// The baseline passes q0–q59; the candidate fails q0–q11 and passes q60, q61.
	base := writeRun(t, "gpt", 100, func(i int) bool { return i < 60 })
	cand := writeRun(t, "gpt-next", 100, func(i int) bool { return (i >= 12 && i < 60) || i == 60 || i == 61 })

	var out, errOut bytes.Buffer
	root := newRootCommand(streams{out: &out, errOut: &errOut})
	root.SetArgs([]string{"compare", base, cand, "--baseline-model", "gpt"})
	if err := root.Execute(); err != nil {
		t.Fatalf("compare: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "Compared with "+base) {
		t.Fatalf("output:\n%s", out.String())
	}
	fields := strings.Fields(lines[2])
	// MODEL vs BASELINE, DATASET, METRIC, BASELINE, CURRENT, DIFF, CI (2 fields), P, TEST, PAIRED, ONLY
	want := []string{"gpt-next", "vs", "gpt", "d", "exact_match", "0.6000", "0.5000", "-0.1000"}
	if strings.Join(fields[:len(want)], " ") != strings.Join(want, " ") {
		t.Errorf("row %q, want it to start with %q", lines[2], want)
	}
	// McNemar: 12 against 2 discordant pairs, p = 212/16384.
	if got := strings.Join(fields[len(want)+2:], " "); got != "0.01294 mcnemar 100 0/0" {
		t.Errorf("row ends %q, want %q", got, "0.01294 mcnemar 100 0/0")
	}

	out.Reset()
	root = newRootCommand(streams{out: &out, errOut: &errOut})
	root.SetArgs([]string{"compare", base, cand, "--baseline-model", "gpt", "-o", "json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var rep compare.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out.String())
	}
	if m := rep.Results[0].Metrics[0]; m.Regressed != 12 || m.Improved != 2 || m.Test != compare.TestMcNemar {
		t.Errorf("json metric %+v", m)
	}

	root = newRootCommand(streams{out: &out, errOut: &errOut})
	root.SetArgs([]string{"compare", base, "pod/x"})
	var ee *exitError
	if err := root.Execute(); !errors.As(err, &ee) || ee.code != exitInvalid {
		t.Errorf("compare with pod/x: %v, want an invalid-input error", err)
	}
}

// writeIDs writes a results directory of model m on dataset d with the given
// sample ids, every one passing.
func writeIDs(t *testing.T, model string, ids []string) string {
	t.Helper()
	dir := t.TempDir()
	var lines []string
	for _, id := range ids {
		lines = append(lines, fmt.Sprintf(`{"id":%q,"model":%q,"dataset":"d","output":"","scores":{"exact_match":1},"error":"","attempts":1}`, id, model))
	}
	if err := os.WriteFile(filepath.Join(dir, "results.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func ids(format string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

// TestCompareSaysWhatItCouldNotCompare: a comparison of nothing exits
// non-zero (nothing paired, an empty candidate, an unknown baseline model, a
// mistyped directory), and one of few pairs, or of pairs by position, says so.
func TestCompareSaysWhatItCouldNotCompare(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	base := writeIDs(t, "gpt", ids("q%d", 0, 100))
	cases := []struct {
		name     string
		args     []string
		code     int // 0: success
		want     string
		wantNote string
	}{
		{name: "nothing pairs", args: []string{base, writeIDs(t, "other", ids("q%d", 0, 100))}, code: exitFailed,
			want: "pairs with one of", wantNote: "model other on dataset d: no sample pairs with the baseline (100 here, 0 there)"},
		{name: "empty candidate", args: []string{base, writeIDs(t, "gpt", nil)}, code: exitFailed, want: "has no results to compare"},
		{name: "empty baseline", args: []string{writeIDs(t, "gpt", nil), base}, code: exitFailed, want: "has no results to compare with"},
		{name: "unknown baseline model", args: []string{base, base, "--baseline-model", "gtp"}, code: exitInvalid,
			want: `has no model "gtp" (its models: gpt)`},
		{name: "mistyped directory", args: []string{base, filepath.Join(base, "nope")}, code: exitInvalid, want: "not a results directory"},
		{name: "mistyped name", args: []string{base, "nightlyy"}, code: exitInvalid,
			want: "nightlyy: no such results directory, and no cluster to look for it in"},
		{name: "few pair", args: []string{base, writeIDs(t, "gpt", ids("q%d", 70, 170))},
			wantNote: "model gpt on dataset d: only 30 of 100 samples pair with the baseline (100 here, 100 there): their ids differ"},
		{name: "by position", args: []string{writeIDs(t, "gpt", ids("%d", 1, 41)), writeIDs(t, "gpt", ids("%d", 1, 41))},
			wantNote: "model gpt on dataset d: paired by position"},
		{name: "content ids", args: []string{writeIDs(t, "gpt", ids("sha256:%016x", 1, 41)), writeIDs(t, "gpt", ids("sha256:%016x", 1, 41))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := newRootCommand(streams{out: &out, errOut: &errOut})
			root.SetArgs(append([]string{"compare"}, c.args...))
			err := root.Execute()
			var ee *exitError
			switch {
			case c.code == 0 && err != nil:
				t.Fatalf("compare: %v", err)
			case c.code != 0 && (!errors.As(err, &ee) || ee.code != c.code || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("compare: %v; want exit %d saying %q", err, c.code, c.want)
			}
			notes := strings.Count(out.String(), "Note: ")
			if c.wantNote != "" && !strings.Contains(out.String(), "Note: "+c.wantNote) || c.wantNote == "" && notes > 0 {
				t.Errorf("output:\n%s\nwant the note %q", out.String(), c.wantNote)
			}
		})
	}
}
