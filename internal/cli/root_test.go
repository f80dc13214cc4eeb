package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
)

// TestVerbosityFlag checks that -v works wherever a user puts it: before the
// subcommand, before or after the subcommand's own flags, repeated, or with a
// level.
func TestVerbosityFlag(t *testing.T) {
	tests := []struct {
		args     []string
		wantV    int
		wantFile string
		wantErr  bool
	}{
		{args: []string{"run", "-v", "-f", "x.yaml"}, wantV: 1, wantFile: "x.yaml"},
		{args: []string{"run", "-f", "x.yaml", "-v"}, wantV: 1, wantFile: "x.yaml"},
		{args: []string{"-v", "run", "-f", "x.yaml"}, wantV: 1, wantFile: "x.yaml"},
		{args: []string{"run", "-vv", "-f", "x.yaml"}, wantV: 2, wantFile: "x.yaml"},
		{args: []string{"run", "-v", "-v", "-f", "x.yaml"}, wantV: 2, wantFile: "x.yaml"},
		{args: []string{"run", "-v", "2", "-f", "x.yaml"}, wantV: 2, wantFile: "x.yaml"},
		{args: []string{"run", "-f", "x.yaml", "-v", "2"}, wantV: 2, wantFile: "x.yaml"},
		{args: []string{"run", "-v=2", "-f", "x.yaml"}, wantV: 2, wantFile: "x.yaml"},
		{args: []string{"run", "--verbosity", "1", "-f", "x.yaml"}, wantV: 1, wantFile: "x.yaml"},
		{args: []string{"run", "--verbosity=2", "-f", "x.yaml"}, wantV: 2, wantFile: "x.yaml"},
		{args: []string{"--verbosity", "2", "run", "-f", "x.yaml"}, wantV: 2, wantFile: "x.yaml"},
		{args: []string{"run", "-f", "x.yaml"}, wantV: 0, wantFile: "x.yaml"},
		// A file named like a number after -f is still the file.
		{args: []string{"run", "-f", "2", "-v"}, wantV: 1, wantFile: "2"},
		{args: []string{"run", "-v=-1", "-f", "x.yaml"}, wantErr: true},
		{args: []string{"run", "-v=lots", "-f", "x.yaml"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(cmdLine(tt.args), func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := newRootCommand(streams{out: &out, errOut: &errOut})
			run, _, err := root.Find([]string{"run"})
			if err != nil {
				t.Fatal(err)
			}
			var gotV int
			var gotFile string
			ran := false
			run.RunE = func(cmd *cobra.Command, _ []string) error {
				ran = true
				gotFile, _ = cmd.Flags().GetString("file")
				gotV = verbosityOf(cmd)
				return nil
			}
			root.SetArgs(normalizeArgs(tt.args))
			err = root.Execute()
			if tt.wantErr {
				if err == nil {
					t.Fatalf("want an error, got none (verbosity %d)", gotV)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !ran {
				t.Fatal("run did not run")
			}
			if diff := cmp.Diff(struct {
				V    int
				File string
			}{tt.wantV, tt.wantFile}, struct {
				V    int
				File string
			}{gotV, gotFile}); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func cmdLine(args []string) string {
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	return b.String()
}

// TestRunTakesItsFileEitherWay: proctor run FILE is proctor run -f FILE;
// both, or neither, is refused naming what to do; run --help lists the exit
// codes.
func TestRunTakesItsFileEitherWay(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "missing.yaml"}, "missing.yaml"},
		{[]string{"run", "a.yaml", "-f", "b.yaml"}, "the Evaluation is given twice: a.yaml and -f b.yaml"},
		{[]string{"run"}, "proctor run -f EVALUATION.yaml (or proctor run EVALUATION.yaml)"},
	} {
		var out, errOut bytes.Buffer
		root := newRootCommand(streams{out: &out, errOut: &errOut})
		root.SetArgs(c.args)
		err := root.Execute()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitInvalid || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "unknown command") {
			t.Errorf("%v: %v; want exit 2 saying %q", c.args, err, c.want)
		}
	}
	var out, errOut bytes.Buffer
	root := newRootCommand(streams{out: &out, errOut: &errOut})
	root.SetArgs([]string{"run", "--help"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "Exit codes:") || !strings.Contains(out.String(), "130") {
		t.Errorf("run --help: %v\n%s", err, out.String())
	}
}
