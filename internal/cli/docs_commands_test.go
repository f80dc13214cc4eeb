package cli

import (
	"bufio"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docsFiles are the pages whose shell blocks tell users what to type.
func docsFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "charts", "proctor", "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// proctorLine is a command line of proctor in a shell block: the binary as
// the docs call it (proctor, bin/proctor, ./bin/proctor), then its words up
// to a comment, a pipe or the next command.
var proctorLine = regexp.MustCompile(`^(?:\$ )?(?:\./)?(?:bin/)?proctor(?:\s+(.*))?$`)

// docsCommands lists the proctor command lines of the fenced shell blocks
// of path, each with its line number.
func docsCommands(t *testing.T, path string) map[int][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int][]string{}
	sc := bufio.NewScanner(f)
	var inShell, inBlock bool
	var n, start int
	var cont string
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			lang := strings.TrimPrefix(line, "```")
			inBlock = !inBlock
			inShell = inBlock && (lang == "" || lang == "sh" || lang == "bash" || lang == "shell" || lang == "console")
			continue
		}
		if !inShell {
			continue
		}
		if cont != "" {
			line = cont + " " + line
		} else {
			start = n
		}
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`)
			continue
		}
		cont = ""
		// The first command of the line: before a comment, a pipe, && or ;.
		for _, sep := range []string{" #", " |", " &&", ";"} {
			if i := strings.Index(line, sep); i >= 0 {
				line = line[:i]
			}
		}
		m := proctorLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		out[start] = strings.Fields(strings.NewReplacer(`"`, "", "'", "").Replace(m[1]))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
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
	for _, path := range docsFiles(t) {
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
