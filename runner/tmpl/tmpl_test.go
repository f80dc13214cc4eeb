package tmpl

import (
	"strings"
	"testing"
)

func TestExecute(t *testing.T) {
	data := map[string]any{
		"Sample": map[string]any{"q": "  Hi  ", "tags": []any{"a", 2, true}, "obj": map[string]any{"k": 1}},
		"Input":  "x",
	}
	cases := []struct {
		name, text, want, wantErr string
	}{
		{name: "field", text: "{{ .Input }}", want: "x"},
		{name: "nested", text: "{{ .Sample.q }}", want: "  Hi  "},
		{name: "trim lower upper", text: "{{ trim .Sample.q | lower }}/{{ upper .Input }}", want: "hi/X"},
		{name: "toJSON", text: "{{ toJSON .Sample.obj }}", want: `{"k":1}`},
		{name: "join", text: `{{ join ", " .Sample.tags }}`, want: "a, 2, true"},
		{name: "missing key is an error", text: "{{ .Sample.nope }}", wantErr: `map has no entry for key "nope"`},
		{name: "missing top-level key is an error", text: "{{ .Inptu }}", wantErr: `map has no entry for key "Inptu"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := Parse("t", tc.text)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Execute(tp, data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Execute = %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Execute = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := Parse("bad", "{{ .Input }"); err == nil {
		t.Error("Parse accepted a broken template")
	}
}
