package dataset

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// csvReader reads a csv file whose first record is the header. Each following
// record maps header → string value.
//
// A record encoding/csv cannot parse is a malformed sample and reading goes on
// with what csv.Reader returns next. For a bare quote in an unquoted field
// (`a,b"c,d`) that is the next line: the rest of the bad line is dropped.
//
// A quote that opens a field and is not closed where the writer meant is
// different: csv reads on, line after line, looking for the closing quote, and
// every record on the way becomes part of one field (or of one error). Those
// records would be lost without a word, so a quoted field that swallowed lines
// is a fatal error naming the line where it opened (see swallowed). Fatal, the
// dataset is refused when it is counted, before any model is called.
type csvReader struct {
	br      *bufio.Reader
	budget  *budgetReader // under br: bounds the bytes one record may take
	line    int           // where the last record read started
	cr      *csv.Reader
	m       Mapping
	header  []string
	started bool
	index   int
	err     error // sticky fatal error, or io.EOF
}

func newCSVReader(r io.Reader, m Mapping) *csvReader {
	b := &budgetReader{r: r}
	return &csvReader{br: bufio.NewReaderSize(b, readBufSize), budget: b, m: m}
}

// budgetReader fails once more than maxRecordBytes have been read since its
// last reset: encoding/csv keeps a record whole however long it is (a quoted
// field may run to the end of the data), and data from elsewhere must not cost
// unbounded memory. Counted below the read buffer, so a record may be up to a
// buffer longer before this trips.
type budgetReader struct {
	r    io.Reader
	read int
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.read > maxRecordBytes {
		return 0, ErrRecordTooLarge
	}
	n, err := b.r.Read(p)
	b.read += n
	return n, err
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
	r.budget.read = r.br.Buffered() // what is buffered is part of this record, or after it
	rec, err = r.cr.Read()
	var pe *csv.ParseError
	switch {
	case errors.Is(err, ErrRecordTooLarge):
		// No telling where the next record starts: refuse the data.
		r.err = fmt.Errorf("the record after line %d: %w", max(r.line, 1), err)
		return nil, 0, nil, r.err
	case errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrQuote) && pe.Line > pe.StartLine:
		r.err = r.unclosedQuote(pe)
		return nil, 0, nil, r.err
	case errors.As(err, &pe):
		r.line = pe.StartLine
		return nil, pe.StartLine, parseError(pe), nil
	case err != nil:
		r.err = err
		return nil, 0, nil, err
	}
	line, _ = r.cr.FieldPos(0)
	r.line = line
	if err := r.swallowed(rec); err != nil {
		r.err = err
		return nil, 0, nil, err
	}
	if len(rec) != len(r.header) {
		return nil, line, fmt.Errorf("has %d fields, header has %d", len(rec), len(r.header)), nil
	}
	return rec, line, nil, nil
}

// quoteAdvice ends the errors about quotes that swallowed lines.
const quoteAdvice = `close the quote, or write a quote inside a quoted field as ""`

// unclosedQuote is the fatal error of a quoted field that csv read past its
// line and then found malformed: either it never closed (the data ended inside
// it) or it closed and went on with text, which a closing quote never does. We
// cannot tell where the records were meant to be, so the data is refused.
func (r *csvReader) unclosedQuote(pe *csv.ParseError) error {
	if _, err := r.br.Peek(1); err == io.EOF {
		return fmt.Errorf("line %d: a quoted field in this record is never closed: lines %d to %d (the end of the data) would be read as one field; %s",
			pe.StartLine, pe.StartLine, pe.Line, quoteAdvice)
	}
	return fmt.Errorf("line %d: a quoted field in this record does not close until line %d: lines %d to %d would be read as one field; %s",
		pe.StartLine, pe.Line, pe.StartLine, pe.Line, quoteAdvice)
}

// swallowed reports a record that parsed, but only because a stray quote made
// one field of several lines that look like records of their own. Quoted
// multi-line text is normal in csv, so the test is strict: the text after the
// quote on its first line holds exactly the fields that were left of that
// record (at least two, so the field is not the last column), and every whole
// line inside the field has exactly the header's number of fields, as a record
// would. A stray quote in the last column that happens to close cleanly further
// down cannot be told apart from multi-line text, and is not refused.
func (r *csvReader) swallowed(rec []string) error {
	n := len(r.header)
	if n < 2 {
		return nil
	}
	for j, v := range rec {
		// In the last column the signature is too weak: its first line would
		// hold the one field left, which any text does, and multi-line text
		// (code, say) is often put last.
		if j >= n-1 {
			continue
		}
		parts := strings.Split(v, "\n")
		if len(parts) < 3 || csvFieldCount(parts[0]) != n-j {
			continue
		}
		inner := parts[1 : len(parts)-1]
		looksLikeRecords := true
		for _, l := range inner {
			if csvFieldCount(l) != n {
				looksLikeRecords = false
				break
			}
		}
		if !looksLikeRecords {
			continue
		}
		line, col := r.cr.FieldPos(j)
		last := line + len(parts) - 1
		lines := fmt.Sprintf("line %d", line+1)
		if len(inner) > 1 {
			lines = fmt.Sprintf("lines %d to %d", line+1, last-1)
		}
		return fmt.Errorf("line %d: the quoted field at column %d does not close until line %d, so %s would be read as part of it, not as a record; %s",
			line, col, last, lines, quoteAdvice)
	}
	return nil
}

// csvFieldCount is the number of fields a line of csv holds, read leniently.
func csvFieldCount(line string) int {
	cr := csv.NewReader(strings.NewReader(line))
	cr.LazyQuotes = true
	cr.FieldsPerRecord = -1
	rec, err := cr.Read()
	if err != nil {
		return 0
	}
	return len(rec)
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
	valid := true
	for j, name := range r.header {
		fields[name] = rec[j]
		valid = valid && utf8.ValidString(rec[j])
	}
	s := r.m.sample(fields, i, line, "line")
	s.InvalidUTF8 = !valid
	return s, nil
}

func (r *csvReader) Skip(n int) error { return skipN(r, n) }

func (r *csvReader) skipRecord() error {
	if _, _, _, err := r.read(); err != nil {
		return err
	}
	r.index++
	return nil
}
