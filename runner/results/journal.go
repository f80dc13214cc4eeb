package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/proctor-dev/proctor/runner/spend"
)

// journalVersion is written in every journal's header line.
const journalVersion = 1

// header is a journal's first line. Fingerprint identifies everything that decides
// a record (model, prompt, scoring, data), so records of an edited Evaluation are
// never mixed with new ones; Parts fingerprint those one by one (journals
// written before they existed lack them).
type header struct {
	Checkpoint  int    `json:"checkpoint"`
	Model       string `json:"model"`
	Dataset     string `json:"dataset"`
	Fingerprint string `json:"fingerprint"`
	Parts       *Parts `json:"parts,omitempty"`
}

func pairHeader(p Pair) header {
	return header{Checkpoint: journalVersion, Model: p.Model, Dataset: p.Dataset, Fingerprint: p.Fingerprint, Parts: p.Parts}
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
	// rescore locates the records whose answers are to be scored again, not
	// called again: unscored ones (the scoring changed), and with
	// retryErrors those whose scoring failed.
	rescore map[int]span
	// rescoring says why answers are scored again, when they are, and
	// nUnscored how many are (unscored records).
	rescoring *Rescoring
	nUnscored int
	// spent is what the records read at opening cost.
	spent spend.Totals
	// awaiting holds the records whose judging waits for a judge's batch
	// (Record.JudgePending): done, until a later record replaces them.
	awaiting map[int]*Record

	kick     chan struct{}
	flushed  chan struct{}
	closeOne sync.Once
}

// span is where a line is in a journal.
type span struct {
	off int64
	n   int32
}

// OpenOptions say how a journal is opened.
type OpenOptions struct {
	// RetryErrors: errored records do not count as done, so their samples
	// run again (the newer record wins at assembly); a scoring failure is
	// scored again without calling its model.
	RetryErrors bool
	// Rescore scores again the answers the journal holds whose scorer
	// changed or failed, also when nothing changed (proctor score);
	// RescoreAll scores them all again, with every scorer.
	Rescore, RescoreAll bool
}

// OpenJournal opens (creating) the journal at path for a pair, and loads what
// it holds for samples below p.Total. A journal of the pair whose scoring
// alone changed (or every journal, with Rescore) keeps its answers, marked to
// be scored again (Rescoring says so); any other change is a *MismatchError.
func OpenJournal(path string, p Pair, opts OpenOptions) (*Journal, error) {
	j := &Journal{path: path, done: make([]bool, p.Total), kick: make(chan struct{}, 1), flushed: make(chan struct{})}
	want := pairHeader(p)
	keep, err := checkJournal(path, want, opts.Rescore || opts.RescoreAll, opts.RescoreAll)
	if err != nil {
		return nil, err
	}
	if keep != nil {
		if err := rewriteUnscored(path, want, keep.keep, p.Metrics); err != nil {
			return nil, fmt.Errorf("checkpoint %s: keeping its answers to score them again: %w", path, err)
		}
		j.rescoring = &Rescoring{Model: p.Model, Dataset: p.Dataset, Changed: keep.scoring}
	}
	// O_APPEND: every write lands at the end, whatever else has the file open.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	end, err := j.load(f, want, opts.RetryErrors)
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
	switch n := j.nUnscored; {
	case n == 0:
		j.rescoring = nil // nothing to score (a scorer removed, reordered)
	case j.rescoring == nil:
		// A re-scoring interrupted earlier resumes.
		j.rescoring = &Rescoring{Model: p.Model, Dataset: p.Dataset, Answers: n}
	default:
		j.rescoring.Answers = n
	}
	go j.flusher()
	return j, nil
}

// checkJournal compares the journal at path (if any) with want: nil when
// it is want's as it is; a change that keeps its answers (the scoring alone
// changed, or rescore: every scorer counts as changed); or a *MismatchError.
func checkJournal(path string, want header, rescore, all bool) (*partsChange, error) {
	h, records, err := readHeader(path, 1) // whether it has a record, not how many
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil || h == nil {
		return nil, err
	}
	if records == 0 {
		// Nothing to keep (a run stopped before its first record, perhaps
		// of another version of the evaluation): start over under want's
		// header.
		return nil, os.Truncate(path, 0)
	}
	return compareHeader(path, h, want, rescore, all)
}

