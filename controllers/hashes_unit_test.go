package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// TestSpecHashes: an Evaluation's fingerprints are taken once a generation
// of its spec, and again for a new generation, a new object of the same
// name, or one without a generation.
func TestSpecHashes(t *testing.T) {
	mk := func(uid types.UID, generation int64, samples int) *v1alpha1.Evaluation {
		ev := testutil.MakeEvaluation("arith", testNS).InlineDataset("d", samples).OpenAIModel("small", llmURL).
			Scorer(v1alpha1.ScorerExactMatch).Generation(generation).Obj()
		ev.UID = uid
		v1alpha1.SetDefaults(&ev.Spec)
		return ev
	}
	c := newSpecHashes()
	first := c.of(mk("u1", 1, 10))
	for _, tc := range []struct {
		name     string
		ev       *v1alpha1.Evaluation
		wantSame bool
	}{
		{"the same generation", mk("u1", 1, 10), true},
		{"a new generation", mk("u1", 2, 11), false},
		{"a new object of the same name", mk("u2", 1, 10), false},
		{"no generation", mk("u1", 0, 10), false},
	} {
		got := c.of(tc.ev)
		if same := got == first; same != tc.wantSame {
			t.Errorf("%s: the first generation's hashes %v, want %v", tc.name, same, tc.wantSame)
		}
		if want := cluster.SpecHash(&tc.ev.Spec); got.Spec != want {
			t.Errorf("%s: spec hash %s, want %s", tc.name, got.Spec, want)
		}
	}
}
