package cli

import (
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/internal/testutil"
)

// proctorLine is a command line of proctor in a shell block: the binary as
// the docs call it (proctor, bin/proctor, ./bin/proctor), then its words up
// to a pipe or the next command.
var proctorLine = regexp.MustCompile(`^(?:\./)?(?:bin/)?proctor(?:\s+(.*))?$`)

// docsCommands lists the proctor command lines of the fenced shell blocks
// of path, each with its line number.
func docsCommands(t *testing.T, path string) map[int][]string {
	t.Helper()
	cmds, err := testutil.DocsCommands(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]string{}
	for _, c := range cmds {
		line := c.Text
		// The first command of the line: before a pipe, && or ;.
		for _, sep := range []string{" |", " &&", ";"} {
			if i := strings.Index(line, sep); i >= 0 {
				line = line[:i]
			}
		}
		if m := proctorLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			out[c.Line] = strings.Fields(strings.NewReplacer(`"`, "", "'", "").Replace(m[1]))
		}
	}
	return out
}

// TestDocsCommandsParse checks every proctor command line of the README's
// and the docs' shell blocks: its subcommand exists, its flags are that
// subcommand's and its arguments are as many as it takes, so that a renamed
// command or flag fails here rather than in a reader's terminal. Running them
// is the end-to-end tests' (the examples, the quickstarts, make demo).
func TestDocsCommandsParse(t *testing.T) {
	seen := 0
	files, err := testutil.DocsFiles(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		for line, args := range docsCommands(t, path) {
			seen++
			where := path + ":" + strconv.Itoa(line) + ": proctor " + strings.Join(args, " ")
			root := newRootCommand(streams{out: io.Discard, errOut: io.Discard})
			cmd, rest, err := root.Find(args)
			switch {
			case err != nil:
				t.Errorf("%s: %v", where, err)
				continue
			case cmd == root && len(args) > 0 && !strings.HasPrefix(args[0], "-"):
				t.Errorf("%s: no such command", where)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
	if seen < 5 {
		t.Errorf("found %d proctor command lines in the docs, want more: is the parser still finding them?", seen)
	}
}
