package score

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExtractJSON(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   string // JSON text of the expected value; "" when none is found
		wantOK bool
	}{
		{"plain object", `{"a": 1}`, `{"a":1}`, true},
		{"plain array with spaces", "\n [1, 2]\n", `[1,2]`, true},
		{"scalar", `42`, `42`, true},
		{"fence", "```json\n{\"a\": [1, 2]}\n```", `{"a":[1,2]}`, true},
		{"fence without language", "```\n[true]\n```", `[true]`, true},
		{"fence with prose", "Here you go:\n```json\n{\"a\": 1}\n```\nHope this helps!", `{"a":1}`, true},
		{"fenced scalar", "```json\n\"yes\"\n```", `"yes"`, true},
		{"prose around object", `The result is {"name": "x", "n": 2} as requested.`, `{"name":"x","n":2}`, true},
		{"prose around array", `Sure: [1, {"b": null}]. Done`, `[1,{"b":null}]`, true},
		{"braces inside strings", `Result: {"s": "a } b { c", "t": "\"]"} end`, `{"s":"a } b { c","t":"\"]"}`, true},
		{"first balanced that parses", `Use {curly} or [1, 2] or {"a": 1}`, `[1,2]`, true},
		{"inner value of an unparseable outer", `{not json but [3] inside}`, `[3]`, true},
		{"first of two objects", `{"a": 1} and {"b": 2}`, `{"a":1}`, true},
		{"mismatched brackets then valid", `{"a": [1}, then {"b": 2}`, `{"b":2}`, true},
		{"truncated output", `{"a": [1, 2`, "", false},
		{"no json", "I cannot answer that.", "", false},
		{"empty", "", "", false},
		{"garbage in fence falls back to the scan", "```json\n{\"a\": 1} x\n```", `{"a":1}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := extractJSON(tc.in)
			if ok != tc.wantOK {
				t.Fatalf("extractJSON(%q) ok = %v, want %v (value %v)", tc.in, ok, tc.wantOK, got)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(mustJSON(t, tc.want), got); diff != "" {
				t.Errorf("extractJSON(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}

	// Numbers must stay json.Number so that big integers compare exactly.
	got, _ := extractJSON("ID: {\"id\": 12345678901234567891}")
	if diff := cmp.Diff(map[string]any{"id": json.Number("12345678901234567891")}, got); diff != "" {
		t.Errorf("number decoding (-want +got):\n%s", diff)
	}
}

func TestExtractJSONPathological(t *testing.T) {
	// Unbalanced brackets must not cost quadratic time; this finishes in
	// milliseconds with the scan budget and would take minutes without it.
	in := strings.Repeat("[", 1<<20)
	if _, ok := extractJSON(in); ok {
		t.Fatal("found JSON in unbalanced brackets")
	}
}

func TestSubset(t *testing.T) {
	tests := []struct {
		name     string
		expected any
		actual   any
		want     bool
	}{
		{"equal objects", map[string]any{"a": "x"}, map[string]any{"a": "x"}, true},
		{"extra actual keys", map[string]any{"a": "x"}, map[string]any{"a": "x", "b": "y"}, true},
		{"missing key", map[string]any{"a": "x", "c": "z"}, map[string]any{"a": "x"}, false},
		{"different value", map[string]any{"a": "x"}, map[string]any{"a": "y"}, false},
		{"nested subset", map[string]any{"a": map[string]any{"b": true}}, map[string]any{"a": map[string]any{"b": true, "c": false}}, true},
		{"empty object matches any object", map[string]any{}, map[string]any{"a": "x"}, true},
		{"object vs array", map[string]any{}, []any{}, false},
		{"arrays element-wise", []any{"a", "b"}, []any{"a", "b"}, true},
		{"arrays order matters", []any{"a", "b"}, []any{"b", "a"}, false},
		{"arrays length must be equal", []any{"a"}, []any{"a", "b"}, false},
		{"arrays of objects use subset", []any{map[string]any{"id": json.Number("1")}}, []any{map[string]any{"id": json.Number("1"), "x": "y"}}, true},
		{"array vs string", []any{"a"}, "a", false},
		{"json.Number vs json.Number", json.Number("1"), json.Number("1.0"), true},
		{"json.Number exponent", json.Number("1e2"), json.Number("100"), true},
		{"json.Number vs float64", json.Number("2.5"), 2.5, true},
		{"float64 vs json.Number", 2.5, json.Number("2.50"), true},
		{"float64 0.1 vs json.Number 0.1", 0.1, json.Number("0.1"), true},
		{"int vs json.Number", 3, json.Number("3"), true},
		{"json.Number vs int64", json.Number("3"), int64(3), true},
		{"numbers differ", json.Number("3"), 3.0001, false},
		{"big integers compared exactly", json.Number("12345678901234567891"), json.Number("12345678901234567892"), false},
		{"big integers equal", json.Number("12345678901234567891"), json.Number("12345678901234567891"), true},
		{"number vs numeric string", json.Number("3"), "3", false},
		{"string vs number", "3", json.Number("3"), false},
		{"strings equal", "a", "a", true},
		{"strings differ in case", "a", "A", false},
		{"bools", true, true, true},
		{"bool vs string", true, "true", false},
		{"null vs null", nil, nil, true},
		{"null vs missing-ish", nil, "", false},
		{"null key must be present", map[string]any{"a": nil}, map[string]any{}, false},
		{"null key present", map[string]any{"a": nil}, map[string]any{"a": nil}, true},
		{"string vs null", "a", nil, false},
	}
	for _, tc := range tests {
		if got := Subset(tc.expected, tc.actual); got != tc.want {
			t.Errorf("%s: Subset(%#v, %#v) = %v, want %v", tc.name, tc.expected, tc.actual, got, tc.want)
		}
	}
}

func TestJSONMatch(t *testing.T) {
	obj := func(s string) any { return mustJSON(t, s) }
	runScoreCases(t, TypeJSONMatch, nil, []scoreCase{
		{name: "exact", in: ans(`{"a": 1, "b": "x"}`, obj(`{"a": 1, "b": "x"}`)), want: 1},
		{name: "subset", in: ans(`{"a": 1, "b": "x", "extra": [1]}`, obj(`{"a": 1}`)), want: 1},
		{name: "wrong value", in: ans(`{"a": 2}`, obj(`{"a": 1}`)), want: 0},
		{name: "number forms", in: ans(`{"a": 1.0, "b": 2e0}`, obj(`{"a": 1, "b": 2}`)), want: 1},
		{name: "fenced", in: ans("```json\n{\"city\": \"Paris\"}\n```", obj(`{"city": "Paris"}`)), want: 1},
		{name: "prose", in: ans(`Here it is: {"city": "Paris"}. Anything else?`, obj(`{"city": "Paris"}`)), want: 1},
		{name: "array", in: ans(`[1, 2, 3]`, obj(`[1, 2, 3]`)), want: 1},
		{name: "array length differs", in: ans(`[1, 2, 3]`, obj(`[1, 2]`)), want: 0},
		{name: "expected as JSON string (CSV)", in: ans(`{"a": [1, 2]}`, `{"a": [1, 2]}`), want: 1},
		{name: "expected as JSON string mismatch", in: ans(`{"a": [1]}`, `{"a": [1, 2]}`), want: 0},
		{name: "expected float64 from a Go caller", in: ans(`{"a": 0.5}`, map[string]any{"a": 0.5}), want: 1},
		{name: "unparseable output", in: ans(`{"a": 1`, obj(`{"a": 1}`)), want: 0},
		{name: "no json", in: ans(`the answer is a=1`, obj(`{"a": 1}`)), want: 0},
		{name: "expected string not JSON", in: ans(`{}`, "a=1"), wantErr: `expected value "a=1" is not valid JSON`},
		{name: "expected string with trailing data", in: ans(`{}`, `{} {}`), wantErr: "is not valid JSON: unexpected data after the JSON value"},
	})
}
