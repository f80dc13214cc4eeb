package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/proctor-dev/proctor/runner/tmpl"
)

// TemplateData is what the command, stdin and file templates see. It is the
// same for all of them.
type TemplateData struct {
	// Prompt is the rendered prompt (Request.Prompt).
	Prompt string
	// System is the system prompt (Request.System).
	System string
	// Sample is the raw dataset record (Request.Sample); a template naming a
	// key it lacks fails rather than rendering "<no value>".
	Sample map[string]any
	// ID is the sample's ID (Request.SampleID).
	ID string
	// Workspace is the absolute path of the sample's workspace directory.
	Workspace string
	// Slot is the sample's slot, 0 to Slots-1 (Request.Slot): no two samples
	// in flight share one, so a sample may use "its" database or directory.
	Slot, Slots int
	// Model and Dataset name the model and dataset of the sample (hooks).
	Model, Dataset string
}

// CheckTemplates validates cfg as New does and renders every template against
// data without creating a workspace or running anything, so that a caller can
// report, say, a field missing from the dataset before a run starts.
func CheckTemplates(cfg Config, data TemplateData) error {
	t, err := parseTemplates(cfg)
	if err != nil {
		return err
	}
	_, err = t.render(data)
	return err
}

// CheckTemplates renders the provider's templates (parsed once, by New) with
// data, as Complete will, without running anything.
func (p *Provider) CheckTemplates(data TemplateData) error {
	_, err := p.tmpl.render(data)
	return err
}

// templates are a Config's parsed templates. Each is named after the config
// element it came from (command[2], stdin, files["a.md"]) so that errors point
// at it.
type templates struct {
	command []*template.Template
	stdin   *template.Template // nil when Config.Stdin is empty
	files   []fileTemplate     // sorted by path, so that errors are deterministic
}

type fileTemplate struct {
	path string // cleaned, workspace-relative
	tmpl *template.Template
}

// rendered is the templates executed for one sample.
type rendered struct {
	argv  []string
	stdin string
	files []renderedFile
	// env is the sample's own environment (Request.Env), after the agent's.
	env []string
}

type renderedFile struct {
	path    string
	content string
}

func parseTemplates(cfg Config) (templates, error) {
	var t templates
	if len(cfg.Command) == 0 {
		return t, errors.New("command: empty")
	}
	for i, src := range cfg.Command {
		tmpl, err := parse(fmt.Sprintf("command[%d]", i), src)
		if err != nil {
			return t, err
		}
		t.command = append(t.command, tmpl)
	}
	if cfg.Stdin != "" {
		tmpl, err := parse("stdin", cfg.Stdin)
		if err != nil {
			return t, err
		}
		t.stdin = tmpl
	}

	keys := make([]string, 0, len(cfg.Files))
	for k := range cfg.Files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := make(map[string]string, len(keys)) // cleaned path -> key
	for _, k := range keys {
		name := fmt.Sprintf("files[%q]", k)
		path, err := cleanFilePath(k)
		if err != nil {
			return t, fmt.Errorf("%s: %w", name, err)
		}
		// "a/b" and "a//b" are different keys but the same file.
		if other, dup := seen[path]; dup {
			return t, fmt.Errorf("%s: same file as files[%q]", name, other)
		}
		seen[path] = k
		tmpl, err := parse(name, cfg.Files[k])
		if err != nil {
			return t, err
		}
		t.files = append(t.files, fileTemplate{path: path, tmpl: tmpl})
	}
	return t, nil
}

func parse(name, src string) (*template.Template, error) {
	t, err := tmpl.Parse(name, src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}

// cleanFilePath checks that a Files key names a file inside the workspace and
// returns it cleaned.
func cleanFilePath(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("empty path")
	case filepath.IsAbs(p):
		return "", errors.New("path must be relative to the workspace")
	case strings.HasSuffix(p, "/"):
		return "", errors.New("path names a directory, not a file")
	}
	// Reject ".." anywhere, even where it would stay inside the workspace
	// ("a/../b"): such a path is surely a mistake.
	for elem := range strings.SplitSeq(p, "/") {
		if elem == ".." {
			return "", errors.New(`path must not contain ".."`)
		}
	}
	clean := filepath.Clean(p)
	if clean == "." {
		return "", errors.New("path names the workspace itself")
	}
	return clean, nil
}

// render executes every template against data. It stops at the first error,
// taking the templates in the order command, stdin, files.
func (t templates) render(data TemplateData) (*rendered, error) {
	r := &rendered{argv: make([]string, len(t.command))}
	for i, tmpl := range t.command {
		s, err := execute(tmpl, data)
		if err != nil {
			return nil, err
		}
		r.argv[i] = s
	}
	if r.argv[0] == "" {
		return nil, errors.New("command[0]: renders to an empty program name")
	}
	if t.stdin != nil {
		s, err := execute(t.stdin, data)
		if err != nil {
			return nil, err
		}
		r.stdin = s
	}
	for _, f := range t.files {
		s, err := execute(f.tmpl, data)
		if err != nil {
			return nil, err
		}
		r.files = append(r.files, renderedFile{path: f.path, content: s})
	}
	return r, nil
}

func execute(tmpl *template.Template, data TemplateData) (string, error) {
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("%s: %w", tmpl.Name(), err)
	}
	return b.String(), nil
}
