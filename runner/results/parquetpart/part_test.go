package parquetpart

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
)

func partLine(t *testing.T, index int, key string, unscored bool, rec *results.Record) results.Line {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return results.Line{Index: index, Key: key, Unscored: unscored, Record: b}
}

// roundTrip writes lines as a part and reads them back.
func roundTrip(t *testing.T, lines []results.Line) []results.Line {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, lines); err != nil {
		t.Fatal(err)
	}
	var got []results.Line
	if err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()), func(l results.Line) error {
		got = append(got, l)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// decoded are lines with their records decoded, to compare.
type decoded struct {
	Index    int
	Key      string
	Unscored bool
	Record   results.Record
}

func decode(t *testing.T, lines []results.Line) []decoded {
	t.Helper()
	out := make([]decoded, len(lines))
	for i, l := range lines {
		out[i] = decoded{Index: l.Index, Key: l.Key, Unscored: l.Unscored}
		if err := json.Unmarshal(l.Record, &out[i].Record); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l.Record)
		}
	}
	return out
}

func TestPartRoundTrip(t *testing.T) {
	cost, free := 0.0125, 0.0
	long := strings.Repeat("a long answer, kept whole: ünïcødé ✓ ", 40_000) // about 1.5 MB
	lines := []results.Line{
		partLine(t, 0, "", false, &results.Record{ID: "a", Model: "m", Dataset: "d", Output: "42", Scores: map[string]float64{"exact_match": 1, "judge": 0.5},
			Attempts: 1, LatencyMillis: 230, InputTokens: 12, OutputTokens: 3, Cost: &cost}),
		partLine(t, 7, "sha256:abc", false, &results.Record{ID: "b", Model: "m", Dataset: "d", Output: long, Scores: map[string]float64{"exact_match": 0},
			Attempts: 2, Cost: &free, OutputTruncated: true, OutputBytes: 3 << 20}),
		partLine(t, 2, "", false, &results.Record{ID: "c", Model: "m", Dataset: "d", Scores: map[string]float64{"exact_match": 0},
			Error: "calling the model: 500", ErrorKind: results.ErrorKindCall, Attempts: 3}),
		partLine(t, 3, "k", true, &results.Record{ID: "d", Model: "m", Dataset: "d", Output: "x", Scores: map[string]float64{},
			ScoreErrors: map[string]string{"judge": "the judge failed"}, Rescored: true, JudgePending: []string{"judge", "judge2"}, Batch: "batch_1",
			ToolCalls: []provider.ToolCall{{ID: "t1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)}}, MaxTokensReached: true,
			JudgeInputTokens: 100, JudgeOutputTokens: 5, JudgeCost: &cost, AgentCalls: 4}),
		partLine(t, 4, "", false, &results.Record{ID: "no scores at all"}),
	}
	got := roundTrip(t, lines)
	if diff := cmp.Diff(decode(t, lines), decode(t, got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("read back (-written +read):\n%s", diff)
	}
	// Absent costs stay absent, and a zero cost stays a known zero.
	if d := decode(t, got); d[2].Record.Cost != nil || d[1].Record.Cost == nil || *d[1].Record.Cost != 0 {
		t.Errorf("costs read back: %v and %v; want absent, then 0", d[2].Record.Cost, d[1].Record.Cost)
	}
}

// TestPartKeepsEveryField sets every field of a results.Record and reads it
// back: a field added to results.Record without its column fails here.
func TestPartKeepsEveryField(t *testing.T) {
	var rec results.Record
	v := reflect.ValueOf(&rec).Elem()
	for i := range v.NumField() {
		f, ft := v.Field(i), v.Type().Field(i)
		if ft.Tag.Get("json") == "-" {
			continue // CacheKey: the line's key
		}
		switch {
		case ft.Type == reflect.TypeFor[json.RawMessage]():
			f.Set(reflect.ValueOf(json.RawMessage(`{"answer":["4",2]}`)))
			continue
		case ft.Type == reflect.TypeFor[*time.Time]():
			at := time.Date(2026, 11, 28, 1, 2, 3, i*int(time.Millisecond), time.UTC)
			f.Set(reflect.ValueOf(&at))
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(ft.Name)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Pointer:
			p := reflect.New(ft.Type.Elem())
			p.Elem().SetFloat(float64(i) + 0.5)
			f.Set(p)
		case reflect.Map:
			m := reflect.MakeMap(ft.Type)
			val := reflect.New(ft.Type.Elem()).Elem()
			if val.Kind() == reflect.String {
				val.SetString("why")
			} else {
				val.SetFloat(0.25)
			}
			m.SetMapIndex(reflect.ValueOf("metric"), val)
			f.Set(m)
		case reflect.Slice:
			s := reflect.MakeSlice(ft.Type, 1, 1)
			switch e := s.Index(0); e.Type() {
			case reflect.TypeFor[string]():
				e.SetString("judge")
			case reflect.TypeFor[provider.ToolCall]():
				e.Set(reflect.ValueOf(provider.ToolCall{ID: "1", Name: "f", Arguments: json.RawMessage(`{}`)}))
			case reflect.TypeFor[provider.Message]():
				e.Set(reflect.ValueOf(provider.Message{Role: "user", Content: "What is 2+2?"}))
			case reflect.TypeFor[results.ProxiedCall]():
				c := 0.25
				e.Set(reflect.ValueOf(results.ProxiedCall{Endpoint: "shared", Model: "m", Path: "/v1/chat/completions", Status: 429,
					Error: "429", Attempts: 2, StartedAt: time.Date(2026, 11, 28, 1, 2, 3, 0, time.UTC), LatencyMillis: 12,
					InputTokens: 3, OutputTokens: 4, Cost: &c}))
			default:
				t.Fatalf("results.Record.%s is a slice of %s: give it a value here", ft.Name, e.Type())
			}
			f.Set(s)
		default:
			t.Fatalf("results.Record.%s is a %s: give it a column in partRow and a value here", ft.Name, f.Kind())
		}
	}
	lines := []results.Line{partLine(t, 5, "key", true, &rec)}
	if diff := cmp.Diff(decode(t, lines), decode(t, roundTrip(t, lines))); diff != "" {
		t.Errorf("a record with every field set, read back (-written +read):\n%s", diff)
	}
}

// TestPartIsPlainParquet: other tools read a part by its column names.
func TestPartIsPlainParquet(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, []results.Line{partLine(t, 0, "", false, &results.Record{ID: "a", Scores: map[string]float64{"m": 1}})}); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range f.Schema().Fields() {
		names = append(names, c.Name())
	}
	for _, want := range []string{"index", "id", "model", "dataset", "output", "scores", "error", "error_kind", "attempts", "latency_ms", "input_tokens", "output_tokens", "cost", "batch"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("no column %q in %v", want, names)
		}
	}
	if f.NumRows() != 1 {
		t.Errorf("%d rows, want 1", f.NumRows())
	}
	for _, rg := range f.Metadata().RowGroups {
		for _, c := range rg.Columns {
			if c.MetaData.Codec != format.Zstd {
				t.Errorf("column %v compressed with %v, want ZSTD", c.MetaData.PathInSchema, c.MetaData.Codec)
			}
		}
	}
}

func TestReadPartRefusesWhatIsNotAPart(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty":       nil,
		"JSON lines":  []byte(`{"i":0,"r":{"id":"a"}}` + "\n"),
		"a part, cut": cutPart(t),
	} {
		err := Read(bytes.NewReader(data), int64(len(data)), func(results.Line) error { return nil })
		if err == nil {
			t.Errorf("%s: read without an error", name)
		}
	}
}

func cutPart(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, []results.Line{partLine(t, 0, "", false, &results.Record{ID: "a"})}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[:buf.Len()/2]
}
