package score

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLastNumber(t *testing.T) {
	tests := []struct {
		in     string
		want   float64
		wantOK bool
	}{
		{"42", 42, true},
		{"The answer is 42.", 42, true},
		{"first 3, then 7", 7, true},
		{"-5", -5, true},
		{"it is −5 degrees", -5, true}, // U+2212 minus sign
		{"x = -0.25", -0.25, true},
		{"1,234,567.5", 1234567.5, true},
		{"total: 1,234", 1234, true},
		{"$1,234.50", 1234.5, true},
		{"-$12", -12, true},
		{"$-12", -12, true},
		{"about 45%", 45, true},
		{"1e-3", 0.001, true},
		{"6.02E23", 6.02e23, true},
		{"2.5e+2 units", 250, true},
		{"The answer is 3.", 3, true},
		{".5", 0.5, true},
		{"1, 2, 3", 3, true}, // a list is not a thousands-separated number
		{"1,2,3", 3, true},
		{"pages 10-20", 20, true}, // hyphen, not minus
		{"COVID-19", 19, true},    // hyphen, not minus
		{"result:-7", -7, true},   // punctuation before the sign: a minus
		{"7 apples and 0 pears", 0, true},
		{"10 or 1e999", 10, true}, // an overflowing token is skipped
		{"no number here", 0, false},
		{"", 0, false},
		{"- $ , .", 0, false},
	}
	for _, tc := range tests {
		got, ok := lastNumber(tc.in)
		if diff := cmp.Diff([2]any{tc.want, tc.wantOK}, [2]any{got, ok}); diff != "" {
			t.Errorf("lastNumber(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestNumeric(t *testing.T) {
	runScoreCases(t, TypeNumeric, nil, []scoreCase{
		{name: "json number", in: ans("so the answer is 42", num("42")), want: 1},
		{name: "wrong", in: ans("41", num("42")), want: 0},
		{name: "decimal vs integer", in: ans("42.0", num("42")), want: 1},
		{name: "float noise", in: ans("0.30000000000000004", num("0.3")), want: 1},
		{name: "relative slack scales", in: ans("1000000000.5", num("1000000000")), want: 1},
		{name: "relative slack is tiny", in: ans("1000000002", num("1000000000")), want: 0},
		{name: "tolerance inside", cfg: Config{Tolerance: 0.5}, in: ans("3.4", num("3")), want: 1},
		{name: "tolerance edge", cfg: Config{Tolerance: 0.5}, in: ans("3.5", num("3")), want: 1},
		{name: "tolerance outside", cfg: Config{Tolerance: 0.5}, in: ans("3.6", num("3")), want: 0},
		{name: "negative", in: ans("it drops to -12", num("-12")), want: 1},
		{name: "sign matters", in: ans("12", num("-12")), want: 0},
		{name: "expected string", in: ans("1234567.5", "1,234,567.5"), want: 1},
		{name: "expected string with text (GSM8K style)", in: ans("The total is $18.", "Janet makes 9 * 2 = $18\n#### 18"), want: 1},
		{name: "expected percent string", in: ans("45", "45%"), want: 1},
		{name: "expected scientific", in: ans("0.001", num("1e-3")), want: 1},
		{name: "no number in output", in: ans("I don't know", num("42")), want: 0},
		{name: "normalizers do not apply", cfg: Config{Normalize: []string{NormStripPunctuation}}, in: ans("-1.5", num("-1.5")), want: 1},
		{name: "expected string without number", in: ans("42", "forty-two"), wantErr: `expected value "forty-two" has no number`},
		{name: "expected bool", in: ans("1", true), wantErr: "expected value must be a number or a string holding one (got true)"},
		{name: "expected object", in: ans("1", map[string]any{"a": num("1")}), wantErr: `(got {"a":1})`},
		{name: "expected array", in: ans("1", []any{num("1")}), wantErr: "(got [1])"},
		{name: "expected bad json number", in: ans("1", num("abc")), wantErr: "expected value abc is not a number"},
	})
}
