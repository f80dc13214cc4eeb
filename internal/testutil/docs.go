package testutil

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DocsFiles are the pages whose shell blocks tell users what to type:
// README.md, charts/proctor/README.md and every page under docs/, from the
// repository's root.
func DocsFiles(root string) ([]string, error) {
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "charts", "proctor", "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	return files, err
}

// DocsCommand is a command line of a fenced shell block (sh, bash, shell,
// console or none) of a page.
type DocsCommand struct {
	// Line is the line it starts on, counting from 1.
	Line int
	// Block numbers the page's fenced blocks, from 0: the lines of one block
	// that only make sense together share it.
	Block int
	// Text is the command as a shell reads it: lines continued with a
	// backslash joined, the "$ " prompt of a console block and a trailing
	// comment left out.
	Text string
	// Output are the lines a console block shows after the command.
	Output []string
}

// DocsCommands lists the command lines of the fenced shell blocks of path, in
// order. In a console block only the lines after a "$ " prompt are commands;
// the others are their output.
func DocsCommands(path string) ([]DocsCommand, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []DocsCommand
	sc := bufio.NewScanner(f)
	var inShell, console bool
	inBlock, block := false, -1
	var n, start int
	var cont string
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			lang := strings.TrimPrefix(line, "```")
			inBlock = !inBlock
			if inBlock {
				block++
			}
			console = lang == "console"
			inShell = inBlock && (lang == "" || lang == "sh" || lang == "bash" || lang == "shell" || console)
			continue
		}
		if !inShell {
			continue
		}
		if cont == "" {
			start = n
			if console {
				cmd, ok := strings.CutPrefix(line, "$ ")
				if !ok {
					if len(out) > 0 && out[len(out)-1].Block == block {
						out[len(out)-1].Output = append(out[len(out)-1].Output, sc.Text())
					}
					continue
				}
				line = cmd
			}
		} else {
			line = cont + " " + line
		}
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`)
			continue
		}
		cont = ""
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, DocsCommand{Line: start, Block: block, Text: line})
		}
	}
	return out, sc.Err()
}
