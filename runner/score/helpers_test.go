package score

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scoreCase is one row of a scorer table: build cfg, score in, expect a score or
// an error containing wantErr.
type scoreCase struct {
	name    string
	cfg     Config
	in      Input
	want    float64
	wantErr string
}

// runScoreCases builds each case's scorer with typ as its type (and judge as its
// judge) and checks the exact score or error.
func runScoreCases(t *testing.T, typ string, judge JudgeFunc, cases []scoreCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Type = typ
			s, err := New(cfg, judge)
			if err != nil {
				t.Fatalf("New(%+v): %v", cfg, err)
			}
			got, err := s.Score(context.Background(), tc.in)
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Score() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// checkErr fails unless err is nil when wantErr is empty, or contains wantErr.
func checkErr(t *testing.T, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case wantErr != "" && err == nil:
		t.Fatalf("got no error, want one containing %q", wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Fatalf("error %q does not contain %q", err, wantErr)
	}
}

// ans is an Input with an answer and an expected value.
func ans(output string, expected any) Input {
	return Input{Output: output, Expected: expected, HasExpected: true}
}

// num is shorthand for a json.Number expected value.
func num(s string) json.Number { return json.Number(s) }

// mustJSON decodes s the way a JSON dataset would (numbers as json.Number).
func mustJSON(t *testing.T, s string) any {
	t.Helper()
	v, err := decodeJSON(s)
	if err != nil {
		t.Fatalf("decodeJSON(%q): %v", s, err)
	}
	return v
}
