package dataset

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckIDs(t *testing.T) {
	tests := []struct {
		name    string
		format  Format
		data    string
		inline  []string
		mapping Mapping
		n       int
		want    *DuplicateIDError
	}{
		{
			name:   "unique",
			format: FormatJSONL,
			data:   `{"id":"a"}` + "\n" + `{"id":"b"}` + "\n",
			n:      10,
		},
		{
			name:   "jsonl duplicate names both lines",
			format: FormatJSONL,
			data:   `{"id":"a"}` + "\n" + `{"id":"b"}` + "\n\n" + `{"id":"a"}` + "\n",
			n:      10,
			want:   &DuplicateIDError{ID: "a", Unit: "line", First: 1, Second: 4},
		},
		{
			name:   "duplicate past n is not looked at",
			format: FormatJSONL,
			data:   `{"id":"a"}` + "\n" + `{"id":"b"}` + "\n" + `{"id":"a"}` + "\n",
			n:      2,
		},
		{
			name:   "csv duplicate",
			format: FormatCSV,
			data:   "id,input\nq1,a\nq2,b\nq1,c\n",
			n:      10,
			want:   &DuplicateIDError{ID: "q1", Unit: "line", First: 2, Second: 4},
		},
		{
			name:    "csv with a mapped id column",
			format:  FormatCSV,
			data:    "qid,input\nx,a\ny,b\ny,c\n",
			mapping: Mapping{ID: "qid"},
			n:       10,
			want:    &DuplicateIDError{ID: "y", Unit: "line", First: 3, Second: 4},
		},
		{
			name:   "a record without an id is not numbered by its position",
			format: FormatJSONL,
			data:   `{"id":"2"}` + "\n" + `{"input":"x"}` + "\n",
			n:      10,
		},
		{
			name:   "two equal records without ids",
			format: FormatJSONL,
			data:   `{"input":"x"}` + "\n" + `{"input":"y"}` + "\n" + `{"input":"x","id":""}` + "\n",
			n:      10,
			want:   &DuplicateIDError{ID: cid(`{"input":"x"}`), Unit: "line", First: 1, Second: 3},
		},
		{
			name:   "json array elements",
			format: FormatJSON,
			data:   `[{"id":1},{"id":2},{"id":1}]`,
			n:      10,
			want:   &DuplicateIDError{ID: "1", Unit: "element", First: 1, Second: 3},
		},
		{
			name:   "inline items",
			inline: []string{`{"id":"a"}`, `{"id":"a"}`},
			n:      10,
			want:   &DuplicateIDError{ID: "a", Unit: "item", First: 1, Second: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open := func() (Reader, io.Closer, error) {
				if tt.inline != nil {
					items := make([]json.RawMessage, len(tt.inline))
					for i, s := range tt.inline {
						items[i] = json.RawMessage(s)
					}
					return Inline(items, tt.mapping), io.NopCloser(nil), nil
				}
				r, err := NewReader(strings.NewReader(tt.data), tt.format, tt.mapping)
				return r, io.NopCloser(nil), err
			}
			err := CheckIDs(open, tt.n)
			var got *DuplicateIDError
			if err != nil {
				if !errors.As(err, &got) {
					t.Fatalf("CheckIDs: %v, want a *DuplicateIDError or nil", err)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("CheckIDs mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDuplicateIDErrorText(t *testing.T) {
	err := &DuplicateIDError{ID: "q1", Unit: "line", First: 2, Second: 4}
	want := `line 4: id "q1" is already the id of line 2; ids must be unique`
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	err = &DuplicateIDError{ID: cid(`{}`), Unit: "element", First: 1, Second: 3}
	want = `element 3: the same record as element 1; a record without an id is identified by its content, so two equal ones cannot be told apart: remove the repeat, or give the records ids`
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestMappingUnmapped(t *testing.T) {
	names := []string{"answer", "id", "question"}
	tests := []struct {
		name    string
		m       Mapping
		wantKey string
		wantVal string
		wantOK  bool
	}{
		{name: "no mapping", m: Mapping{}},
		{name: "all found", m: Mapping{ID: "id", Input: "question", Expected: "answer"}},
		{name: "typo in input", m: Mapping{Input: "questoin", Expected: "answer"}, wantKey: "input", wantVal: "questoin", wantOK: true},
		{name: "expected missing", m: Mapping{Input: "question", Expected: "expected"}, wantKey: "expected", wantVal: "expected", wantOK: true},
		{name: "messages missing", m: Mapping{Messages: "conversation"}, wantKey: "messages", wantVal: "conversation", wantOK: true},
		// Naming the defaults of fields most samples lack does not require them.
		{name: "messages and tools named as their defaults", m: Mapping{ID: "id", Messages: "messages", Tools: "tools"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, v, ok := tt.m.Unmapped(names)
			if diff := cmp.Diff([]any{tt.wantKey, tt.wantVal, tt.wantOK}, []any{k, v, ok}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestCheckFindsInvalidUTF8: records holding bytes that are not UTF-8 are
// counted in the pass that checks ids, with the first one's line, in every
// format that can hold them.
func TestCheckFindsInvalidUTF8(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		format     Format
		want       Report
	}{
		{"jsonl", "{\"id\":\"a\",\"input\":\"ok\"}\n{\"id\":\"b\",\"input\":\"caf\xe9\"}\n{\"id\":\"c\",\"input\":\"\xff\"}\n", FormatJSONL, Report{InvalidUTF8: 2, FirstInvalidUTF8: 2, Unit: "line"}},
		{"json", "[{\"id\":\"a\",\"input\":\"caf\xe9\"}]", FormatJSON, Report{InvalidUTF8: 1, FirstInvalidUTF8: 1, Unit: "element"}},
		{"csv", "id,input\na,ok\nb,caf\xe9\n", FormatCSV, Report{InvalidUTF8: 1, FirstInvalidUTF8: 3, Unit: "line"}},
		{"all UTF-8", "{\"id\":\"a\",\"input\":\"café\"}\n", FormatJSONL, Report{Unit: "line"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open := func() (Reader, io.Closer, error) {
				r, err := NewReader(strings.NewReader(tc.data), tc.format, Mapping{})
				return r, io.NopCloser(nil), err
			}
			got, err := Check(open, 10)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}
