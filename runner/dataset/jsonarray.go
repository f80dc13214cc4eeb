package dataset

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// jsonReader reads the elements of a top-level JSON array one at a time.
//
// It finds each element's extent itself (valueScanner) and decodes the element
// with a json.Decoder of its own. That costs one extra pass over the bytes but
// gives exact byte offsets in syntax errors, which a Decoder over the whole
// stream does not report reliably, and lets Skip validate without decoding.
// A syntax error is fatal: once the structure is broken there is no telling
// where the next element starts.
type jsonReader struct {
	br    *bufio.Reader
	m     Mapping
	dec   valueDecoder
	scan  valueScanner
	off   int64 // bytes consumed from the data, BOM included
	state int
	index int
	elem  []byte // the current element, reused
	// tooLarge says the current element is longer than maxRecordBytes: it was
	// scanned past, not kept in elem.
	tooLarge bool
	err      error // sticky fatal error, or io.EOF
}

// States of jsonReader.
const (
	beforeArray = iota // nothing read yet
	firstElem          // after '[': an element or ']'
	afterElem          // after an element: ',' or ']'
)

func newJSONReader(r io.Reader, m Mapping) *jsonReader {
	return &jsonReader{br: bufio.NewReaderSize(r, readBufSize), m: m}
}

func (r *jsonReader) Next() (Sample, error) {
	if r.err != nil {
		return Sample{}, r.err
	}
	start, err := r.nextElement()
	if err != nil {
		r.err = err
		return Sample{}, err
	}
	i, n := r.index, r.index+1
	r.index++
	if r.tooLarge {
		return malformed(i, n, "element", ErrRecordTooLarge), nil
	}
	v, off, err := r.dec.decode(r.elem, "array element")
	if err != nil {
		r.err = r.syntaxError(n, start+int64(off), err)
		return Sample{}, r.err
	}
	rec, ok := v.(map[string]any)
	if !ok {
		return malformed(i, n, "element", ErrNotObject), nil
	}
	s := r.m.sample(rec, i, n, "element")
	s.InvalidUTF8 = !utf8.Valid(r.elem)
	return s, nil
}

func (r *jsonReader) Skip(n int) error { return skipN(r, n) }

func (r *jsonReader) skipRecord() error {
	if r.err != nil {
		return r.err
	}
	start, err := r.nextElement()
	if err == nil && !r.tooLarge && !json.Valid(r.elem) {
		// Decode only to learn what is wrong and where.
		_, off, derr := r.dec.decode(r.elem, "array element")
		err = r.syntaxError(r.index+1, start+int64(off), derr)
	}
	if err != nil {
		r.err = err
		return err
	}
	r.index++
	return nil
}

func (r *jsonReader) syntaxError(elem int, off int64, err error) error {
	return fmt.Errorf("element %d: invalid JSON at byte %d: %w", elem, off, err)
}

// nextElement moves past the separators to the next element and reads it into
// r.elem, returning its offset in the data. It returns io.EOF after the
// closing bracket.
func (r *jsonReader) nextElement() (int64, error) {
	n := r.index + 1 // the element being looked for, for messages
	if r.state == beforeArray {
		k, err := skipBOM(r.br)
		r.off += int64(k)
		if err != nil {
			return 0, err
		}
		c, err := r.skipSpace()
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%w: empty input", ErrNotArray)
		}
		if err != nil {
			return 0, err
		}
		if c != '[' {
			return 0, fmt.Errorf("%w: found %s at byte %d", ErrNotArray, quoteChar(c), r.off)
		}
		r.discard(1)
		r.state = firstElem
	}
	c, err := r.skipSpace()
	if err != nil {
		return 0, r.eofError(n, err)
	}
	switch {
	case c == ']':
		r.discard(1)
		return 0, r.checkEnd()
	case r.state == afterElem && c != ',':
		return 0, r.syntaxError(n, r.off, fmt.Errorf("invalid character %s after array element", quoteChar(c)))
	case r.state == afterElem:
		r.discard(1)
		if c, err = r.skipSpace(); err != nil {
			return 0, r.eofError(n, err)
		}
		if c == ']' { // a trailing comma
			return 0, r.syntaxError(n, r.off, fmt.Errorf("invalid character ']' looking for beginning of value"))
		}
	}
	start := r.off
	if err := r.readValue(); err != nil {
		return 0, r.eofError(n, err)
	}
	r.state = afterElem
	return start, nil
}

// eofError turns running out of data inside the array into a syntax error.
func (r *jsonReader) eofError(elem int, err error) error {
	if errors.Is(err, io.EOF) {
		return r.syntaxError(elem, r.off, errEndOfInput)
	}
	return err
}

