package validation

import (
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/internal/evalfile"
)

// TestLocal checks the table against the local loader: every case is refused with
// an error that contains Local (or, with Local empty, accepted), and the valid
// manifests are accepted.
func TestLocal(t *testing.T) {
	t.Parallel()
	if _, err := evalfile.Decode("valid", []byte(Valid)); err != nil {
		t.Fatalf("Valid refused: %v", err)
	}
	for _, c := range Accepted {
		if _, err := evalfile.Decode(c.Name, []byte(c.Manifest+"---\n"+Endpoints)); err != nil {
			t.Errorf("%s: refused: %v\n%s", c.Name, err, c.Manifest)
		}
	}
	seen := map[string]bool{"valid": true}
	for _, set := range [][]Case{Accepted, Cases, Differences} {
		for _, c := range set {
			if seen[c.Name] {
				t.Errorf("%s: two cases have this name", c.Name)
			}
			seen[c.Name] = true
		}
	}
	for _, set := range [][]Case{Cases, Differences} {
		for _, c := range set {
			_, err := evalfile.Decode(c.Name, []byte(c.Manifest+"---\n"+Endpoints))
			switch {
			case c.Local == "" && err != nil:
				t.Errorf("%s: refused, want accepted: %v", c.Name, err)
			case c.Local == "":
			case err == nil:
				t.Errorf("%s: accepted, want an error containing %q\n%s", c.Name, c.Local, c.Manifest)
			case !strings.Contains(err.Error(), c.Local):
				t.Errorf("%s: error\n\t%v\nwant it to contain\n\t%s", c.Name, err, c.Local)
			}
		}
	}
}

// TestCasesAreEdits checks that every case differs from Valid, and that the
// invalid and accepted ones are named by their metadata.name.
func TestCasesAreEdits(t *testing.T) {
	t.Parallel()
	for _, set := range [][]Case{Accepted, Cases, Differences} {
		for _, c := range set {
			if c.Manifest == build(c.Name) {
				t.Errorf("%s: the manifest is Valid unchanged", c.Name)
			}
		}
	}
	for _, set := range [][]Case{Accepted, Cases} {
		for _, c := range set {
			if !strings.Contains(c.Manifest, "\n  name: "+c.Name+"\n") {
				t.Errorf("%s: metadata.name is not the case's name", c.Name)
			}
		}
	}
}
