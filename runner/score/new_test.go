package score

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func fakeJudge(reply string) JudgeFunc {
	return func(context.Context, string) (string, error) { return reply, nil }
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		judge   JudgeFunc
		wantErr string
	}{
		{name: "unknown type", cfg: Config{Type: "foo"},
			wantErr: `unknown scorer type "foo" (want one of exact_match, contains, regex, numeric, json_match, tool_call, judge)`},
		{name: "missing type", cfg: Config{}, wantErr: "missing scorer type (want one of exact_match,"},
		{name: "unknown normalizer", cfg: Config{Type: TypeExactMatch, Normalize: []string{"trim", "upper"}},
			wantErr: `unknown normalizer "upper" (want one of trim, lowercase, collapse_whitespace, strip_punctuation, number)`},
		{name: "bad pattern", cfg: Config{Type: TypeRegex, Pattern: "a(b"},
			wantErr: "pattern: error parsing regexp: missing closing )"},
		{name: "judge without func", cfg: Config{Type: TypeJudge},
			wantErr: "judge scorer needs a judge model (no JudgeFunc given)"},
		{name: "rubric does not parse", cfg: Config{Type: TypeJudge, Rubric: "{{ .Output "},
			judge: fakeJudge(""), wantErr: "rubric: template: rubric:1:"},
		{name: "rubric unknown field", cfg: Config{Type: TypeJudge, Rubric: "{{ .Ouptut }}"},
			judge: fakeJudge(""), wantErr: "rubric: unknown field .Ouptut"},
		{name: "rubric unknown field via $", cfg: Config{Type: TypeJudge, Rubric: "{{ with .Sample }}{{ $.Answer }}{{ end }}"},
			judge: fakeJudge(""), wantErr: "rubric: unknown field .Answer"},
		{name: "rubric unknown field in if", cfg: Config{Type: TypeJudge, Rubric: "{{ if .Expected }}{{ .Exp }}{{ end }}"},
			judge: fakeJudge(""), wantErr: "rubric: unknown field .Exp"},
		{name: "negative tolerance", cfg: Config{Type: TypeNumeric, Tolerance: -0.5},
			wantErr: "tolerance must be a non-negative number (got -0.5)"},

		{name: "valid regex", cfg: Config{Type: TypeRegex, Pattern: `^\d+$`}},
		{name: "valid rubric using Sample fields inside with/range",
			cfg:   Config{Type: TypeJudge, Rubric: "{{ .Sample.topic }} {{ with .Sample }}{{ .anything }}{{ end }}{{ range .Sample }}{{ .x }}{{ end }}"},
			judge: fakeJudge("")},
		{name: "judge func ignored by other types", cfg: Config{Type: TypeContains}, judge: fakeJudge("")},
		{name: "zero tolerance", cfg: Config{Type: TypeNumeric}},
		{name: "all normalizers", cfg: Config{Type: TypeContains, Normalize: Normalizers}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg, tc.judge)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && s == nil {
				t.Fatal("New returned a nil scorer and no error")
			}
		})
	}
}

func TestNewEveryType(t *testing.T) {
	for _, typ := range Types {
		t.Run(typ, func(t *testing.T) {
			if _, err := New(Config{Type: typ}, fakeJudge("")); err != nil {
				t.Fatalf("New(%q): %v", typ, err)
			}
		})
	}
}

func TestName(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Type: TypeExactMatch}, "exact_match"},
		{Config{Type: TypeExactMatch, Name: "em_strict"}, "em_strict"},
		{Config{Type: TypeJudge, Name: "quality"}, "quality"},
		{Config{Type: TypeToolCall}, "tool_call"},
	}
	for _, tc := range tests {
		s, err := New(tc.cfg, fakeJudge(""))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, s.Name()); diff != "" {
			t.Errorf("Name() for %+v (-want +got):\n%s", tc.cfg, diff)
		}
	}
}

