package v1alpha1_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// The CRD's enums (from the markers) and the local validation's lists must not
// drift: a value admitted in a cluster but refused by proctor run, or the other
// way round, is a bug.
func TestValidationListsMatchTheCRD(t *testing.T) {
	for _, tc := range []struct {
		path []string
		got  []string
	}{
		{[]string{"models", "provider"}, v1alpha1.SupportedProviders()},
		{[]string{"scoring", "type"}, v1alpha1.SupportedScorers()},
		{[]string{"scoring", "normalize"}, v1alpha1.SupportedNormalizers()},
		{[]string{"datasets", "format"}, v1alpha1.SupportedFormats()},
	} {
		if diff := cmp.Diff(testutil.CRDEnum(t, tc.path...), tc.got); diff != "" {
			t.Errorf("spec.%v: CRD enum (-) vs local validation (+):\n%s", tc.path, diff)
		}
	}
}
