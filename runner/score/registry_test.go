package score

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/internal/testutil"
)

// The scorers and normalizers the runner knows are those the API admits (the
// CRD's enums), and each builds.
func TestRegistryMatchesTheAPI(t *testing.T) {
	if diff := cmp.Diff(testutil.CRDEnum(t, "scoring", "type"), Types); diff != "" {
		t.Errorf("scorer types: CRD enum (-) vs score.Types (+):\n%s", diff)
	}
	if diff := cmp.Diff(testutil.CRDEnum(t, "scoring", "normalize"), Normalizers); diff != "" {
		t.Errorf("normalizers: CRD enum (-) vs score.Normalizers (+):\n%s", diff)
	}
	judge := func(context.Context, string) (string, error) { return "VERDICT: CORRECT", nil }
	for _, typ := range Types {
		if _, err := New(Config{Type: typ, Normalize: Normalizers}, judge); err != nil {
			t.Errorf("New(%s): %v", typ, err)
		}
	}
}
