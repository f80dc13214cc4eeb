package cli

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The default resources of runner pods come from flags such as
// --agent-limits=cpu=2,memory=2Gi; empty sets none.
func TestResourceListFlag(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		err      bool
	}{
		{in: "cpu=50m,memory=64Mi", want: "cpu=50m,memory=64Mi"},
		{in: " memory=1Gi , cpu=1 ", want: "cpu=1,memory=1Gi"},
		{in: "ephemeral-storage=1Gi", want: "ephemeral-storage=1Gi"},
		{in: "", want: ""},
		{in: "cpu", err: true},
		{in: "cpu=lots", err: true},
		{in: "memory=-1Gi", err: true},
	} {
		var l corev1.ResourceList
		f := &resourceList{&l}
		err := f.Set(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("Set(%q) = %v, want an error: %v", tt.in, err, tt.err)
			continue
		}
		if got := f.String(); !tt.err && got != tt.want {
			t.Errorf("Set(%q): %q, want %q", tt.in, got, tt.want)
		}
	}
}
