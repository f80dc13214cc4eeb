package apiconv

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

func TestModelLimits(t *testing.T) {
	rl := func(r, i, o int64) *v1alpha1.RateLimit {
		return &v1alpha1.RateLimit{RequestsPerMinute: r, InputTokensPerMinute: i, OutputTokensPerMinute: o}
	}
	cases := []struct {
		name   string
		models []v1alpha1.Model
		want   map[string]ratelimit.Limits
	}{
		{"no limits", []v1alpha1.Model{{Name: "a"}, {Name: "b"}}, nil},
		{"all zero", []v1alpha1.Model{{Name: "a", RateLimit: rl(0, 0, 0)}}, nil},
		{"some", []v1alpha1.Model{{Name: "a", RateLimit: rl(60, 0, 0)}, {Name: "b"}, {Name: "c", RateLimit: rl(0, 1000, 50)}, {Name: "d", RateLimit: rl(0, 0, 0)}},
			map[string]ratelimit.Limits{"a": {RequestsPerMinute: 60}, "c": {InputTokensPerMinute: 1000, OutputTokensPerMinute: 50}}},
	}
	for _, tc := range cases {
		got := ModelLimits(&v1alpha1.EvaluationSpec{Models: tc.models})
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: ModelLimits (-want +got):\n%s", tc.name, diff)
		}
		if tc.want == nil && got != nil {
			t.Errorf("%s: ModelLimits = %v, want nil (no budget at all)", tc.name, got)
		}
	}
}
