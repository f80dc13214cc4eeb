package dataset

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
)

// csvReader reads a csv file whose first record is the header. Each following
// record maps header → string value.
//
// A record encoding/csv cannot parse is a malformed sample and reading goes on
// with what csv.Reader returns next. For a bare quote in an unquoted field
// (`a,b"c,d`) that is the next line: the rest of the bad line is dropped. For
// a quoted field whose closing quote is missing, csv.Reader reads on to the
// end of the data looking for it, so the records after it are lost to that one
// error (the usual outcome for csv; LazyQuotes would hide the problem instead).
type csvReader struct {
	br      *bufio.Reader
	cr      *csv.Reader
	m       Mapping
	header  []string
	started bool
	index   int
	err     error // sticky fatal error, or io.EOF
}

func newCSVReader(r io.Reader, m Mapping) *csvReader {
	return &csvReader{br: bufio.NewReaderSize(r, readBufSize), m: m}
}

// start reads and checks the header.
func (r *csvReader) start() error {
	r.started = true
	if _, err := skipBOM(r.br); err != nil {
		return err
	}
	r.cr = csv.NewReader(r.br)
	r.cr.FieldsPerRecord = -1 // field counts are checked per record, as a per-sample error
	r.cr.ReuseRecord = true   // values are copied into each sample's Fields anyway
	rec, err := r.cr.Read()
	if err == io.EOF {
		return io.EOF // no header, no records: an empty dataset
	}
	if err != nil {
		return fmt.Errorf("csv header: %w", err)
	}
	r.header = make([]string, len(rec))
	seen := make(map[string]int, len(rec))
	for i, name := range rec {
		name = strings.TrimSpace(name)
		if name == "" {
			return fmt.Errorf("csv header: column %d has an empty name", i+1)
		}
		if j, dup := seen[name]; dup {
			return fmt.Errorf("csv header: duplicate column name %q (columns %d and %d)", name, j+1, i+1)
		}
		seen[name] = i
		r.header[i] = name
	}
	return nil
}

// read returns the next record, or for a record csv could not parse, its
// starting line and a per-sample error.
func (r *csvReader) read() (rec []string, line int, recErr, err error) {
	if r.err != nil {
		return nil, 0, nil, r.err
	}
	if !r.started {
		if err := r.start(); err != nil {
			r.err = err
			return nil, 0, nil, err
		}
	}
	rec, err = r.cr.Read()
	var pe *csv.ParseError
	switch {
	case errors.As(err, &pe):
		return nil, pe.StartLine, parseError(pe), nil
	case err != nil:
		r.err = err
		return nil, 0, nil, err
	}
	line, _ = r.cr.FieldPos(0)
	if len(rec) != len(r.header) {
		return nil, line, fmt.Errorf("has %d fields, header has %d", len(rec), len(r.header)), nil
	}
	return rec, line, nil, nil
}

// parseError rewords a csv.ParseError to follow "line N: ", which already
// says where the record starts.
func parseError(pe *csv.ParseError) error {
	if pe.Line == pe.StartLine {
		return fmt.Errorf("invalid CSV at column %d: %w", pe.Column, pe.Err)
	}
	return fmt.Errorf("invalid CSV at line %d, column %d: %w", pe.Line, pe.Column, pe.Err)
}

func (r *csvReader) Next() (Sample, error) {
	rec, line, recErr, err := r.read()
	if err != nil {
		return Sample{}, err
	}
	i := r.index
	r.index++
	if recErr != nil {
		return malformed(i, line, "line", recErr), nil
	}
	fields := make(map[string]any, len(rec))
	for j, name := range r.header {
		fields[name] = rec[j]
	}
	return r.m.sample(fields, i, line, "line"), nil
}

func (r *csvReader) Skip(n int) error { return skipN(r, n) }

func (r *csvReader) skipRecord() error {
	if _, _, _, err := r.read(); err != nil {
		return err
	}
	r.index++
	return nil
}
