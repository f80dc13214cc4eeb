package v1alpha1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestEveryReasonIsDocumented: docs/reference/troubleshooting.md says what each
// condition and reason of conditions.go means and what to do about it; a new
// one fails this test until it has its row.
func TestEveryReasonIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reference/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "conditions.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") && !strings.HasPrefix(name.Name, "Condition") {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				n++
				if !strings.Contains(string(doc), "| `"+v+"`") && !strings.Contains(string(doc), ", `"+v+"` |") {
					t.Errorf("%s (%q) has no row in docs/reference/troubleshooting.md", name.Name, v)
				}
			}
		}
	}
	if n < 60 {
		t.Errorf("found %d conditions and reasons in conditions.go; the parsing is broken", n)
	}
}
