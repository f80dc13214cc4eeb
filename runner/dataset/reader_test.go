package dataset

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// errText compares errors by message, which is what users see.
var errText = cmp.Comparer(func(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Error() == b.Error()
})

func num(s string) json.Number { return json.Number(s) }

// cid is the id of a record without one: the SHA-256 of its canonical JSON,
// given here as written by hand (keys sorted, no HTML escaping, the id field
// left out), so that the canonical form is checked too.
func cid(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// readAll drains r. fatal is the error that stopped it, nil at io.EOF.
func readAll(t *testing.T, r Reader) (samples []Sample, fatal error) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 1_000_000 {
			t.Fatal("reader does not end")
		}
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			return samples, nil
		}
		if err != nil {
			// A fatal error must stick.
			if _, again := r.Next(); again == nil || again.Error() != err.Error() {
				t.Errorf("Next after fatal error %q returned %v", err, again)
			}
			return samples, err
		}
		samples = append(samples, s)
	}
}

func read(t *testing.T, format Format, data string, m Mapping) ([]Sample, error) {
	t.Helper()
	r, err := NewReader(strings.NewReader(data), format, m)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	return readAll(t, r)
}

// readerCase is a table row shared by the format tests.
type readerCase struct {
	name    string
	data    string
	mapping Mapping
	want    []Sample
	fatal   string
}

func runReaderCases(t *testing.T, format Format, cases []readerCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := read(t, format, tc.data, tc.mapping)
			if diff := cmp.Diff(tc.want, got, errText); diff != "" {
				t.Errorf("samples (-want +got):\n%s", diff)
			}
			gotFatal := ""
			if err != nil {
				gotFatal = err.Error()
			}
			if gotFatal != tc.fatal {
				t.Errorf("fatal error = %q, want %q", gotFatal, tc.fatal)
			}
			// Count must agree with the reader, malformed records included.
			n, cerr := Count(strings.NewReader(tc.data), format)
			if n != len(got) || (cerr == nil) != (err == nil) {
				t.Errorf("Count = %d, %v; reader yielded %d, %v", n, cerr, len(got), err)
			}
		})
	}
}

func recErr(unit string, n int, field string, err string) error {
	return &RecordError{Unit: unit, N: n, Field: field, Err: errors.New(err)}
}

