package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// position is what Skip must keep right.
type position struct {
	Index, Line int
	ID          string
}

func positions(samples []Sample) []position {
	var p []position
	for _, s := range samples {
		p = append(p, position{s.Index, s.Line, s.ID})
	}
	return p
}

// skipCorpus holds data of every format with malformed records and blank lines
// in the middle, for Skip and Count.
var skipCorpus = []struct {
	name   string
	format Format
	data   string
}{
	{"jsonl", FormatJSONL, "\ufeff{\"id\":\"a\"}\n\n{bad\n  \n[1]\r\n{\"id\":\"d\"}\n\n{\"id\":\"e\"}\n"},
	{"json", FormatJSON, `[{"id":"a"}, "bad", {"id":"c"}, 4, {"id":"e"}]`},
	{"csv", FormatCSV, "id,input\na,1\nb\"x,2\nc,\"two\nlines\"\nd,4,extra\n\ne,5\n"},
}

func TestSkip(t *testing.T) {
	for _, c := range skipCorpus {
		all, err := read(t, c.format, c.data, Mapping{})
		if err != nil || len(all) != 5 {
			t.Fatalf("%s: %d samples, %v", c.name, len(all), err)
		}
		for n := 0; n <= len(all)+1; n++ {
			t.Run(fmt.Sprintf("%s/skip%d", c.name, n), func(t *testing.T) {
				r, _ := NewReader(strings.NewReader(c.data), c.format, Mapping{})
				err := r.(Skipper).Skip(n)
				if n > len(all) {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("Skip(%d) past the end = %v, want io.EOF", n, err)
					}
				} else if err != nil {
					t.Fatalf("Skip(%d) = %v", n, err)
				}
				rest, err := readAll(t, r)
				if err != nil {
					t.Fatal(err)
				}
				want := positions(all[min(n, len(all)):])
				if diff := cmp.Diff(want, positions(rest)); diff != "" {
					t.Errorf("after Skip(%d) (-want +got):\n%s", n, diff)
				}
			})
		}
	}
	// Skip in the middle, then Next, then Skip again.
	r, _ := NewReader(strings.NewReader(skipCorpus[0].data), FormatJSONL, Mapping{})
	s := r.(Skipper)
	if err := s.Skip(1); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Next(); got.Index != 1 || got.Line != 3 || got.Err == nil {
		t.Errorf("Next after Skip(1) = %+v", got)
	}
	if err := s.Skip(2); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Next(); got.Index != 4 || got.Line != 8 || got.ID != "e" {
		t.Errorf("Next after Skip(2) = %+v", got)
	}
	if err := s.Skip(-1); err == nil {
		t.Error("Skip(-1) succeeded")
	}

	// Inline.
	items := []json.RawMessage{json.RawMessage(`{"id":"a"}`), json.RawMessage(`1`), json.RawMessage(`{"id":"c"}`)}
	ir := Inline(items, Mapping{})
	if err := ir.(Skipper).Skip(2); err != nil {
		t.Fatal(err)
	}
	if got, _ := ir.Next(); got.Index != 2 || got.Line != 3 || got.ID != "c" {
		t.Errorf("inline Next after Skip(2) = %+v", got)
	}
	if err := ir.(Skipper).Skip(1); !errors.Is(err, io.EOF) {
		t.Errorf("inline Skip past the end = %v, want io.EOF", err)
	}
}

func TestSkipFatal(t *testing.T) {
	// A syntax error met while skipping is fatal, as it is for Next.
	r, _ := NewReader(strings.NewReader(`[{"id":1}, {"id" 2}, {}]`), FormatJSON, Mapping{})
	err := r.(Skipper).Skip(3)
	want := `element 2: invalid JSON at byte 17: invalid character '2' after object key`
	if err == nil || err.Error() != want {
		t.Fatalf("Skip = %v, want %s", err, want)
	}
	if _, err2 := r.Next(); err2 == nil || err2.Error() != want {
		t.Errorf("Next after a fatal Skip = %v", err2)
	}
	r, _ = NewReader(strings.NewReader("id,id\n1,2\n"), FormatCSV, Mapping{})
	if err := r.(Skipper).Skip(1); err == nil || !strings.Contains(err.Error(), "duplicate column") {
		t.Errorf("csv Skip = %v, want the header error", err)
	}
}

