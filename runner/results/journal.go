package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/proctor-dev/proctor/runner/spend"
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

// ErrMismatch is returned when a journal was written by a different evaluation.
var ErrMismatch = errors.New("checkpoint belongs to a different evaluation")

// Journal is the crash-safe checkpoint of one model on one dataset: finished records
// are appended in the order they complete and written to the file promptly, so
// after a crash (even kill -9) every record that reached the file is kept and its
// sample is not run again. A torn last line is cut off when the journal is reopened.
type Journal struct {
	path string

	f *os.File
	// wmu orders the writes of the flusher, Sync and Close.
	wmu sync.Mutex

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
	// spent is what the records read at opening cost.
	spent spend.Totals
	// awaiting holds the records whose judging waits for a judge's batch
	// (Record.JudgePending): done, until a later record replaces them.
	awaiting map[int]*Record

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
		if len(b) == 0 || (errors.Is(err, io.EOF) && b[len(b)-1] != '\n') {
			// End of file, or a line the crash cut short: resume before it.
			return off, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
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
		l, err := ParseLine(b)
		if err != nil {
			continue // a corrupt line mid-file: skip it, the sample runs again
		}
		i, rec := l.Index, l.Record
		var r spentFields
		if json.Unmarshal(rec, &r) != nil || i >= len(j.done) {
			continue
		}
		if prev := j.awaiting[i]; prev != nil {
			// It replaces a record that awaited judging, whose calls it
			// carries again: not done until this one says.
			j.spent = j.spent.Sub(Spent(prev))
			delete(j.awaiting, i)
			j.done[i] = false
			j.nDone--
		}
		// Every record was paid for, also one run again since (an error
		// retried, a scoring failure scored again).
		j.spent = j.spent.Add(r.spent())
		if j.done[i] {
			continue
		}
		if len(r.JudgePending) > 0 {
			var full Record
			if json.Unmarshal(rec, &full) == nil {
				j.await(i, &full)
				j.done[i] = true
				j.nDone++
			}
			continue
		}
		failed := r.Error != ""
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

// spentFields are what a stored record says of its outcome and its cost.
type spentFields struct {
	Error        string   `json:"error"`
	JudgePending []string `json:"judgePending"`
	In           int64    `json:"inputTokens"`
	Out          int64    `json:"outputTokens"`
	JudgeIn      int64    `json:"judgeInputTokens"`
	JudgeOut     int64    `json:"judgeOutputTokens"`
	Cost         *float64 `json:"cost"`
	JudgeCost    *float64 `json:"judgeCost"`
}

func (r *spentFields) spent() spend.Totals {
	return spent(r.In+r.Out+r.JudgeIn+r.JudgeOut, r.Cost, r.JudgeCost)
}

// Spent is what a record's calls and its judging cost, and the tokens they
// used (an unknown cost counts 0).
func Spent(r *Record) spend.Totals {
	return spent(r.InputTokens+r.OutputTokens+r.JudgeInputTokens+r.JudgeOutputTokens, r.Cost, r.JudgeCost)
}

func spent(tokens int64, cost, judgeCost *float64) spend.Totals {
	t := spend.Totals{Tokens: tokens}
	if cost != nil {
		t.Cost += spend.FromDollars(*cost)
	}
	if judgeCost != nil {
		t.Cost += spend.FromDollars(*judgeCost)
	}
	return t
}

// Spent is what the records the journal held when it was opened cost, and
// the tokens they used: a resumed run's spending so far.
func (j *Journal) Spent() spend.Totals {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.spent
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

func (j *Journal) await(i int, rec *Record) {
	if j.awaiting == nil {
		j.awaiting = map[int]*Record{}
	}
	c := *rec
	j.awaiting[i] = &c
}

// Awaiting returns the records whose judging waits for a judge's batch
// (Record.JudgePending), by sample position.
func (j *Journal) Awaiting() map[int]*Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[int]*Record, len(j.awaiting))
	for i, r := range j.awaiting {
		c := *r
		out[i] = &c
	}
	return out
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
	buf, err := AppendLine(nil, i, rec)
	if err != nil {
		return err
	}
	buf = append(buf, '\n')

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.werr != nil {
		return j.werr
	}
	j.pending = append(j.pending, buf...)
	if prev := j.awaiting[i]; prev != nil {
		// Judged: it replaces the record that awaited its verdicts.
		delete(j.awaiting, i)
		if rec.Error != "" {
			j.nErrors++
		}
	}
	if len(rec.JudgePending) > 0 {
		j.await(i, rec)
	}
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

// Sync writes what is pending now, before it returns.
func (j *Journal) Sync() error {
	j.write(nil)
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.werr
}

// write writes what is pending, returning the emptied buffer for reuse.
// Writers take turns (wmu), so lines reach the file in the order appended.
func (j *Journal) write(spare []byte) []byte {
	j.wmu.Lock()
	defer j.wmu.Unlock()
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

// Assemble writes the records of the journal at path for samples below total,
// one per sample (the last written: Collector) in sample order, to w, and counts
// them in agg.
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
	latest := NewCollector[span](0, total)
	r := bufio.NewReaderSize(f, 256<<10)
	var off int64
	first := true
	for {
		b, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
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
			if l, err := ParseLine(b); err == nil {
				latest.Add(l.Index, span{off: off, n: int32(n)})
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
	err = latest.Each(func(_ int, s span) error {
		b, err := br.get(s.off, int(s.n))
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		l, ok := parseFast(bytes.TrimSuffix(b, []byte{'\n'}))
		if !ok {
			// Not as AppendLine writes it, but whole: ParseLine read it in the first pass.
			if l, err = ParseLine(b); err != nil {
				return fmt.Errorf("checkpoint %s: line at offset %d changed while reading", path, s.off)
			}
		}
		if _, err := Emit(l.Record, agg, bw); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return err
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
