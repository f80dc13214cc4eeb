package dataset

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// readBufSize is the read buffer of every reader: large enough that typical
// records are decoded straight out of it without copying.
const readBufSize = 64 << 10

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// Decompress returns r's data, gunzipped if it is gzip data (recognised by its
// magic number, whatever the file is called) and unchanged otherwise. It only
// peeks at r, so nothing is lost when the data is not compressed.
func Decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, readBufSize)
	magic, err := br.Peek(2)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err // gzip's messages start with "gzip: "
		}
		return zr, nil
	}
	return br, nil
}

// skipBOM discards a UTF-8 byte order mark at the start of the data, which
// editors on Windows like to write and which no format here allows. It reports
// how many bytes it discarded.
func skipBOM(br *bufio.Reader) (int, error) {
	b, err := br.Peek(len(utf8BOM))
	if err != nil && err != io.EOF {
		return 0, err
	}
	if bytes.Equal(b, utf8BOM) {
		return br.Discard(len(utf8BOM))
	}
	return 0, nil
}

// isBlank reports whether b holds only ASCII white space. Count and the jsonl
// reader share it so that they agree on which lines are records.
func isBlank(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n', '\v', '\f':
		default:
			return false
		}
	}
	return true
}

// recordSkipper is what Skip and Count are built on: every reader can step over
// one record without decoding it, returning io.EOF at the end of the data.
type recordSkipper interface {
	skipRecord() error
}

// skipN implements Skipper.Skip for a recordSkipper.
func skipN(s recordSkipper, n int) error {
	if n < 0 {
		return fmt.Errorf("negative skip count %d", n)
	}
	for ; n > 0; n-- {
		if err := s.skipRecord(); err != nil {
			return err
		}
	}
	return nil
}

// malformed is the sample of a record that could not be read at all. Its id is
// its 1-based position, since the id field cannot be read.
func malformed(index, line int, unit string, err error) Sample {
	return Sample{
		Index: index,
		Line:  line,
		ID:    strconv.Itoa(index + 1),
		Err:   &RecordError{Unit: unit, N: line, Err: err},
	}
}

// maxRecordBytes caps one record (a jsonl line, a json array element, a csv
// record). Data may come from elsewhere (a url), and a line of gigabytes, or a
// gzip bomb that inflates into one, would otherwise be held whole in memory. A
// real sample is far smaller: models take a few MiB of text at most. A var for
// tests.
var maxRecordBytes = 64 << 20

// ErrRecordTooLarge is the error of a record longer than maxRecordBytes.
var ErrRecordTooLarge = fmt.Errorf("the record is larger than %d MiB, Proctor's cap on one record", maxRecordBytes>>20)

// errEndOfInput mirrors encoding/json's message for truncated input.
var errEndOfInput = errors.New("unexpected end of JSON input")