// checkEnd makes sure only white space follows the array, so that, say, two
// concatenated arrays are not silently read as one.
func (r *jsonReader) checkEnd() error {
	c, err := r.skipSpace()
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case err != nil:
		return err
	default:
		return fmt.Errorf("invalid JSON at byte %d: invalid character %s after top-level array", r.off, quoteChar(c))
	}
}

// buffered returns the bytes buffered in r.br, filling the buffer when empty.
func (r *jsonReader) buffered() ([]byte, error) {
	if r.br.Buffered() == 0 {
		if _, err := r.br.Peek(1); err != nil {
			return nil, err
		}
	}
	return r.br.Peek(r.br.Buffered())
}

func (r *jsonReader) discard(n int) {
	_, _ = r.br.Discard(n) // never fails: n bytes are buffered
	r.off += int64(n)
}

// skipSpace discards JSON white space and returns the next byte, unread.
func (r *jsonReader) skipSpace() (byte, error) {
	for {
		buf, err := r.buffered()
		if err != nil {
			return 0, err
		}
		for i, c := range buf {
			if !isJSONSpace(c) {
				r.discard(i)
				return c, nil
			}
		}
		r.discard(len(buf))
	}
}

// readValue reads the value starting at the next byte into r.elem, or past it
// when it is longer than maxRecordBytes (tooLarge).
func (r *jsonReader) readValue() error {
	r.elem = r.elem[:0]
	if cap(r.elem) > maxKeptLine {
		r.elem = nil
	}
	r.tooLarge = false
	r.scan.reset()
	for {
		buf, err := r.buffered()
		if errors.Is(err, io.EOF) && r.scan.scalar {
			return nil // a number or literal may end the data (the array is then unclosed)
		}
		if err != nil {
			return err
		}
		n, done := r.scan.feed(buf)
		if r.scan.tooDeep {
			return r.syntaxError(r.index+1, r.off+int64(n)-1, errTooDeep)
		}
		if !r.tooLarge && len(r.elem)+n > maxRecordBytes {
			r.tooLarge, r.elem = true, nil
		}
		if !r.tooLarge {
			r.elem = append(r.elem, buf[:n]...)
		}
		r.discard(n)
		if done {
			return nil
		}
	}
}

// maxNesting is encoding/json's limit on nested objects and arrays.
const maxNesting = 10000

// errTooDeep is the error of a value nested deeper than maxNesting.
var errTooDeep = fmt.Errorf("exceeded max depth (objects and arrays nested more than %d levels)", maxNesting)

// valueScanner finds where a JSON value ends without parsing it: it tracks
// strings and bracket nesting only. The decoder validates the value afterwards;
// on malformed input the scanner just has to stop close to the fault, which is
// why a mismatched closing bracket ends the value.
type valueScanner struct {
	stack    []byte // expected closing brackets
	tooDeep  bool   // nested deeper than maxNesting: scanning stopped
	started  bool
	inString bool
	escaped  bool
	scalar   bool // a number or literal, which ends at the first delimiter
}

func (s *valueScanner) reset() {
	*s = valueScanner{stack: s.stack[:0]}
}

// feed scans buf and returns how many of its bytes belong to the value and
// whether the value ended within them.
func (s *valueScanner) feed(buf []byte) (int, bool) {
	for i, c := range buf {
		if !s.started {
			s.started = true
			switch c {
			case '{':
				s.stack = append(s.stack, '}')
			case '[':
				s.stack = append(s.stack, ']')
			case '"':
				s.inString = true
			default:
				s.scalar = true
			}
			continue
		}
		switch {
		case s.inString:
			switch {
			case s.escaped:
				s.escaped = false
			case c == '\\':
				s.escaped = true
			case c == '"':
				s.inString = false
				if len(s.stack) == 0 {
					return i + 1, true
				}
			}
		case s.scalar:
			switch c {
			case ' ', '\t', '\n', '\r', ',', ':', '"', '[', ']', '{', '}':
				return i, true
			}
		default:
			switch c {
			case '"':
				s.inString = true
			case '{', '[':
				if len(s.stack) >= maxNesting {
					// encoding/json refuses it anyway; stop before the stack
					// grows with the data.
					s.tooDeep = true
					return i + 1, true
				}
				s.stack = append(s.stack, c+2) // '{'+2 is '}', '['+2 is ']'
			case '}', ']':
				top := len(s.stack) - 1
				if c != s.stack[top] {
					return i + 1, true // mismatched: let the decoder say so
				}
				s.stack = s.stack[:top]
				if top == 0 {
					return i + 1, true
				}
			}
		}
	}
	return len(buf), false
}
