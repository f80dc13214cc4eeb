package dataset

// Attacks by dataset content (a url dataset is someone else's data): records
// that would cost unbounded memory, nesting that would grow a stack with the
// data (docs/reference/security.md).

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
)

// withMaxRecord lowers the record cap for a test.
func withMaxRecord(t *testing.T, n int) {
	t.Helper()
	old := maxRecordBytes
	maxRecordBytes = n
	t.Cleanup(func() { maxRecordBytes = old })
}

const testCap = 100 << 10

// A record longer than the cap is that sample's error (the others run) in
// jsonl and json, where the next record can still be found; in csv, where it
// cannot, the data is refused. Count agrees with the readers.
func TestRecordCap(t *testing.T) {
	withMaxRecord(t, testCap)
	big := strings.Repeat("x", 2*testCap)
	tests := []struct {
		name   string
		format Format
		data   string
		want   []string // per sample: its id, or "error: ..." for a record error
		fatal  string
	}{
		{
			name:   "jsonl long line",
			format: FormatJSONL,
			data:   `{"id":"a"}` + "\n" + `{"id":"b","input":"` + big + `"}` + "\n" + `{"id":"c"}` + "\n",
			want:   []string{"a", "error: line 2: " + ErrRecordTooLarge.Error(), "c"},
		},
		{
			name:   "jsonl long line without a newline at the end",
			format: FormatJSONL,
			data:   `{"id":"a"}` + "\n" + big,
			want:   []string{"a", "error: line 2: " + ErrRecordTooLarge.Error()},
		},
		{
			name:   "jsonl long blank line is still blank",
			format: FormatJSONL,
			data:   `{"id":"a"}` + "\n" + strings.Repeat(" ", 2*testCap) + "\n" + `{"id":"c"}` + "\n",
			want:   []string{"a", "c"},
		},
		{
			name:   "json long element",
			format: FormatJSON,
			data:   `[{"id":"a"}, {"id":"b","input":"` + big + `"}, {"id":"c"}]`,
			want:   []string{"a", "error: element 2: " + ErrRecordTooLarge.Error(), "c"},
		},
		{
			name:   "csv long field",
			format: FormatCSV,
			data:   "id,input\na,x\nb,\"" + big + "\"\nc,x\n",
			want:   []string{"a"},
			fatal:  "the record after line 2: " + ErrRecordTooLarge.Error(),
		},
		{
			name:   "csv quote never closed",
			format: FormatCSV,
			data:   "id,input\na,x\nb,\"" + strings.Repeat("y,z\n", testCap),
			want:   []string{"a"},
			fatal:  "the record after line 2: " + ErrRecordTooLarge.Error(),
		},
		{
			name:   "csv long header",
			format: FormatCSV,
			data:   "id," + big + "\na,x\n",
			fatal:  "csv header: " + ErrRecordTooLarge.Error(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			samples, fatal := read(t, tt.format, tt.data, Mapping{})
			var got []string
			for _, s := range samples {
				if s.Err != nil {
					got = append(got, "error: "+s.Err.Error())
					if !errors.Is(s.Err, ErrRecordTooLarge) {
						t.Errorf("record error %v is not ErrRecordTooLarge", s.Err)
					}
				} else {
					got = append(got, s.ID)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("samples %q, want %q", got, tt.want)
			}
			if msg := fmt.Sprint(fatal); (fatal != nil || tt.fatal != "") && msg != tt.fatal {
				t.Errorf("fatal error %q, want %q", msg, tt.fatal)
			}
			n, cerr := Count(strings.NewReader(tt.data), tt.format)
			if n != len(samples) || (cerr == nil) != (fatal == nil) {
				t.Errorf("Count = %d, %v; the reader yielded %d, %v", n, cerr, len(samples), fatal)
			}
		})
	}
}

// Nesting deeper than encoding/json accepts: a jsonl record's error, a json
// array's fatal error (its structure is lost), found without a stack that
// grows with the data.
func TestDeepNesting(t *testing.T) {
	deep := strings.Repeat(`{"a":[`, 50000)
	samples, fatal := read(t, FormatJSONL, `{"id":"a"}`+"\n"+deep+"\n"+`{"id":"c"}`+"\n", Mapping{})
	if fatal != nil || len(samples) != 3 || samples[1].Err == nil || !strings.Contains(samples[1].Err.Error(), "exceeded max depth") {
		t.Errorf("jsonl: samples %v, fatal %v; want the deep record's error between two samples", samples, fatal)
	}

	r := newJSONReader(strings.NewReader(`[{"id":"a"},`+deep+`]`), DefaultMapping)
	samples, fatal = readAll(t, r)
	if len(samples) != 1 || fatal == nil || !strings.Contains(fatal.Error(), "element 2: invalid JSON at byte") || !errors.Is(fatal, errTooDeep) {
		t.Errorf("json: samples %v, fatal %v; want one sample, then element 2's depth error", samples, fatal)
	}
	if c := cap(r.scan.stack); c > 2*maxNesting {
		t.Errorf("the scanner's stack grew to %d for %d levels", c, 2*50000)
	}
	if _, err := Count(strings.NewReader(`[`+deep+`]`), FormatJSON); !errors.Is(err, errTooDeep) {
		t.Errorf("Count = %v, want the depth error", err)
	}
}

// A gzip bomb that inflates into one endless line costs the cap, not the
// inflated size.
func TestGzipBombIsStreamed(t *testing.T) {
	withMaxRecord(t, 1<<20)
	// gzip reads concatenated members as one stream: compress 1 MiB once.
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	if _, err := zw.Write(bytes.Repeat([]byte{'a'}, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	gz := bytes.Repeat(member.Bytes(), 24) // 24 MiB inflated, 24 KiB compressed
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	data, err := Decompress(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := NewReader(data, FormatJSONL, Mapping{})
	s, err := r.Next()
	if err != nil || !errors.Is(s.Err, ErrRecordTooLarge) {
		t.Fatalf("Next = %+v, %v; want the record's size error", s, err)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the bomb: %v, want io.EOF", err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("reading a 24 MiB line allocated %d MiB", grew>>20)
	}
}
