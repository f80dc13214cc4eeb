package dataset

import (
	"encoding/json"
	"io"
)

// inlineReader reads samples given in the eval file itself.
type inlineReader struct {
	items []json.RawMessage
	m     Mapping
	dec   valueDecoder
	next  int
}

func (r *inlineReader) Next() (Sample, error) {
	if r.next >= len(r.items) {
		return Sample{}, io.EOF
	}
	i := r.next
	r.next++
	rec, err := r.dec.decodeObject(r.items[i])
	if err != nil {
		return malformed(i, i+1, "item", err), nil
	}
	return r.m.sample(rec, i, i+1, "item"), nil
}

func (r *inlineReader) Skip(n int) error { return skipN(r, n) }

func (r *inlineReader) skipRecord() error {
	if r.next >= len(r.items) {
		return io.EOF
	}
	r.next++
	return nil
}