// compareHeader is checkJournal's verdict on a journal with records whose
// header is h; it reads and changes nothing.
func compareHeader(path string, h *header, want header, rescore, all bool) (*partsChange, error) {
	if h.Model != want.Model || h.Dataset != want.Dataset {
		return nil, &MismatchError{Path: path, Model: h.Model, Dataset: h.Dataset}
	}
	same := h.Fingerprint == want.Fingerprint
	if same && !rescore {
		return nil, nil
	}
	var c partsChange
	switch {
	case h.Parts != nil && want.Parts != nil:
		c = compareParts(h.Model, h.Dataset, h.Parts, want.Parts)
		if len(c.answers) > 0 {
			return nil, &MismatchError{Path: path, Model: h.Model, Dataset: h.Dataset, Changed: c.answers, Scoring: c.scoring}
		}
	case same:
		// Written before checkpoints said which part is which: what
		// decides the answers is unchanged, and so is every scorer.
		c.keep = map[string]bool{}
		if want.Parts != nil {
			for name := range want.Parts.Scorers {
				c.keep[name] = true
			}
		}
	default:
		return nil, &MismatchError{Path: path, Model: h.Model, Dataset: h.Dataset}
	}
	if all {
		c.keep = map[string]bool{}
	}
	return &c, nil
}

// rewriteUnscored replaces the journal at path by one under want's header
// whose answers are to be scored again: each answered record keeps the
// scores of the scorers in keep (unchanged since) and is marked unscored
// unless those are all of metrics. Records without an answer (the call,
// the prompt or the data failed) stay, their scores made metrics' zeros.
// The new journal is renamed into place: a crash leaves the old or the new.
func rewriteUnscored(path string, want header, keep map[string]bool, metrics []string) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(path), ".rescore-*")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	w := bufio.NewWriterSize(out, 256<<10)
	h, _ := json.Marshal(want)
	_, _ = w.Write(append(h, '\n')) // a bufio.Writer's error sticks: Flush returns it
	r := bufio.NewReaderSize(in, 256<<10)
	first := true
	var buf []byte
	for {
		b, err := r.ReadBytes('\n')
		if len(b) == 0 || b[len(b)-1] != '\n' {
			break // the end, or a line a crash cut short
		}
		if err != nil {
			return err
		}
		if first {
			first = false
			continue
		}
		l, err := ParseLine(b)
		var rec Record
		if err != nil || json.Unmarshal(l.Record, &rec) != nil {
			continue // a corrupt line: its sample runs again
		}
		rec.CacheKey = l.Key
		if unscoredAnswer(&rec, keep, metrics) {
			buf, err = appendUnscoredLine(buf[:0], l.Index, &rec)
		} else {
			buf, err = AppendLine(buf[:0], l.Index, &rec)
		}
		if err != nil {
			return err
		}
		_, _ = w.Write(append(buf, '\n'))
	}
	if err := w.Flush(); err != nil {
		out.Close()
		return err
	}
	if err := errors.Join(out.Chmod(0o644), out.Sync(), out.Close()); err != nil {
		return err
	}
	return os.Rename(out.Name(), path)
}

// unscoredAnswer prepares rec to be scored again by the current scorers
// (metrics): it keeps the scores of unchanged scorers (keep) that did not
// fail, and reports whether any metric is left to score. A record without
// an answer only has its scores made the metrics' zeros.
func unscoredAnswer(rec *Record, keep map[string]bool, metrics []string) bool {
	if !rec.Answered() {
		scores := map[string]float64{}
		for _, m := range metrics {
			scores[m] = 0
		}
		rec.Scores = scores
		return false
	}
	rec.KeepScores(keep)
	for _, m := range metrics {
		if _, ok := rec.Scores[m]; !ok {
			return true
		}
	}
	return false
}

// Rescoring says why and how many of the journal's answers are scored
// again; nil when none are.
func (j *Journal) Rescoring() *Rescoring {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.rescoring == nil {
		return nil
	}
	r := *j.rescoring
	return &r
}

