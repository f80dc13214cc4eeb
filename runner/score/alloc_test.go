package score

import (
	"context"
	"testing"
)

// TestTextScorersDoNotAllocate guards the hot path: scoring a million samples
// with exact_match or contains should not cost a million garbage strings when the
// text is already normalized.
func TestTextScorersDoNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation may allocate")
	}
	norm := []string{NormTrim, NormLowercase, NormCollapseWhitespace, NormStripPunctuation}
	tests := []struct {
		typ string
		in  Input
	}{
		{TypeExactMatch, ans("new york", "new york")},
		{TypeExactMatch, ans("42", num("42"))},
		{TypeExactMatch, ans("nyc", []any{"new york", "nyc"})},
		{TypeContains, ans("it is new york", "new york")},
		{TypeContains, ans("true", true)},
	}
	for _, tc := range tests {
		for _, cfg := range []Config{{Type: tc.typ}, {Type: tc.typ, Normalize: norm}} {
			s, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			allocs := testing.AllocsPerRun(100, func() {
				if got, err := s.Score(ctx, tc.in); got != 1 || err != nil {
					t.Fatalf("Score = %v, %v; want 1", got, err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s %v on %#v: %v allocations per Score, want 0", tc.typ, cfg.Normalize, tc.in.Expected, allocs)
			}
		}
	}
}

func BenchmarkScore(b *testing.B) {
	norm := []string{NormTrim, NormLowercase, NormCollapseWhitespace}
	benches := []struct {
		name string
		cfg  Config
		in   Input
	}{
		{"exact_match", Config{Type: TypeExactMatch}, ans("Paris", "Paris")},
		{"exact_match/normalized", Config{Type: TypeExactMatch, Normalize: norm}, ans("  The answer is PARIS ", "the answer is paris")},
		{"contains", Config{Type: TypeContains, Normalize: norm}, ans("After some thought, the answer is Paris.", "paris")},
		{"numeric", Config{Type: TypeNumeric}, ans("So 3 + 4 = 7, and the total is 1,234.", num("1234"))},
		{"json_match", Config{Type: TypeJSONMatch}, ans("```json\n{\"city\": \"Paris\", \"n\": 3}\n```", map[string]any{"city": "Paris"})},
	}
	for _, bb := range benches {
		s, err := New(bb.cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Score(context.Background(), bb.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
