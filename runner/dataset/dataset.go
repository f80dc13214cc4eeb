// Package dataset streams evaluation samples from JSONL, JSON-array and CSV data.
// Nothing here holds a whole dataset in memory: readers decode one record at a time,
// so a million-line file costs what its largest record costs.
//
// Errors come in two kinds. A record that is malformed (bad JSON, a wrong csv
// field count, an unknown message role) becomes a Sample whose Err is a
// *RecordError, and reading goes on. An error returned by Next is fatal: the
// data cannot be read past it (an I/O error, a json syntax error, a bad csv
// header).
package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Format is how a dataset is encoded.
type Format string

// The supported formats. Each may start with a UTF-8 byte order mark.
//   - FormatJSONL: one JSON object per line; blank lines are ignored and lines may end in CRLF.
//   - FormatJSON: one top-level JSON array of objects.
//   - FormatCSV: RFC 4180 CSV whose first record is a header naming the columns.
const (
	FormatJSONL Format = "jsonl"
	FormatJSON  Format = "json"
	FormatCSV   Format = "csv"
)

// Mapping names the record fields that hold each part of a sample.
// Empty names take the defaults of DefaultMapping.
type Mapping struct {
	ID       string
	Input    string
	Expected string
	Messages string
	Tools    string
}

// DefaultMapping is the column mapping used when a dataset declares none.
var DefaultMapping = Mapping{ID: "id", Input: "input", Expected: "expected", Messages: "messages", Tools: "tools"}

// Sample is one record of a dataset.
type Sample struct {
	// Index is the record's 0-based position in the dataset. Positions count
	// records, malformed ones included, so they are stable across runs and are
	// what checkpoints key on.
	Index int
	// Line is where the record starts: the 1-based line for jsonl and csv
	// (the csv header is line 1, blank jsonl lines count), the 1-based element
	// number for json arrays, the 1-based item number for Inline.
	Line int
	// ID is the mapped id field as text, or the 1-based position when the record has none.
	ID string
	// Fields is the record as read (nil when it could not be read). JSON numbers
	// are json.Number; csv values are strings.
	Fields map[string]any
	// Input is the mapped input field as text: strings as they are, absent or
	// null as "", other JSON values encoded as compact JSON.
	Input string
	// Expected is the mapped expected field as decoded (nil when absent).
	Expected any
	// HasExpected tells an absent expected field from an explicit null. In csv
	// a column is never absent: an empty cell is the expected value "".
	HasExpected bool
	// Messages and Tools are set when the record carries a chat conversation and
	// tool definitions (OpenAI-style messages; OpenAI, flat or Anthropic tools).
	// A field holding a string is parsed as JSON, which is how csv carries them.
	Messages []provider.Message
	Tools    []provider.Tool
	// InvalidUTF8 says the record held bytes that are not UTF-8: its text
	// has U+FFFD in their place, as a JSON request must (the run warns).
	InvalidUTF8 bool
	// Err is set when the record could not be read (malformed JSON, a bad messages field...).
	// Such a sample is reported as an errored result; the others still run.
	Err error
}

// Reader yields samples in order. Next returns io.EOF after the last one. Any other
// error from Next is fatal for the dataset (the data cannot be read past that point);
// a record that is merely malformed is returned as a Sample with Err set instead.
type Reader interface {
	Next() (Sample, error)
}

// Skipper is implemented by every Reader of this package. Skip advances past the
// next n records as n calls of Next would, malformed records included, but
// without decoding their fields, so that a sharded run can start in the middle
// of a dataset cheaply. Index and Line of the samples that follow are the same
// as without the skip. Skip returns io.EOF when the data ends before n records
// were skipped; any other error is fatal, as from Next.
type Skipper interface {
	Skip(n int) error
}