// Line states while a journal loads: what a sample's latest record makes it.
const (
	stNone uint8 = iota
	stDone
	stErrored
	stRetry    // errored, to run again (retryErrors)
	stRescore  // answered, to score again (unscored)
	stRejudge  // answered, its scoring failed: to score again (retryErrors)
	stAwaiting // answered, awaiting a judge's batch
)

// load reads the journal, returning the offset where appending must resume (the
// end of the last whole line). A sample's latest record decides what it is.
func (j *Journal) load(f *os.File, want header, retryErrors bool) (int64, error) {
	r := bufio.NewReaderSize(f, 64<<10)
	var off int64
	first := true
	state := make([]uint8, len(j.done))
	// carry holds what the latest record of a sample cost when a later
	// record may carry those costs: one awaiting verdicts, or an answer to
	// score again (a record re-scoring it says Rescored).
	carry := map[int]spend.Totals{}
	for {
		b, err := r.ReadBytes('\n')
		if len(b) == 0 || (errors.Is(err, io.EOF) && b[len(b)-1] != '\n') {
			// End of file, or a line the crash cut short: resume before it.
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("checkpoint %s: %w", j.path, err)
		}
		at := span{off: off, n: int32(len(b))}
		off += int64(len(b))
		if first {
			first = false
			var h header
			if json.Unmarshal(b, &h) != nil || h.Checkpoint != journalVersion {
				return 0, fmt.Errorf("%s is not a Proctor checkpoint: %w", j.path, ErrMismatch)
			}
			if h.Model != want.Model || h.Dataset != want.Dataset || h.Fingerprint != want.Fingerprint {
				return 0, &MismatchError{Path: j.path, Model: h.Model, Dataset: h.Dataset}
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
		// Every record was paid for, also one run again since (an error
		// retried), but for what a record carries of the one it replaces.
		if prev, ok := carry[i]; ok && (r.Rescored || state[i] == stAwaiting) {
			j.spent = j.spent.Sub(prev)
		}
		delete(carry, i)
		j.spent = j.spent.Add(r.spent())
		delete(j.rescore, i)
		delete(j.awaiting, i)
		failed := r.Error != ""
		switch {
		case l.Unscored, failed && retryErrors && r.ErrorKind == ErrorKindScoring:
			state[i] = stRescore
			if !l.Unscored {
				state[i] = stRejudge
			}
			if j.rescore == nil {
				j.rescore = map[int]span{}
			}
			j.rescore[i] = at
			carry[i] = r.spent()
		case len(r.JudgePending) > 0:
			var full Record
			if json.Unmarshal(rec, &full) != nil {
				state[i] = stNone
				continue
			}
			state[i] = stAwaiting
			j.await(i, &full)
			carry[i] = r.spent()
		case failed && retryErrors:
			state[i] = stRetry
		case failed:
			state[i] = stErrored
			if r.ErrorKind == ErrorKindScoring {
				carry[i] = r.spent() // --retry-errors may score it again
			}
		default:
			state[i] = stDone
		}
	}
	for i, st := range state {
		switch st {
		case stDone, stAwaiting:
			j.done[i] = true
			j.nDone++
		case stErrored:
			j.done[i] = true
			j.nDone++
			j.nErrors++
		case stRescore:
			j.nUnscored++
		}
	}
	return off, nil
}

// spentFields are what a stored record says of its outcome and its cost.
type spentFields struct {
	Error        string   `json:"error"`
	ErrorKind    string   `json:"errorKind"`
	Rescored     bool     `json:"rescored"`
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

// Answered returns, once, the earlier record of sample i whose answer is to
// be scored again without calling the model: an unscored one (the scoring
// changed), or with retryErrors one whose scoring failed. Only the scores it
// carries are kept.
func (j *Journal) Answered(i int) *Record {
	j.mu.Lock()
	at, ok := j.rescore[i]
	delete(j.rescore, i)
	j.mu.Unlock()
	if !ok {
		return nil
	}
	b := make([]byte, at.n)
	if _, err := j.f.ReadAt(b, at.off); err != nil {
		return nil // unreadable now: the sample is answered anew
	}
	l, err := ParseLine(b)
	var rec Record
	if err != nil || json.Unmarshal(l.Record, &rec) != nil {
		return nil
	}
	rec.CacheKey = l.Key
	return &rec
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
		if l.Unscored {
			return nil // an answer not scored yet: not finished
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
