package dataset

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// maxKeptLine bounds the line buffer kept between lines: a buffer grown for one
// huge record is dropped afterwards rather than pinned for the rest of the file.
const maxKeptLine = 1 << 20

// lineReader splits data into lines of any length. Lines that fit the bufio
// buffer are returned in place; longer ones are assembled in a reused buffer,
// up to maxRecordBytes: a longer line is read past, not kept (tooLong).
type lineReader struct {
	br      *bufio.Reader
	long    []byte
	line    int // lines read so far, blank ones included
	started bool
	// tooLong says the line just returned was longer than maxRecordBytes; its
	// content is not returned.
	tooLong bool
}

// next returns the next non-blank line without its line ending, and its 1-based
// line number. The line is valid until the next call. With keep false the
// content is not returned (nor copied), only located, which is all Skip needs.
func (lr *lineReader) next(keep bool) ([]byte, int, error) {
	if !lr.started {
		lr.started = true
		if _, err := skipBOM(lr.br); err != nil {
			return nil, 0, fmt.Errorf("reading line 1: %w", err)
		}
	}
	if cap(lr.long) > maxKeptLine {
		lr.long = nil
	}
	for {
		line, blank, err := lr.readLine(keep)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("reading line %d: %w", lr.line+1, err)
			}
			return nil, 0, err
		}
		lr.line++
		if !blank {
			return line, lr.line, nil
		}
	}
}

// readLine reads one line, blank or not. It returns io.EOF only when no bytes
// are left; a last line without a newline is a line.
func (lr *lineReader) readLine(keep bool) (line []byte, blank bool, err error) {
	lr.tooLong = false
	frag, err := lr.br.ReadSlice('\n')
	switch {
	case err == nil || (err == io.EOF && len(frag) > 0):
		line = trimEOL(frag)
		return line, isBlank(line), nil
	case !errors.Is(err, bufio.ErrBufferFull):
		return nil, false, err
	}
	// The line is longer than the buffer: gather it, or only watch it go by.
	// Past maxRecordBytes it is only watched too: data from elsewhere must not
	// make one record cost unbounded memory.
	blank = true
	if keep {
		lr.long = append(lr.long[:0], frag...)
	} else {
		blank = isBlank(frag)
	}
	for errors.Is(err, bufio.ErrBufferFull) {
		frag, err = lr.br.ReadSlice('\n')
		if keep && !lr.tooLong && len(lr.long)+len(frag) > maxRecordBytes {
			lr.tooLong, blank = true, isBlank(lr.long)
			lr.long = lr.long[:0]
		}
		if keep && !lr.tooLong {
			lr.long = append(lr.long, frag...)
		} else if blank {
			blank = isBlank(frag)
		}
	}
	if err != nil && err != io.EOF {
		return nil, false, err
	}
	if keep && !lr.tooLong {
		line = trimEOL(lr.long)
		return line, isBlank(line), nil
	}
	return nil, blank, nil
}

// trimEOL removes a trailing "\n" or "\r\n".
func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// jsonlReader reads one JSON object per line. A malformed line is a sample
// with Err set; only a read error stops it.
type jsonlReader struct {
	lines lineReader
	m     Mapping
	dec   valueDecoder
	index int
	err   error // sticky fatal error, or io.EOF
}

func newJSONLReader(r io.Reader, m Mapping) *jsonlReader {
	return &jsonlReader{lines: lineReader{br: bufio.NewReaderSize(r, readBufSize)}, m: m}
}

func (r *jsonlReader) Next() (Sample, error) {
	if r.err != nil {
		return Sample{}, r.err
	}
	line, n, err := r.lines.next(true)
	if err != nil {
		r.err = err
		return Sample{}, err
	}
	i := r.index
	r.index++
	if r.lines.tooLong {
		return malformed(i, n, "line", ErrRecordTooLarge), nil
	}
	rec, err := r.dec.decodeObject(line)
	if err != nil {
		return malformed(i, n, "line", err), nil
	}
	s := r.m.sample(rec, i, n, "line")
	s.InvalidUTF8 = !utf8.Valid(line)
	return s, nil
}

func (r *jsonlReader) Skip(n int) error { return skipN(r, n) }

func (r *jsonlReader) skipRecord() error {
	if r.err != nil {
		return r.err
	}
	if _, _, err := r.lines.next(false); err != nil {
		r.err = err
		return err
	}
	r.index++
	return nil
}