// Errors the readers wrap; test for them with errors.Is.
var (
	// ErrUnknownFormat is returned for a Format other than the supported ones.
	ErrUnknownFormat = errors.New("unknown dataset format")
	// ErrNotArray is the fatal error of a json dataset whose top level is not an array.
	ErrNotArray = errors.New("not a JSON array")
	// ErrNotObject is the error of a record that is valid JSON but not an object.
	ErrNotObject = errors.New("not a JSON object")
)

// RecordError is the error of one malformed sample (Sample.Err). It says where
// the record is, in the reader's own unit, and which mapped field is at fault:
//
//	line 17: invalid JSON: invalid character 'x' looking for beginning of value
//	line 4: field "messages": message 2: unknown role "bot"
type RecordError struct {
	// Unit is "line" (jsonl and csv), "element" (json) or "item" (Inline).
	Unit string
	// N is the record's position in that unit; it equals Sample.Line.
	N int
	// Field is the dataset field at fault, or "" when the record itself could not be read.
	Field string
	Err   error
}

func (e *RecordError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s %d: field %q: %v", e.Unit, e.N, e.Field, e.Err)
	}
	return fmt.Sprintf("%s %d: %v", e.Unit, e.N, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// Validate reports whether format is one of the supported formats.
func Validate(format Format) error {
	switch format {
	case FormatJSONL, FormatJSON, FormatCSV:
		return nil
	}
	return fmt.Errorf("%w %q", ErrUnknownFormat, string(format))
}

// NewReader returns a Reader of the samples in r, mapped into Samples by m (empty
// fields of m take DefaultMapping's). The only error is an unknown format:
// NewReader reads nothing, so problems with the data (a json file that is not an
// array, a bad csv header) are reported by the first Next. The Reader buffers r;
// wrap r with Decompress first for data that may be gzipped.
//
// The returned Reader also implements Skipper. It is not safe for concurrent use.
func NewReader(r io.Reader, format Format, m Mapping) (Reader, error) {
	if err := Validate(format); err != nil {
		return nil, err
	}
	m = m.withDefaults()
	switch format {
	case FormatJSON:
		return newJSONReader(r, m), nil
	case FormatCSV:
		return newCSVReader(r, m), nil
	default:
		return newJSONLReader(r, m), nil
	}
}

// Inline returns a Reader of samples given inline (in the eval's YAML), each
// item a JSON object mapped by m as NewReader maps records. Line is the 1-based
// item number. The returned Reader also implements Skipper; the number of
// records is len(items).
func Inline(items []json.RawMessage, m Mapping) Reader {
	return &inlineReader{items: items, m: m.withDefaults()}
}

// Count returns the number of records in r, exactly as many as a Reader of the
// same data yields (malformed records included), without decoding them: jsonl
// counts non-blank lines, csv counts records after the header, json validates
// and counts the array's elements. An error is what Next would have failed with.
func Count(r io.Reader, format Format) (int, error) {
	rd, err := NewReader(r, format, Mapping{})
	if err != nil {
		return 0, err
	}
	s := rd.(recordSkipper)
	for n := 0; ; n++ {
		if err := s.skipRecord(); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
	}
}

// FormatFromName guesses a dataset's format from its file name or URL: by
// extension, ignoring a trailing ".gz" and a URL's query and fragment. .jsonl
// and .ndjson are jsonl, .json is json, .csv is csv; anything else is jsonl,
// the most common format for evaluation data.
func FormatFromName(name string) Format {
	if i := strings.IndexByte(name, '?'); i >= 0 {
		name = name[:i]
	}
	// A '#' may be part of a local file name, but in a URL it starts the fragment.
	if strings.Contains(name, "://") {
		if i := strings.IndexByte(name, '#'); i >= 0 {
			name = name[:i]
		}
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".gz")
	switch path.Ext(name) {
	case ".json":
		return FormatJSON
	case ".csv":
		return FormatCSV
	default: // .jsonl, .ndjson and anything unrecognised
		return FormatJSONL
	}
}