func TestJSONL(t *testing.T) {
	runReaderCases(t, FormatJSONL, []readerCase{
		{
			name: "default mapping",
			data: `{"id":"a","input":"What is 2+2?","expected":"4","extra":true}` + "\n",
			want: []Sample{{
				Index: 0, Line: 1, ID: "a", Input: "What is 2+2?", Expected: "4", HasExpected: true,
				Fields: map[string]any{"id": "a", "input": "What is 2+2?", "expected": "4", "extra": true},
			}},
		},
		{
			name:    "custom mapping",
			data:    `{"qid":7,"question":"q","answer":["x",1]}`,
			mapping: Mapping{ID: "qid", Input: "question", Expected: "answer"},
			want: []Sample{{
				Index: 0, Line: 1, ID: "7", Input: "q", Expected: []any{"x", num("1")}, HasExpected: true,
				Fields: map[string]any{"qid": num("7"), "question": "q", "answer": []any{"x", num("1")}},
			}},
		},
		{
			name: "ids",
			data: strings.Join([]string{
				`{"id":12345678901234567890}`, // beyond int64 and float64 precision: kept as written
				`{"id":1.50}`,
				`{}`,
				`{"id":null}`,
				`{"id":""}`,
				`{"id":{"b":1,"a":"<&>"}}`,
				`{"id":true}`,
			}, "\n"),
			want: []Sample{
				{Index: 0, Line: 1, ID: "12345678901234567890", Fields: map[string]any{"id": num("12345678901234567890")}},
				{Index: 1, Line: 2, ID: "1.50", Fields: map[string]any{"id": num("1.50")}},
				{Index: 2, Line: 3, ID: cid(`{}`), Fields: map[string]any{}},
				{Index: 3, Line: 4, ID: cid(`{}`), Fields: map[string]any{"id": nil}},
				{Index: 4, Line: 5, ID: cid(`{}`), Fields: map[string]any{"id": ""}},
				{Index: 5, Line: 6, ID: `{"a":"<&>","b":1}`, Fields: map[string]any{"id": map[string]any{"b": num("1"), "a": "<&>"}}},
				{Index: 6, Line: 7, ID: "true", Fields: map[string]any{"id": true}},
			},
		},
		{
			name: "input and expected shapes",
			data: `{"input":{"q":"<b>"},"expected":null}` + "\n" + `{"input":42}` + "\n" + `{"input":null,"expected":false}`,
			want: []Sample{
				{Index: 0, Line: 1, ID: cid(`{"expected":null,"input":{"q":"<b>"}}`), Input: `{"q":"<b>"}`, Expected: nil, HasExpected: true,
					Fields: map[string]any{"input": map[string]any{"q": "<b>"}, "expected": nil}},
				{Index: 1, Line: 2, ID: cid(`{"input":42}`), Input: "42", Fields: map[string]any{"input": num("42")}},
				{Index: 2, Line: 3, ID: cid(`{"expected":false,"input":null}`), Input: "", Expected: false, HasExpected: true,
					Fields: map[string]any{"input": nil, "expected": false}},
			},
		},
		{
			name: "blank lines, BOM and CRLF",
			data: "\ufeff{\"id\":\"a\"}\r\n\r\n   \t\n{\"id\":\"b\"}\r\n\n",
			want: []Sample{
				{Index: 0, Line: 1, ID: "a", Fields: map[string]any{"id": "a"}},
				{Index: 1, Line: 4, ID: "b", Fields: map[string]any{"id": "b"}},
			},
		},
		{
			name: "BOM on a blank first line",
			data: "\ufeff\n{\"id\":\"a\"}",
			want: []Sample{{Index: 0, Line: 2, ID: "a", Fields: map[string]any{"id": "a"}}},
		},
		{
			name: "malformed lines mid-file",
			data: strings.Join([]string{
				`{"id":"a"}`,
				`{"id":"b",`,
				``,
				`[1,2]`,
				`{"id":"c"} {"id":"d"}`,
				`"text"`,
				`null`,
				`{"id": tru}`,
				`{"id":"e"}`,
			}, "\n"),
			want: []Sample{
				{Index: 0, Line: 1, ID: "a", Fields: map[string]any{"id": "a"}},
				{Index: 1, Line: 2, ID: "2", Err: recErr("line", 2, "", "invalid JSON: unexpected end of JSON input")},
				{Index: 2, Line: 4, ID: "3", Err: recErr("line", 4, "", "not a JSON object")},
				{Index: 3, Line: 5, ID: "4", Err: recErr("line", 5, "", "invalid JSON: invalid character '{' after top-level value")},
				{Index: 4, Line: 6, ID: "5", Err: recErr("line", 6, "", "not a JSON object")},
				{Index: 5, Line: 7, ID: "6", Err: recErr("line", 7, "", "not a JSON object")},
				{Index: 6, Line: 8, ID: "7", Err: recErr("line", 8, "", "invalid JSON: invalid character '}' in literal true (expecting 'e')")},
				{Index: 7, Line: 9, ID: "e", Fields: map[string]any{"id": "e"}},
			},
		},
		{
			name: "empty",
			data: "",
		},
		{
			name: "only blank lines",
			data: "\n \n\r\n",
		},
	})
}

func TestJSONLMalformedIsErrNotObject(t *testing.T) {
	got, _ := read(t, FormatJSONL, "[]", Mapping{})
	var re *RecordError
	if len(got) != 1 || !errors.As(got[0].Err, &re) || !errors.Is(got[0].Err, ErrNotObject) || re.N != 1 {
		t.Fatalf("got %+v, want a *RecordError wrapping ErrNotObject", got)
	}
}

func TestJSONLLongLines(t *testing.T) {
	// Lines several times longer than the read buffer, including a long blank
	// one, must come through whole and keep the line count right.
	big := strings.Repeat("x", 3<<20)
	data := `{"id":"a","input":"` + big + `"}` + "\r\n" +
		strings.Repeat(" ", 200<<10) + "\n" +
		`{"id":"b"}` + "\n" +
		`{"id":"c","input":"` + big + `` + "\n" + // truncated: malformed
		`{"id":"d","input":"` + big[:100<<10] + `"}`
	got, err := read(t, FormatJSONL, data, Mapping{})
	if err != nil {
		t.Fatal(err)
	}
	type brief struct {
		Index, Line int
		ID          string
		InputLen    int
		Err         string
	}
	var gotBrief []brief
	for _, s := range got {
		b := brief{Index: s.Index, Line: s.Line, ID: s.ID, InputLen: len(s.Input)}
		if s.Err != nil {
			b.Err = s.Err.Error()
		}
		gotBrief = append(gotBrief, b)
	}
	want := []brief{
		{0, 1, "a", 3 << 20, ""},
		{1, 3, "b", 0, ""},
		{2, 4, "3", 0, "line 4: invalid JSON: unexpected end of JSON input"},
		{3, 5, "d", 100 << 10, ""},
	}
	if diff := cmp.Diff(want, gotBrief); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// Skipping long lines keeps positions too.
	r, _ := NewReader(strings.NewReader(data), FormatJSONL, Mapping{})
	if err := r.(Skipper).Skip(3); err != nil {
		t.Fatal(err)
	}
	if s, err := r.Next(); err != nil || s.ID != "d" || s.Line != 5 || s.Index != 3 {
		t.Errorf("after Skip(3): %v %v %v %v", s.ID, s.Line, s.Index, err)
	}
	if n, err := Count(strings.NewReader(data), FormatJSONL); n != 4 || err != nil {
		t.Errorf("Count = %d, %v; want 4", n, err)
	}
}

