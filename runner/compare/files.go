package compare

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/proctor-dev/proctor/runner/results"
)

// Summary is summary.json: the run's summaries, and its comparison with the
// baseline and its gate's verdict when it has them.
type Summary struct {
	Results    []results.Summary `json:"results"`
	Comparison *Report           `json:"comparison,omitempty"`
	Gate       *Verdict          `json:"gate,omitempty"`
}

// ReadRecords reads records, one JSON object per line (results.jsonl), and
// calls fn with each. A line that is not a record is an error naming it.
func ReadRecords(r io.Reader, fn func(*results.Record)) error {
	return results.EachRecordLine(r, func(n int, line []byte) error {
		var rec results.Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		fn(&rec)
		return nil
	})
}

// ReadDir reads the records of a results directory (its results.jsonl), or of
// a results.jsonl file itself.
func ReadDir(path string, fn func(*results.Record)) error {
	return openDir(path, func(f *os.File) error { return ReadRecords(f, fn) })
}

// EachLine calls fn with each line of a results directory's results.jsonl
// (or of a results.jsonl file itself), undecoded; fn keeps no reference to
// it.
func EachLine(path string, fn func(line []byte) error) error {
	return openDir(path, func(f *os.File) error {
		return results.EachRecordLine(f, func(_ int, line []byte) error { return fn(line) })
	})
}

func openDir(path string, read func(*os.File) error) error {
	file := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		file = filepath.Join(path, results.ResultsFile)
	}
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: no results there (a directory proctor run wrote, with its %s)", path, results.ResultsFile)
		}
		return err
	}
	defer f.Close()
	if err := read(f); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// ReadSummary reads a results directory's summary.json.
func ReadSummary(dir string) (*Summary, error) {
	b, err := os.ReadFile(filepath.Join(dir, results.SummaryFile))
	if err != nil {
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, results.SummaryFile), err)
	}
	return &s, nil
}