func TestCount(t *testing.T) {
	for _, c := range skipCorpus {
		n, err := Count(strings.NewReader(c.data), c.format)
		if n != 5 || err != nil {
			t.Errorf("%s: Count = %d, %v; want 5", c.name, n, err)
		}
	}
	// Fatal errors are Count's errors too.
	for _, c := range []struct {
		format Format
		data   string
	}{
		{FormatJSON, `{}`},
		{FormatJSON, `[{}, {]`},
		{FormatCSV, "a,a\n"},
	} {
		if _, err := Count(strings.NewReader(c.data), c.format); err == nil {
			t.Errorf("Count(%s %q) succeeded", c.format, c.data)
		}
	}
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDecompress(t *testing.T) {
	text := "{\"id\":\"a\"}\n{\"id\":\"b\"}\n"
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"gzip", gzipped(t, text), text},
		{"plain", []byte(text), text},
		{"empty", nil, ""},
		{"one byte", []byte{0x1f}, "\x1f"},
		{"empty gzip", gzipped(t, ""), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Decompress(bytes.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	// Through a reader.
	r, err := Decompress(bytes.NewReader(gzipped(t, text)))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Count(r, FormatJSONL); n != 2 || err != nil {
		t.Errorf("Count of gzipped jsonl = %d, %v", n, err)
	}
	// A corrupt stream is a fatal read error that names the line.
	bad := gzipped(t, text)
	bad = bad[:len(bad)-6]
	r, err = Decompress(bytes.NewReader(bad))
	if err != nil {
		t.Fatal(err)
	}
	rd, _ := NewReader(r, FormatJSONL, Mapping{})
	if _, err := readAll(t, rd); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated gzip: error %v, want io.ErrUnexpectedEOF", err)
	}
	// A gzip header that is not followed by gzip data.
	if _, err := Decompress(bytes.NewReader([]byte{0x1f, 0x8b, 0, 0})); err == nil {
		t.Error("Decompress of a broken gzip header succeeded")
	}
}

func TestFormatFromName(t *testing.T) {
	for name, want := range map[string]Format{
		"data.jsonl":                          FormatJSONL,
		"data.ndjson":                         FormatJSONL,
		"data.JSONL.GZ":                       FormatJSONL,
		"data.json":                           FormatJSON,
		"dir/data.json.gz":                    FormatJSON,
		"data.csv":                            FormatCSV,
		"data.csv.gz":                         FormatCSV,
		"data.txt":                            FormatJSONL,
		"data":                                FormatJSONL,
		"data.gz":                             FormatJSONL,
		"dir.csv/data":                        FormatJSONL,
		"run#2.csv":                           FormatCSV,
		"https://h/x.csv?sig=a.json":          FormatCSV,
		"https://h/x.json.gz?download=1#frag": FormatJSON,
		"https://h/x.json#part.csv":           FormatJSON,
		"s3://bucket/path/eval.jsonl":         FormatJSONL,
	} {
		if got := FormatFromName(name); got != want {
			t.Errorf("FormatFromName(%q) = %q, want %q", name, got, want)
		}
	}
}

// lineSource writes n generated jsonl records into an io.Pipe, so the test
// data itself never sits in memory.
func lineSource(n int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		pad := strings.Repeat("p", 200)
		var b []byte
		for i := range n {
			b = fmt.Appendf(b[:0], `{"id":%d,"input":"question %d %s","expected":"%d"}`+"\n", i, i, pad, i)
			if _, err := pw.Write(b); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

func TestStreamingMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 200k records")
	}
	// 200k records of ~250 bytes are ~50 MB of data: if samples or buffers
	// accumulated, the heap would grow far beyond the bound.
	const n = 200_000
	const bound = 16 << 20
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	base := heap()
	r, _ := NewReader(lineSource(n), FormatJSONL, Mapping{})
	var peak uint64
	for i := 0; ; i++ {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			if i != n {
				t.Fatalf("read %d records, want %d", i, n)
			}
			break
		}
		if err != nil || s.Err != nil || s.Index != i {
			t.Fatalf("record %d: %+v %v", i, s, err)
		}
		if i%20_000 == 0 {
			peak = max(peak, heap())
		}
	}
	if peak > base+bound {
		t.Errorf("heap in use grew from %d to %d bytes while streaming", base, peak)
	}
	t.Logf("heap in use: %d KiB at start, %d KiB at peak", base>>10, peak>>10)
}

// repeatReader yields the same line forever.
type repeatReader struct {
	line []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.line[r.off:])
		n += c
		r.off = (r.off + c) % len(r.line)
	}
	return n, nil
}

// BenchmarkJSONL measures decoding and mapping of small jsonl records: one
// op is one record.
func BenchmarkJSONL(b *testing.B) {
	line := []byte(`{"id":"sample-000123","input":"What is the capital of France?","expected":"Paris","category":"geography","difficulty":2}` + "\n")
	r, _ := NewReader(&repeatReader{line: line}, FormatJSONL, Mapping{})
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		s, err := r.Next()
		if err != nil || s.Err != nil {
			b.Fatal(err, s.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkCountJSONL measures counting, which reads lines without decoding.
func BenchmarkCountJSONL(b *testing.B) {
	line := []byte(`{"id":"sample-000123","input":"What is the capital of France?","expected":"Paris","category":"geography","difficulty":2}` + "\n")
	data := bytes.Repeat(line, 100_000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if n, err := Count(bytes.NewReader(data), FormatJSONL); n != 100_000 || err != nil {
			b.Fatal(n, err)
		}
	}
}