func TestJSON(t *testing.T) {
	runReaderCases(t, FormatJSON, []readerCase{
		{
			name: "array of objects",
			data: "\ufeff [\n {\"id\":1,\"input\":\"a ] } [ {\\\"\"},\n\t2, {\"expected\":null} ]\n",
			want: []Sample{
				{Index: 0, Line: 1, ID: "1", Input: `a ] } [ {"`, Fields: map[string]any{"id": num("1"), "input": `a ] } [ {"`}},
				{Index: 1, Line: 2, ID: "2", Err: recErr("element", 2, "", "not a JSON object")},
				{Index: 2, Line: 3, ID: cid(`{"expected":null}`), HasExpected: true, Fields: map[string]any{"expected": nil}},
			},
		},
		{
			name: "empty array",
			data: " [ ] ",
		},
		{
			name: "non-object elements",
			data: `["s", [], null, -1.5e3, true]`,
			want: []Sample{
				{Index: 0, Line: 1, ID: "1", Err: recErr("element", 1, "", "not a JSON object")},
				{Index: 1, Line: 2, ID: "2", Err: recErr("element", 2, "", "not a JSON object")},
				{Index: 2, Line: 3, ID: "3", Err: recErr("element", 3, "", "not a JSON object")},
				{Index: 3, Line: 4, ID: "4", Err: recErr("element", 4, "", "not a JSON object")},
				{Index: 4, Line: 5, ID: "5", Err: recErr("element", 5, "", "not a JSON object")},
			},
		},
		{
			name:  "not an array",
			data:  `{"id":1}`,
			fatal: "not a JSON array: found '{' at byte 0",
		},
		{
			name:  "empty input",
			data:  " \n",
			fatal: "not a JSON array: empty input",
		},
		{
			name:  "syntax error inside an element",
			data:  `[{"id":1}, {"a":[}, {"id":3}]`,
			want:  []Sample{{Index: 0, Line: 1, ID: "1", Fields: map[string]any{"id": num("1")}}},
			fatal: "element 2: invalid JSON at byte 17: invalid character '}' looking for beginning of value",
		},
		{
			name:  "missing comma",
			data:  `[{"id":1} {"id":2}]`,
			want:  []Sample{{Index: 0, Line: 1, ID: "1", Fields: map[string]any{"id": num("1")}}},
			fatal: "element 2: invalid JSON at byte 10: invalid character '{' after array element",
		},
		{
			name:  "trailing comma",
			data:  `[{"id":1},]`,
			want:  []Sample{{Index: 0, Line: 1, ID: "1", Fields: map[string]any{"id": num("1")}}},
			fatal: "element 2: invalid JSON at byte 10: invalid character ']' looking for beginning of value",
		},
		{
			name:  "garbage after a number",
			data:  `[1x]`,
			fatal: "element 1: invalid JSON at byte 2: invalid character 'x' after array element",
		},
		{
			name:  "unclosed array",
			data:  `[{"id":1}`,
			want:  []Sample{{Index: 0, Line: 1, ID: "1", Fields: map[string]any{"id": num("1")}}},
			fatal: "element 2: invalid JSON at byte 9: unexpected end of JSON input",
		},
		{
			name:  "unclosed element",
			data:  `[{"id":"1`,
			fatal: "element 1: invalid JSON at byte 9: unexpected end of JSON input",
		},
		{
			name:  "data after the array",
			data:  `[{"id":1}] []`,
			want:  []Sample{{Index: 0, Line: 1, ID: "1", Fields: map[string]any{"id": num("1")}}},
			fatal: "invalid JSON at byte 11: invalid character '[' after top-level array",
		},
	})
}

func TestJSONSyntaxErrorIsWrapped(t *testing.T) {
	_, err := read(t, FormatJSON, `[{"a" 1}]`, Mapping{})
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("error %v does not wrap a *json.SyntaxError", err)
	}
	_, err = read(t, FormatJSON, `{}`, Mapping{})
	if !errors.Is(err, ErrNotArray) {
		t.Fatalf("error %v is not ErrNotArray", err)
	}
}

