// Package docs tests the documentation as a reader follows it: every relative
// link of the README, the chart's README and the pages under docs/ leads to a
// file of the repository, and every #anchor into a page to one of its headings.
// Pure file reads: it runs with the unit tests.
package docs

import (
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/proctor-dev/proctor/internal/testutil"
)

// root is the repository, seen from this package's directory.
const root = "../.."

// pages are the Markdown files checked, relative to root: the READMEs a
// reader starts from and every page under docs/.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := testutil.DocsFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]string, 0, len(files))
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, filepath.ToSlash(rel))
	}
	sort.Strings(ps)
	return ps
}

var (
	// fence opens or closes a fenced code block.
	fence = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	// inlineLink is [text](target "title") or ![alt](target); the text may
	// span lines. Group 1 is the target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// refDef is a reference-style link's definition: [label]: target.
	refDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// heading is an ATX heading; group 1 is its text.
	heading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	// scheme starts an absolute URL (https:, mailto:, ...).
	scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	// docsPath is a path under docs/ named in the text, linked or not.
	docsPath = regexp.MustCompile(`(?:^|[^\w./-])(docs/[\w./-]*\w\.md)\b`)
)

// TestLinks: every relative link leads to a file or directory of the
// repository, and a link's #anchor into a Markdown page to one of its
// headings (a page moved or a heading renamed without its links fails here).
func TestLinks(t *testing.T) {
	t.Parallel()
	anchors := map[string]map[string]bool{} // by page, relative to root
	for _, page := range pages(t) {
		src, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(src)) {
			target := l.target
			if target == "" || strings.HasPrefix(target, "#") || scheme.MatchString(target) {
				continue
			}
			p, anchor, _ := strings.Cut(target, "#")
			p, _, _ = strings.Cut(p, "?")
			p, err := url.PathUnescape(p)
			if err != nil {
				t.Errorf("%s:%d: %s: %v", page, l.line, target, err)
				continue
			}
			// GitHub resolves a link starting with / from the repository's root.
			if strings.HasPrefix(p, "/") {
				p = path.Clean(strings.TrimPrefix(p, "/"))
			} else {
				p = path.Join(path.Dir(page), p)
			}
			if p == ".." || strings.HasPrefix(p, "../") {
				t.Errorf("%s:%d: %s leads out of the repository", page, l.line, target)
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				t.Errorf("%s:%d: %s: no such file (%s)", page, l.line, target, p)
				continue
			}
			if anchor == "" || !strings.HasSuffix(p, ".md") {
				continue
			}
			if anchors[p] == nil {
				b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
				if err != nil {
					t.Fatal(err)
				}
				anchors[p] = headingAnchors(string(b))
			}
			if a, err := url.PathUnescape(anchor); err != nil || !anchors[p][a] {
				t.Errorf("%s:%d: %s: %s has no heading with the anchor #%s", page, l.line, target, p, anchor)
			}
		}
	}
}

// TestDocsPaths: a path under docs/ that a page names in its text (`docs/reference/api.md`
// in a code span, a sentence, a command) is a file of the repository too.
func TestDocsPaths(t *testing.T) {
	t.Parallel()
	for _, page := range pages(t) {
		src, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			named := map[string]bool{}
			for _, m := range docsPath.FindAllStringSubmatch(line, -1) {
				if named[m[1]] {
					continue
				}
				named[m[1]] = true
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil {
					t.Errorf("%s:%d: names %s, which does not exist", page, i+1, m[1])
				}
			}
		}
	}
}

// link is a link's target and the line it is on.
type link struct {
	target string
	line   int
}

// links returns the targets of the inline links and link definitions of a
// Markdown text, outside fenced code blocks and code spans.
func links(src string) []link {
	text := stripCode(src)
	var ls []link
	for _, re := range []*regexp.Regexp{inlineLink, refDef} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			ls = append(ls, link{target: text[m[2]:m[3]], line: 1 + strings.Count(text[:m[0]], "\n")})
		}
	}
	return ls
}

// stripCode blanks fenced code blocks and code spans, keeping every newline so
// that offsets still give line numbers.
func stripCode(src string) string {
	lines := strings.Split(src, "\n")
	open := "" // the fence of the code block we are in
	for i, line := range lines {
		m := fence.FindStringSubmatch(line)
		switch {
		case open == "" && m != nil:
			open = m[1]
			lines[i] = ""
		case open != "":
			if m != nil && m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line) == m[1] {
				open = ""
			}
			lines[i] = ""
		}
	}
	text := strings.Join(lines, "\n")
	// A code span opens with a run of backticks and closes with a run of the
	// same length; a run without its match is literal text.
	var b strings.Builder
	for i := 0; i < len(text); {
		if text[i] != '`' {
			b.WriteByte(text[i])
			i++
			continue
		}
		n := run(text, i)
		end := -1
		for j := i + n; j < len(text) && end < 0; {
			if text[j] != '`' {
				j++
				continue
			}
			m := run(text, j)
			if m == n {
				end = j + m
			}
			j += m
		}
		if end < 0 {
			b.WriteString(text[i : i+n])
			i += n
			continue
		}
		for _, c := range text[i:end] {
			if c == '\n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(' ')
			}
		}
		i = end
	}
	return b.String()
}

// run is the length of the run of backticks at text[i].
func run(text string, i int) int {
	n := 0
	for i+n < len(text) && text[i+n] == '`' {
		n++
	}
	return n
}

// headingAnchors returns the anchors GitHub gives the headings of a page: the
// heading's text, lowercased, without punctuation but '-' and '_', spaces
// made '-'; a repeated one gets -1, -2, ...
func headingAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(stripCode(src), "\n") {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// mdLink is a link in a heading, whose text alone counts for the anchor.
var mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor of a heading's text.
func slug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestChecker: the checks above see the links a reader sees, and only those,
// and name anchors as GitHub does.
func TestChecker(t *testing.T) {
	t.Parallel()
	src := "# Title\n" +
		"See [the API](reference/api.md#evaluationspec) and ![a picture](img/a.png \"title\"),\n" +
		"[a link whose text\nspans lines](tasks/cluster.md), [web](https://example.com) [here](#title).\n" +
		"`[not a link](code.md)` and ``a `[nor this](x.md)` `` but [this](y.md).\n" +
		"```sh\n[in a block](block.md)\n```\n" +
		"[ref]: concepts/agents.md\n"
	var got []string
	for _, l := range links(src) {
		got = append(got, l.target+":"+strconv.Itoa(l.line))
	}
	want := []string{"reference/api.md#evaluationspec:2", "img/a.png:2", "tasks/cluster.md:3",
		"https://example.com:4", "#title:4", "y.md:5", "concepts/agents.md:9"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("links:\n got %q\nwant %q", got, want)
	}
	for text, want := range map[string]string{
		"7. Layout: where each kind of change goes":      "7-layout-where-each-kind-of-change-goes",
		"Agents and Pod Security":                        "agents-and-pod-security",
		"`spec.runner`: the pods' image (and [docs](x))": "specrunner-the-pods-image-and-docs",
		"Baselines & gates_2":                            "baselines--gates_2",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
	a := headingAnchors("# FAQ\n## FAQ\n```\n# not a heading\n```\n## FAQ ##\n")
	if !a["faq"] || !a["faq-1"] || !a["faq-2"] || a["not-a-heading"] || len(a) != 3 {
		t.Errorf("headingAnchors: %v", a)
	}
}
