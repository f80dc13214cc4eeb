package score

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNormalizers(t *testing.T) {
	tests := []struct {
		norm []string
		in   string
		want string
	}{
		{nil, "  As Is \n", "  As Is \n"},
		{[]string{NormTrim}, " \t hello world \n", "hello world"},
		{[]string{NormTrim}, "\u00a0hello\u3000", "hello"}, // Unicode spaces
		{[]string{NormLowercase}, "HeLLo ÉTÉ", "hello été"},
		{[]string{NormCollapseWhitespace}, "  a \t\n b   c  ", "a b c"},
		{[]string{NormCollapseWhitespace}, "a b c", "a b c"},
		{[]string{NormCollapseWhitespace}, "a b ", "a b"},
		{[]string{NormCollapseWhitespace}, "a\tb", "a b"},
		{[]string{NormCollapseWhitespace}, " ", ""},
		{[]string{NormCollapseWhitespace}, "", ""},
		{[]string{NormStripPunctuation}, `Hello, "world"! (it's) ¿qué? — ok…`, "Hello world its qué  ok"},
		{[]string{NormStripPunctuation}, "$5 + 3 = 8", "$5 + 3 = 8"}, // symbols are not punctuation
		{[]string{NormStripPunctuation}, "x-y_z", "xyz"},
		// Order matters: stripping first leaves a space that collapse then removes.
		{[]string{NormStripPunctuation, NormCollapseWhitespace}, "a - b", "a b"},
		{[]string{NormCollapseWhitespace, NormStripPunctuation}, "a - b", "a  b"},
		{[]string{NormTrim, NormLowercase, NormCollapseWhitespace, NormStripPunctuation}, "  The   END. ", "the end"},
		// Numbers written as one: 42.0 equals 42 under exact_match.
		{[]string{NormNumber}, "42.0", "42"},
		{[]string{NormNumber}, " +42 ", "42"},
		{[]string{NormNumber}, "4.2e1", "42"},
		{[]string{NormNumber}, "0.50", "0.5"},
		{[]string{NormNumber}, "-0.0", "0"},
		{[]string{NormNumber}, "1e3", "1000"},
		{[]string{NormNumber}, "12345678901234567890", "1.2345678901234567e+19"}, // beyond exact integers
		{[]string{NormNumber}, "0x1F", "0x1F"},                                   // not an answer's number
		{[]string{NormNumber}, "Inf", "Inf"},
		{[]string{NormNumber}, "42 apples", "42 apples"},
		{[]string{NormNumber}, "1,000", "1,000"},
	}
	for _, tc := range tests {
		n, err := newNormalizer(tc.norm)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, n.apply(tc.in)); diff != "" {
			t.Errorf("normalize %v of %q (-want +got):\n%s", tc.norm, tc.in, diff)
		}
	}
}

func TestTextForm(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{nil, ""},
		{"  text ", "  text "},
		{json.Number("1e3"), "1e3"},
		{true, "true"},
		{false, "false"},
		{map[string]any{"b": []any{json.Number("1"), "x&y"}, "a": nil}, `{"a":null,"b":[1,"x&y"]}`},
		{[]any{"a", json.Number("2.50")}, `["a",2.50]`},
		{3.5, "3.5"},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, textForm(tc.in)); diff != "" {
			t.Errorf("textForm(%#v) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"été", 2, "ét"},
		{"", 3, ""},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, truncate(tc.in, tc.n)); diff != "" {
			t.Errorf("truncate(%q, %d) (-want +got):\n%s", tc.in, tc.n, diff)
		}
	}
}
