package results

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// Line is one line of a record log: a sample's position in its dataset, the
// cache key of the request that answered it (when the cache was on) and its
// record. The local checkpoint journals and a cluster shard's ConfigMaps hold
// the same lines:
//
//	{"i":<position>,"r":<record>}
//	{"i":<position>,"k":"<cache key>","r":<record>}
//
// A local journal whose scoring changed marks the answers it is to score
// again (their records keep only the scores still valid) as unscored:
//
//	{"i":<position>,"u":true,"r":<record>}
type Line struct {
	Index    int             `json:"i"`
	Key      string          `json:"k,omitempty"`
	Unscored bool            `json:"u,omitempty"`
	Record   json.RawMessage `json:"r"`
}

const (
	linePrefix    = `{"i":`
	keyInfix      = `,"k":`
	unscoredInfix = `,"u":true`
	lineInfix     = `,"r":`
	lineSuffix    = `}`
)

// AppendLine appends the record log line of sample index's record to dst, with
// no newline. The record's CacheKey is its key.
func AppendLine(dst []byte, index int, rec *Record) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return dst, err
	}
	dst = append(dst, linePrefix...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	if rec.CacheKey != "" {
		k, err := json.Marshal(rec.CacheKey)
		if err != nil {
			return dst, err
		}
		dst = append(dst, keyInfix...)
		dst = append(dst, k...)
	}
	dst = append(dst, lineInfix...)
	dst = append(dst, b...)
	return append(dst, lineSuffix...), nil
}

// appendUnscoredLine is AppendLine for an answer to be scored again.
func appendUnscoredLine(dst []byte, index int, rec *Record) ([]byte, error) {
	start := len(dst)
	dst, err := AppendLine(dst, index, rec)
	if err != nil {
		return dst, err
	}
	// Before the record: after the key, where parseFast looks for it.
	at := start + bytes.Index(dst[start:], []byte(lineInfix))
	return slices.Insert(dst, at, []byte(unscoredInfix)...), nil
}

// errLine is a line that is not a record log line.
var errLine = errors.New("not a record line")

// ParseLine reads one record log line (a trailing newline is allowed). The
// record must be valid JSON; it is not decoded. Lines as AppendLine writes
// them take a fast path; any other JSON object with those fields is read too.
func ParseLine(b []byte) (Line, error) {
	b = bytes.TrimSuffix(b, []byte{'\n'})
	if l, ok := parseFast(b); ok {
		if !json.Valid(l.Record) {
			return Line{}, fmt.Errorf("%w: the record is not valid JSON", errLine)
		}
		return l, nil
	}
	var l Line
	if err := json.Unmarshal(b, &l); err != nil {
		return Line{}, fmt.Errorf("%w: %w", errLine, err)
	}
	if l.Index < 0 || len(l.Record) == 0 {
		return Line{}, fmt.Errorf("%w: no position or no record", errLine)
	}
	return l, nil
}

// parseFast splits a line written by AppendLine without decoding it.
func parseFast(b []byte) (Line, bool) {
	if !bytes.HasPrefix(b, []byte(linePrefix)) || !bytes.HasSuffix(b, []byte(lineSuffix)) {
		return Line{}, false
	}
	b = b[len(linePrefix) : len(b)-len(lineSuffix)]
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	i, err := strconv.Atoi(string(b[:n]))
	if n == 0 || err != nil {
		return Line{}, false
	}
	l := Line{Index: i}
	b = b[n:]
	if bytes.HasPrefix(b, []byte(keyInfix+`"`)) {
		// Keys are hashes: a key with an escape takes the slow path.
		rest := b[len(keyInfix)+1:]
		end := bytes.IndexByte(rest, '"')
		if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
			return Line{}, false
		}
		l.Key = string(rest[:end])
		b = rest[end+1:]
	}
	if bytes.HasPrefix(b, []byte(unscoredInfix)) {
		l.Unscored = true
		b = b[len(unscoredInfix):]
	}
	if !bytes.HasPrefix(b, []byte(lineInfix)) {
		return Line{}, false
	}
	l.Record = b[len(lineInfix):]
	return l, true
}

// GzipLines compresses lines, each followed by a newline; nil for none.
func GzipLines(lines [][]byte, level int) ([]byte, error) {
	if len(lines) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		return nil, err
	}
	for _, l := range lines {
		if _, err := w.Write(l); err != nil {
			return nil, err
		}
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// GunzipLines is the lines GzipLines compressed (empty lines dropped).
func GunzipLines(gz []byte) ([][]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, l := range bytes.Split(b, []byte{'\n'}) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out, nil
}

// MaxRecordLine bounds a line of results.jsonl (outputs are capped well below
// it).
const MaxRecordLine = 64 << 20

// EachRecordLine calls fn with each non-empty line of results.jsonl-style
// text (one record a line) and its number, from 1.
func EachRecordLine(r io.Reader, fn func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxRecordLine)
	n := 0
	for sc.Scan() {
		n++
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := fn(n, sc.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}
