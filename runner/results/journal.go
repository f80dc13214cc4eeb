package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
)

// journalVersion is written in every journal's header line.
const journalVersion = 1

// header is a journal's first line. Fingerprint identifies everything that decides
// a record (model, prompt, scoring, data), so records of an edited Evaluation are
// never mixed with new ones.
type header struct {
	Checkpoint  int    `json:"checkpoint"`
	Model       string `json:"model"`
	Dataset     string `json:"dataset"`
	Fingerprint string `json:"fingerprint"`
}

// A journal entry is one line, `{"i":<sample position>,"r":<record>}`, written by
// Append and split by splitLine without decoding the record.
const linePrefix, lineInfix, lineSuffix = `{"i":`, `,"r":`, "}\n"

// splitLine returns the position and the record of a whole journal line, checking
// that the record is valid JSON.
func splitLine(b []byte) (int, []byte, bool) {
	i, rec, ok := splitLineUnchecked(b)
	if !ok || !json.Valid(rec) {
		return 0, nil, false
	}
	return i, rec, true
}

// splitLineUnchecked is splitLine for a line already checked.
func splitLineUnchecked(b []byte) (int, []byte, bool) {
	if !bytes.HasPrefix(b, []byte(linePrefix)) || !bytes.HasSuffix(b, []byte(lineSuffix)) {
		return 0, nil, false
	}
	b = b[len(linePrefix) : len(b)-len(lineSuffix)]
	k := bytes.Index(b, []byte(lineInfix))
	if k <= 0 {
		return 0, nil, false
	}
	i, err := strconv.Atoi(string(b[:k]))
	if err != nil || i < 0 {
		return 0, nil, false
	}
	return i, b[k+len(lineInfix):], true
}

// ErrMismatch is returned when a journal was written by a different evaluation.
var ErrMismatch = errors.New("checkpoint belongs to a different evaluation")

// Journal is the crash-safe checkpoint of one model on one dataset: finished records
// are appended in the order they complete and written to the file promptly, so
// after a crash (even kill -9) every record that reached the file is kept and its
// sample is not run again. A torn last line is cut off when the journal is reopened.
type Journal struct {
	path string

	f *os.File

	mu sync.Mutex
	// pending holds appended lines not yet written. The flusher swaps it for an
	// empty buffer and writes outside the lock, so appends never wait for the disk.
	pending []byte
	werr    error
	done    []bool
	nDone   int
	nErrors int
	// rescore holds, with retryErrors, the records whose scoring failed after a
	// successful call: their samples are scored again, not called again.
	rescore map[int]*Record

	kick     chan struct{}
	flushed  chan struct{}
	closeOne sync.Once
}

// OpenJournal opens (creating) the journal at path for model and dataset, and loads
// what it holds for samples below total. With retryErrors, errored records do not
// count as done, so their samples run again (the newer record wins at assembly).
func OpenJournal(path, model, dataset, fingerprint string, total int, retryErrors bool) (*Journal, error) {
	j := &Journal{path: path, done: make([]bool, total), kick: make(chan struct{}, 1), flushed: make(chan struct{})}
	want := header{Checkpoint: journalVersion, Model: model, Dataset: dataset, Fingerprint: fingerprint}
	// O_APPEND: every write lands at the end, whatever else has the file open.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	end, err := j.load(f, want, retryErrors)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Truncate(end); err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	j.f = f
	if end == 0 {
		h, _ := json.Marshal(want)
		if _, err := f.Write(append(h, '\n')); err != nil {
			f.Close()
			return nil, fmt.Errorf("checkpoint %s: %w", path, err)
		}
	}
	go j.flusher()
	return j, nil
}

// load reads the journal, returning the offset where appending must resume (the
// end of the last whole line).
func (j *Journal) load(f *os.File, want header, retryErrors bool) (int64, error) {
	r := bufio.NewReaderSize(f, 64<<10)
	var off int64
	first := true
	for {
		b, err := r.ReadBytes('\n')
		if len(b) == 0 || (err == io.EOF && b[len(b)-1] != '\n') {
			// End of file, or a line the crash cut short: resume before it.
			return off, nil
		}
		if err != nil && err != io.EOF {
			return 0, fmt.Errorf("checkpoint %s: %w", j.path, err)
		}
		off += int64(len(b))
		if first {
			first = false
			var h header
			if json.Unmarshal(b, &h) != nil || h.Checkpoint != journalVersion {
				return 0, fmt.Errorf("%s is not a Proctor checkpoint: %w", j.path, ErrMismatch)
			}
			if h != want {
				return 0, fmt.Errorf("%s holds results of model %q on dataset %q from a different version of the evaluation "+
					"(the model, prompt, scoring or data changed): %w", j.path, h.Model, h.Dataset, ErrMismatch)
			}
			continue
		}
		i, rec, ok := splitLine(b)
		if !ok {
			continue // a corrupt line mid-file: skip it, the sample runs again
		}
		if i >= len(j.done) || j.done[i] {
			continue
		}
		failed := recordFailed(rec)
		if failed && retryErrors {
			var r Record
			if json.Unmarshal(rec, &r) == nil && r.ErrorKind == ErrorKindScoring {
				if j.rescore == nil {
					j.rescore = map[int]*Record{}
				}
				j.rescore[i] = &r
			}
			continue
		}
		j.done[i] = true
		j.nDone++
		if failed {
			j.nErrors++
		}
	}
}