// TestNoExpected checks that every scorer needing an expected value says so,
// both for an absent field and an explicit null.
func TestNoExpected(t *testing.T) {
	for _, typ := range []string{TypeExactMatch, TypeContains, TypeRegex, TypeNumeric, TypeJSONMatch, TypeToolCall} {
		for _, in := range []Input{{Output: "x"}, {Output: "x", HasExpected: true}, {Output: "x", Expected: "x"}} {
			s, err := New(Config{Type: typ}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Score(context.Background(), in)
			checkErr(t, err, "sample has no expected value")
			if got != 0 {
				t.Errorf("%s: score %v with no expected value, want 0", typ, got)
			}
		}
	}
}

func TestExactMatch(t *testing.T) {
	runScoreCases(t, TypeExactMatch, nil, []scoreCase{
		{name: "equal", in: ans("Paris", "Paris"), want: 1},
		{name: "different", in: ans("Paris.", "Paris"), want: 0},
		{name: "case differs without normalizer", in: ans("paris", "Paris"), want: 0},
		{name: "whitespace differs without normalizer", in: ans(" Paris\n", "Paris"), want: 0},
		{name: "trim", cfg: Config{Normalize: []string{NormTrim}}, in: ans(" Paris\n", "Paris "), want: 1},
		{name: "lowercase", cfg: Config{Normalize: []string{NormLowercase}}, in: ans("PARIS", "Paris"), want: 1},
		{name: "collapse", cfg: Config{Normalize: []string{NormCollapseWhitespace}}, in: ans(" New \t York\n", "New York"), want: 1},
		{name: "strip punctuation", cfg: Config{Normalize: []string{NormStripPunctuation}}, in: ans("Paris!", "«Paris»"), want: 1},
		{name: "all normalizers", cfg: Config{Normalize: []string{NormLowercase, NormStripPunctuation, NormCollapseWhitespace}},
			in: ans("  The  ANSWER: new-york. ", "the answer newyork"), want: 1},
		{name: "json number", in: ans("42", num("42")), want: 1},
		{name: "json number literal kept", in: ans("42", num("42.0")), want: 0},
		{name: "bool", in: ans("true", true), want: 1},
		{name: "bool false", in: ans("false", false), want: 1},
		{name: "object as compact json", in: ans(`{"a":1,"b":"<x>"}`, map[string]any{"b": "<x>", "a": num("1")}), want: 1},
		{name: "any of array", in: ans("NYC", []any{"New York", "NYC"}), want: 1},
		{name: "any of array mixed types", in: ans("3", []any{"three", num("3")}), want: 1},
		{name: "any of array none", in: ans("LA", []any{"New York", "NYC"}), want: 0},
		{name: "any of array normalized", cfg: Config{Normalize: []string{NormLowercase}}, in: ans("nyc", []any{"New York", "NYC"}), want: 1},
		{name: "empty array", in: ans("x", []any{}), wantErr: "expected value is an empty array"},
		{name: "empty expected matches empty answer", in: ans("", ""), want: 1},
	})
}

func TestContains(t *testing.T) {
	runScoreCases(t, TypeContains, nil, []scoreCase{
		{name: "contains", in: ans("The answer is Paris.", "Paris"), want: 1},
		{name: "missing", in: ans("The answer is Lyon.", "Paris"), want: 0},
		{name: "case sensitive by default", in: ans("the answer is paris", "Paris"), want: 0},
		{name: "lowercase", cfg: Config{Normalize: []string{NormLowercase}}, in: ans("the answer is PARIS", "Paris"), want: 1},
		{name: "collapse", cfg: Config{Normalize: []string{NormCollapseWhitespace}}, in: ans("it is New\n  York", "New York"), want: 1},
		{name: "any of", in: ans("I think it is NYC", []any{"New York", "NYC"}), want: 1},
		{name: "any of none", in: ans("LA", []any{"New York", "NYC"}), want: 0},
		{name: "number", in: ans("about 42 apples", num("42")), want: 1},
		{name: "empty expected", in: ans("anything", ""), wantErr: "expected value is empty"},
		{name: "empty after normalization", cfg: Config{Normalize: []string{NormStripPunctuation}}, in: ans("anything", "..."),
			wantErr: "expected value is empty"},
		{name: "empty element", in: ans("anything", []any{"x", " "}), want: 0}, // " " is not empty without trim
		{name: "empty element trimmed", cfg: Config{Normalize: []string{NormTrim}}, in: ans("anything", []any{"x", " "}),
			wantErr: "expected value is empty"},
	})
}

func TestRegex(t *testing.T) {
	runScoreCases(t, TypeRegex, nil, []scoreCase{
		{name: "pattern matches", cfg: Config{Pattern: `\bParis\b`}, in: Input{Output: "It is Paris."}, want: 1},
		{name: "pattern does not match", cfg: Config{Pattern: `\bParis\b`}, in: Input{Output: "It is Parisian."}, want: 0},
		{name: "pattern ignores expected", cfg: Config{Pattern: `^yes$`}, in: ans("yes", "no"), want: 1},
		{name: "pattern on normalized output", cfg: Config{Pattern: `^yes$`, Normalize: []string{NormTrim, NormLowercase}},
			in: Input{Output: "  YES\n"}, want: 1},
		{name: "expected is pattern", in: ans("answer: 42", `answer:\s*\d+`), want: 1},
		{name: "expected pattern no match", in: ans("answer: x", `answer:\s*\d+`), want: 0},
		{name: "expected pattern not normalized", cfg: Config{Normalize: []string{NormLowercase, NormStripPunctuation}},
			in: ans("ANSWER 42", `^answer \d+$`), want: 1},
		{name: "expected patterns any of", in: ans("colour", []any{"^color$", "^colour$"}), want: 1},
		{name: "expected patterns none", in: ans("hue", []any{"^color$", "^colour$"}), want: 0},
		{name: "invalid expected pattern", in: ans("x", "a(b"), wantErr: `expected pattern "a(b": error parsing regexp: missing closing )`},
		{name: "invalid pattern in array", in: ans("x", []any{"x(", "x"}), wantErr: `expected pattern "x("`},
	})
}
