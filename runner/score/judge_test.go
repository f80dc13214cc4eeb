package score

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseVerdict(t *testing.T) {
	const noVerdict = "judge reply has no verdict line (want \"VERDICT: CORRECT\", \"VERDICT: PARTIAL\" or \"VERDICT: INCORRECT\" last); reply ended with: "
	tests := []struct {
		name    string
		reply   string
		want    float64
		wantErr string
	}{
		{name: "correct", reply: "The answer matches.\nVERDICT: CORRECT", want: 1},
		{name: "partial", reply: "Half right.\nVERDICT: PARTIAL", want: 0.5},
		{name: "incorrect", reply: "Wrong city.\nVERDICT: INCORRECT", want: 0},
		{name: "verdict only", reply: "VERDICT: CORRECT", want: 1},
		{name: "trailing blank lines and spaces", reply: "ok\n  VERDICT: CORRECT  \r\n\n \n", want: 1},
		{name: "CRLF", reply: "ok\r\nVERDICT: INCORRECT\r\n", want: 0},
		{name: "earlier verdict is ignored", reply: "VERDICT: CORRECT\nOn reflection, no.\nVERDICT: INCORRECT", want: 0},
		{name: "lowercase", reply: "ok\nverdict: correct", wantErr: noVerdict + `"verdict: correct"`},
		{name: "trailing text after verdict", reply: "VERDICT: CORRECT\nThanks!", wantErr: noVerdict + `"Thanks!"`},
		{name: "text after verdict on the same line", reply: "VERDICT: CORRECT.", wantErr: noVerdict + `"VERDICT: CORRECT."`},
		{name: "markdown", reply: "**VERDICT: CORRECT**", wantErr: noVerdict + `"**VERDICT: CORRECT**"`},
		{name: "missing space", reply: "VERDICT:CORRECT", wantErr: noVerdict + `"VERDICT:CORRECT"`},
		{name: "empty", reply: " \n ", wantErr: noVerdict + `""`},
		{name: "long last line is truncated", reply: strings.Repeat("x", 100), wantErr: noVerdict + `"` + strings.Repeat("x", 80) + `"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVerdict(tc.reply)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != "" && strings.Contains(err.Error(), strings.Repeat("x", 81)) {
				t.Errorf("error quotes more than 80 characters: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("score (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	var gotPrompt string
	judge := func(reply string) JudgeFunc {
		return func(_ context.Context, prompt string) (string, error) {
			gotPrompt = prompt
			return reply, nil
		}
	}
	sample := map[string]any{"topic": "geography"}
	in := Input{Output: "Paris", Expected: "Paris", HasExpected: true, Prompt: "Capital of France?", Input: "France", Sample: sample}

	tests := []struct {
		name       string
		rubric     string
		reply      string
		in         Input
		want       float64
		wantPrompt string // empty: not checked
		wantErr    string
	}{
		{name: "correct", reply: "VERDICT: CORRECT", in: in, want: 1},
		{name: "partial", reply: "VERDICT: PARTIAL", in: in, want: 0.5},
		{name: "incorrect", reply: "VERDICT: INCORRECT", in: in, want: 0},
		{name: "strict", reply: "verdict: correct", in: in, wantErr: "judge reply has no verdict line"},
		{name: "custom rubric sees every field", reply: "VERDICT: CORRECT", in: in,
			rubric:     "{{.Prompt}}|{{.Input}}|{{.Output}}|{{.Expected}}|{{.Sample.topic}}",
			want:       1,
			wantPrompt: "Capital of France?|France|Paris|Paris|geography"},
		{name: "expected text form", reply: "VERDICT: CORRECT", rubric: "{{.Expected}}",
			in:   Input{Expected: []any{"Paris", num("75")}, HasExpected: true},
			want: 1, wantPrompt: `["Paris",75]`},
		{name: "no expected value", reply: "VERDICT: CORRECT", rubric: "[{{.Expected}}]",
			in: Input{Output: "x"}, want: 1, wantPrompt: "[]"},
		{name: "null expected value", reply: "VERDICT: CORRECT", rubric: "[{{.Expected}}]",
			in: Input{Output: "x", HasExpected: true}, want: 1, wantPrompt: "[]"},
		{name: "missing sample key", reply: "VERDICT: CORRECT", rubric: "{{.Sample.nope}}", in: in,
			wantErr: `rubric: template: rubric:1:9: executing "rubric" at <.Sample.nope>: map has no entry for key "nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotPrompt = ""
			s, err := New(Config{Type: TypeJudge, Rubric: tc.rubric}, judge(tc.reply))
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Score(context.Background(), tc.in)
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("score (-want +got):\n%s", diff)
			}
			if tc.wantPrompt != "" {
				if diff := cmp.Diff(tc.wantPrompt, gotPrompt); diff != "" {
					t.Errorf("judge prompt (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestJudgeError(t *testing.T) {
	errOverloaded := errors.New("overloaded")
	s, err := New(Config{Type: TypeJudge}, func(context.Context, string) (string, error) {
		return "VERDICT: CORRECT", errOverloaded
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Score(context.Background(), ans("x", "y"))
	if !errors.Is(err, errOverloaded) {
		t.Fatalf("Score error = %v, want one wrapping %v", err, errOverloaded)
	}
	checkErr(t, err, "judge: overloaded")
}

func TestJudgePassesContext(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "run-1")
	s, err := New(Config{Type: TypeJudge}, func(ctx context.Context, _ string) (string, error) {
		if ctx.Value(key{}) != "run-1" {
			return "", errors.New("context not passed through")
		}
		return "VERDICT: CORRECT", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Score(ctx, ans("x", "y")); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultRubric(t *testing.T) {
	var prompt string
	s, err := New(Config{Type: TypeJudge}, func(_ context.Context, p string) (string, error) {
		prompt = p
		return "VERDICT: CORRECT", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Prompt: "What is 2+2?", Output: "4", Expected: num("4"), HasExpected: true}
	if _, err := s.Score(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	// A fake judge server finds the answers by these line prefixes.
	for _, line := range []string{"[Question]: What is 2+2?", "[Expected answer]: 4", "[Submitted answer]: 4",
		"VERDICT: CORRECT", "VERDICT: PARTIAL", "VERDICT: INCORRECT"} {
		if !hasLine(prompt, line) {
			t.Errorf("default rubric rendered without the line %q:\n%s", line, prompt)
		}
	}
	for _, prefix := range []string{"[Question]: {{ .Prompt }}", "[Expected answer]: {{ .Expected }}", "[Submitted answer]: {{ .Output }}"} {
		if !hasLinePrefix(DefaultRubric, prefix) {
			t.Errorf("DefaultRubric has no line starting %q", prefix)
		}
	}
}

func hasLine(text, line string) bool {
	for l := range strings.Lines(text) {
		if strings.TrimRight(l, "\n") == line {
			return true
		}
	}
	return false
}

func hasLinePrefix(text, prefix string) bool {
	for l := range strings.Lines(text) {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
