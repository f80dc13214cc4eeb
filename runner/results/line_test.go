package results

import (
	"compress/gzip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLineRoundTrip(t *testing.T) {
	cases := []struct {
		name  string
		index int
		rec   Record
		want  string
	}{
		{"no key", 3, Record{ID: "q3", Output: "4"}, `{"i":3,"r":`},
		{"cache key", 12, Record{ID: "q12", CacheKey: "ab12"}, `{"i":12,"k":"ab12","r":`},
		{"odd key", 0, Record{ID: "q0", CacheKey: "a\"b\\c\x00"}, `{"i":0,"k":"a\"b\\c\u0000","r":`},
	}
	for _, tc := range cases {
		b, err := AppendLine(nil, tc.index, &tc.rec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !strings.HasPrefix(string(b), tc.want) {
			t.Errorf("%s: line %s, want it to start with %s", tc.name, b, tc.want)
		}
		l, err := ParseLine(append(b, '\n'))
		if err != nil {
			t.Fatalf("%s: ParseLine(%s): %v", tc.name, b, err)
		}
		if l.Index != tc.index || l.Key != tc.rec.CacheKey {
			t.Errorf("%s: parsed index %d key %q, want %d %q", tc.name, l.Index, l.Key, tc.index, tc.rec.CacheKey)
		}
		rec, err := Emit(l.Record, nil, nil)
		if err != nil || rec.ID != tc.rec.ID {
			t.Errorf("%s: record %+v, %v", tc.name, rec, err)
		}
	}
}

// TestParseLine: lines written by earlier versions (the journal's {"i","r"},
// the cluster's {"i","k","r"}) and any JSON object with those fields are read;
// anything else is an error.
func TestParseLine(t *testing.T) {
	good := map[string]Line{
		`{"i":7,"r":{"id":"a"}}`:               {Index: 7, Record: []byte(`{"id":"a"}`)},
		`{"i":7,"k":"f00","r":{"id":"a"}}`:     {Index: 7, Key: "f00", Record: []byte(`{"id":"a"}`)},
		`{ "r": {"id":"a"}, "i": 7 }`:          {Index: 7, Record: []byte(`{"id":"a"}`)},
		`{"i":7,"k":"f\u00f6","r":{"id":"a"}}`: {Index: 7, Key: "fö", Record: []byte(`{"id":"a"}`)},
	}
	for in, want := range good {
		got, err := ParseLine([]byte(in))
		if err != nil {
			t.Errorf("ParseLine(%s): %v", in, err)
			continue
		}
		got.Record = []byte(strings.TrimSpace(string(got.Record)))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ParseLine(%s) (-want +got):\n%s", in, diff)
		}
	}
	for _, in := range []string{
		``, `{"i":1,"r":`, `{"i":1,"r":{"id":}`, `{"i":-1,"r":{}}`, `{"i":"x","r":{}}`, `{"i":1}`, `[1,2]`, `{"i":1,"r":{}} trailing`,
	} {
		if l, err := ParseLine([]byte(in)); err == nil {
			t.Errorf("ParseLine(%q) = %+v, want an error", in, l)
		}
	}
}

func TestGzipLines(t *testing.T) {
	lines := [][]byte{[]byte(`{"i":1,"r":{}}`), []byte(`{"i":2,"r":{}}`)}
	gz, err := GzipLines(lines, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	got, err := GunzipLines(gz)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(lines, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if gz, err := GzipLines(nil, gzip.BestSpeed); gz != nil || err != nil {
		t.Errorf("no lines: %v, %v; want nothing", gz, err)
	}
}

// TestCollector: the record written last wins, records come back in sample
// order, and positions outside the range are refused.
func TestCollector(t *testing.T) {
	c := NewCollector[string](10, 5)
	for _, w := range []struct {
		index int
		pos   string
		ok    bool
	}{
		{12, "12 first", true}, {10, "10", true}, {12, "12 again", true}, {9, "before", false}, {15, "after", false}, {14, "14", true},
	} {
		if got := c.Add(w.index, w.pos); got != w.ok {
			t.Errorf("Add(%d) = %v, want %v", w.index, got, w.ok)
		}
	}
	var got []string
	if err := c.Each(func(i int, p string) error { got = append(got, p); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10", "12 again", "14"}, got); diff != "" {
		t.Errorf("Each (-want +got):\n%s", diff)
	}
}