// recordFailed reports whether a stored record carries an error.
func recordFailed(raw json.RawMessage) bool {
	var r struct {
		Error string `json:"error"`
	}
	return json.Unmarshal(raw, &r) == nil && r.Error != ""
}

// Answered returns, once, the earlier record of sample i whose call succeeded
// but whose scoring failed, when the journal was opened with retryErrors.
func (j *Journal) Answered(i int) *Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.rescore[i]
	delete(j.rescore, i)
	return r
}

// Done reports whether sample i already has a record.
func (j *Journal) Done(i int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return i < len(j.done) && j.done[i]
}

// Counts returns how many samples are done, and how many of those errored.
func (j *Journal) Counts() (done, errored int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.nDone, j.nErrors
}

// Append adds sample i's record. It is written to the file promptly by a background
// flusher, which batches records that arrive together.
func (j *Journal) Append(i int, rec *Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(b)+24)
	buf = append(buf, linePrefix...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, lineInfix...)
	buf = append(buf, b...)
	buf = append(buf, lineSuffix...)

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.werr != nil {
		return j.werr
	}
	j.pending = append(j.pending, buf...)
	if i < len(j.done) && !j.done[i] {
		j.done[i] = true
		j.nDone++
		if rec.Error != "" {
			j.nErrors++
		}
	}
	select {
	case j.kick <- struct{}{}:
	default:
	}
	return nil
}

func (j *Journal) flusher() {
	defer close(j.flushed)
	var spare []byte
	for range j.kick {
		spare = j.write(spare)
	}
}

// write writes what is pending, returning the emptied buffer for reuse.
func (j *Journal) write(spare []byte) []byte {
	j.mu.Lock()
	buf := j.pending
	j.pending = spare[:0]
	failed := j.werr != nil
	j.mu.Unlock()
	if len(buf) == 0 || failed {
		return buf
	}
	if _, err := j.f.Write(buf); err != nil {
		j.mu.Lock()
		j.werr = fmt.Errorf("checkpoint %s: %w", j.path, err)
		j.mu.Unlock()
	}
	return buf
}

// Close writes what is pending and closes the journal.
func (j *Journal) Close() error {
	j.closeOne.Do(func() { close(j.kick) })
	<-j.flushed
	j.write(nil)
	j.mu.Lock()
	defer j.mu.Unlock()
	return errors.Join(j.werr, j.f.Close())
}

// Assemble writes the records of the journal at path for samples below total, in
// sample order and one per sample (the latest, where a sample was run twice), to w,
// and returns their summary.
func Assemble(path string, w io.Writer, agg *Aggregate, total int) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()

	// First pass: where each sample's latest record is. Offsets and lengths only,
	// so a million samples cost a few megabytes.
	type span struct {
		off int64
		n   int32
	}
	spans := make([]span, total)
	r := bufio.NewReaderSize(f, 256<<10)
	var off int64
	first := true
	for {
		b, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A record longer than the buffer: gather it whole. b points into the
			// reader's buffer, which the next read reuses, so copy it first.
			head := append([]byte(nil), b...)
			rest, err2 := r.ReadBytes('\n')
			b, err = append(head, rest...), err2
		}
		if len(b) == 0 || b[len(b)-1] != '\n' {
			break
		}
		n := int64(len(b))
		if !first {
			if i, _, ok := splitLine(b); ok && i < total {
				spans[i] = span{off: off, n: int32(n)}
			}
		}
		first = false
		off += n
		if err != nil {
			break
		}
	}

	// Second pass, in sample order.
	bw := bufio.NewWriterSize(w, 256<<10)
	br := blockReader{f: f}
	for _, s := range spans {
		if s.n == 0 {
			continue
		}
		b, err := br.get(s.off, int(s.n))
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		_, raw, ok := splitLineUnchecked(b)
		if !ok {
			return fmt.Errorf("checkpoint %s: line at offset %d changed while reading", path, s.off)
		}
		var rec Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		agg.Add(&rec)
		bw.Write(raw)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// blockReader reads spans of a file through a block cache. Records are appended
// in completion order, which is sample order give or take the window of samples
// in flight, so reading in sample order mostly moves forward by short steps; a
// block starting a little before each miss serves the short steps back too.
type blockReader struct {
	f   *os.File
	off int64
	buf []byte
}

const (
	blockSize   = 1 << 20
	blockBehind = 64 << 10
)

func (r *blockReader) get(off int64, n int) ([]byte, error) {
	if off >= r.off && off+int64(n) <= r.off+int64(len(r.buf)) {
		return r.buf[off-r.off : off-r.off+int64(n)], nil
	}
	start := max(0, off-blockBehind)
	size := max(blockSize, int(off-start)+n)
	if cap(r.buf) < size {
		r.buf = make([]byte, size)
	}
	k, err := r.f.ReadAt(r.buf[:size], start)
	if k < int(off-start)+n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	r.off, r.buf = start, r.buf[:k]
	return r.buf[off-start : off-start+int64(n)], nil
}