func TestCSV(t *testing.T) {
	runReaderCases(t, FormatCSV, []readerCase{
		{
			name: "header and records",
			data: "\ufeff id , input ,expected\r\n1,\"hello, world\",x\r\n,b,\r\n",
			want: []Sample{
				{Index: 0, Line: 2, ID: "1", Input: "hello, world", Expected: "x", HasExpected: true,
					Fields: map[string]any{"id": "1", "input": "hello, world", "expected": "x"}},
				{Index: 1, Line: 3, ID: cid(`{"expected":"","input":"b"}`), Input: "b", Expected: "", HasExpected: true,
					Fields: map[string]any{"id": "", "input": "b", "expected": ""}},
			},
		},
		{
			name:    "custom mapping and quoted multi-line fields",
			data:    "q,a\n\"line one\nline two\",\"x\"\"y\"\n\nthird,z\n",
			mapping: Mapping{Input: "q", Expected: "a"},
			want: []Sample{
				{Index: 0, Line: 2, ID: cid(`{"a":"x\"y","q":"line one\nline two"}`), Input: "line one\nline two", Expected: `x"y`, HasExpected: true,
					Fields: map[string]any{"q": "line one\nline two", "a": `x"y`}},
				{Index: 1, Line: 5, ID: cid(`{"a":"z","q":"third"}`), Input: "third", Expected: "z", HasExpected: true,
					Fields: map[string]any{"q": "third", "a": "z"}},
			},
		},
		{
			name: "wrong field counts and parse errors",
			data: "id,input\n" +
				"1,a\n" +
				"2,b,extra\n" +
				"3\n" +
				"4,bare\"quote\n" + // the rest of this line is dropped, reading resumes on the next
				"5,\"quoted\"junk\n" +
				"6,\"multi\nline\",x\n" +
				"7,g\n",
			want: []Sample{
				{Index: 0, Line: 2, ID: "1", Input: "a", Fields: map[string]any{"id": "1", "input": "a"}},
				{Index: 1, Line: 3, ID: "2", Err: recErr("line", 3, "", "has 3 fields, header has 2")},
				{Index: 2, Line: 4, ID: "3", Err: recErr("line", 4, "", "has 1 fields, header has 2")},
				{Index: 3, Line: 5, ID: "4", Err: recErr("line", 5, "", `invalid CSV at column 7: bare " in non-quoted-field`)},
				{Index: 4, Line: 6, ID: "5", Err: recErr("line", 6, "", `invalid CSV at column 10: extraneous or missing " in quoted-field`)},
				{Index: 5, Line: 7, ID: "6", Err: recErr("line", 7, "", "has 3 fields, header has 2")},
				{Index: 6, Line: 9, ID: "7", Input: "g", Fields: map[string]any{"id": "7", "input": "g"}},
			},
		},
		// A stray quote makes csv read every following line as part of one
		// field: the records after it would vanish into one error. Refused.
		{
			name: "unterminated quote runs to the end",
			data: "id,input\n1,a\n2,\"open\n3,c\n4,d\n",
			want: []Sample{
				{Index: 0, Line: 2, ID: "1", Input: "a", Fields: map[string]any{"id": "1", "input": "a"}},
			},
			fatal: `line 3: a quoted field in this record is never closed: lines 3 to 5 (the end of the data) would be read as one field; ` + quoteAdvice,
		},
		{
			name: "stray quote closed by a later quoted field",
			data: "id,input,expected\n1,a,x\n2,\"open,y\n3,c,z\n4,\"d\",w\n5,e,v\n",
			want: []Sample{
				{Index: 0, Line: 2, ID: "1", Input: "a", Expected: "x", HasExpected: true, Fields: map[string]any{"id": "1", "input": "a", "expected": "x"}},
			},
			fatal: `line 3: a quoted field in this record does not close until line 5: lines 3 to 5 would be read as one field; ` + quoteAdvice,
		},
		{
			name: "stray quote closed by a later bare quote",
			data: "id,input,expected\n1,a,x\n2,\"open,y\n3,c,z\n4,d\",w\n5,e,v\n",
			want: []Sample{
				{Index: 0, Line: 2, ID: "1", Input: "a", Expected: "x", HasExpected: true, Fields: map[string]any{"id": "1", "input": "a", "expected": "x"}},
			},
			fatal: `line 3: the quoted field at column 3 does not close until line 5, so line 4 would be read as part of it, not as a record; ` + quoteAdvice,
		},
		{
			// Code in the last column: lines with commas are no records.
			name:    "multi-line code in the last column stays one field",
			data:    "id,input\n1,\"def f(a):\nreturn g(a, b)\nh(x, y)\nend\"\n2,b\n",
			mapping: Mapping{},
			want: []Sample{
				{Index: 0, Line: 2, ID: "1", Input: "def f(a):\nreturn g(a, b)\nh(x, y)\nend",
					Fields: map[string]any{"id": "1", "input": "def f(a):\nreturn g(a, b)\nh(x, y)\nend"}},
				{Index: 1, Line: 6, ID: "2", Input: "b", Fields: map[string]any{"id": "2", "input": "b"}},
			},
		},
		{
			name:    "quoted multi-line text stays one field",
			data:    "id,input\n1,\"first line, with a comma\nsecond line\nthird, and last\"\n2,b\n",
			mapping: Mapping{},
			want: []Sample{
				{Index: 0, Line: 2, ID: "1", Input: "first line, with a comma\nsecond line\nthird, and last",
					Fields: map[string]any{"id": "1", "input": "first line, with a comma\nsecond line\nthird, and last"}},
				{Index: 1, Line: 5, ID: "2", Input: "b", Fields: map[string]any{"id": "2", "input": "b"}},
			},
		},
		{
			name:  "duplicate header",
			data:  "id,input,id\n1,2,3\n",
			fatal: `csv header: duplicate column name "id" (columns 1 and 3)`,
		},
		{
			name:  "duplicate header after trimming",
			data:  "id,input, input\n1,2,3\n",
			fatal: `csv header: duplicate column name "input" (columns 2 and 3)`,
		},
		{
			name:  "empty header name",
			data:  "id,,input\n1,2,3\n",
			fatal: "csv header: column 2 has an empty name",
		},
		{
			name:  "malformed header",
			data:  "id,in\"put\n1,2\n",
			fatal: `csv header: parse error on line 1, column 6: bare " in non-quoted-field`,
		},
		{
			name: "empty file",
			data: "",
		},
		{
			name: "header only",
			data: "\ufeffid,input\n",
		},
	})
}

func TestInline(t *testing.T) {
	items := []json.RawMessage{
		json.RawMessage(`{"qid":"x","q":"hi","messages":[{"role":"user","content":"hi"}]}`),
		json.RawMessage(`[1]`),
		json.RawMessage(`{"q":`),
		json.RawMessage(`{"messages":[{"role":"bot"}]}`),
		json.RawMessage(` {"q":"last"} `),
	}
	m := Mapping{ID: "qid", Input: "q"}
	got, err := readAll(t, Inline(items, m))
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{
		{Index: 0, Line: 1, ID: "x", Input: "hi",
			Fields:   map[string]any{"qid": "x", "q": "hi", "messages": []any{map[string]any{"role": "user", "content": "hi"}}},
			Messages: messages(msg("user", "hi"))},
		{Index: 1, Line: 2, ID: "2", Err: recErr("item", 2, "", "not a JSON object")},
		{Index: 2, Line: 3, ID: "3", Err: recErr("item", 3, "", "invalid JSON: unexpected end of JSON input")},
		{Index: 3, Line: 4, ID: cid(`{"messages":[{"role":"bot"}]}`), Fields: map[string]any{"messages": []any{map[string]any{"role": "bot"}}},
			Err: recErr("item", 4, "messages", `message 1: unknown role "bot"`)},
		{Index: 4, Line: 5, ID: cid(`{"q":"last"}`), Input: "last", Fields: map[string]any{"q": "last"}},
	}
	if diff := cmp.Diff(want, got, errText); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNewReaderUnknownFormat(t *testing.T) {
	for _, f := range []Format{"", "xml", "JSONL"} {
		if _, err := NewReader(strings.NewReader(""), f, Mapping{}); !errors.Is(err, ErrUnknownFormat) {
			t.Errorf("NewReader(%q) error = %v, want ErrUnknownFormat", f, err)
		}
		if _, err := Count(strings.NewReader(""), f); !errors.Is(err, ErrUnknownFormat) {
			t.Errorf("Count(%q) error = %v, want ErrUnknownFormat", f, err)
		}
	}
	if err := Validate("xml"); err == nil || err.Error() != `unknown dataset format "xml"` {
		t.Errorf("Validate(xml) = %v", err)
	}
	for _, f := range []Format{FormatJSONL, FormatJSON, FormatCSV} {
		if err := Validate(f); err != nil {
			t.Errorf("Validate(%q) = %v", f, err)
		}
	}
}
