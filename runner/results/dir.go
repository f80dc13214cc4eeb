package results

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/runner/spend"
)

// Files in an output directory.
const (
	ResultsFile   = "results.jsonl"
	SummaryFile   = "summary.json"
	CheckpointDir = "checkpoint"
)

// Dir is a local output directory: a journal per model and dataset under
// checkpoint/, and results.jsonl and summary.json assembled from them. One process
// at a time may use it: OpenDir locks it until Unlock.
type Dir struct {
	root string
	lock *os.File

	mu       sync.RWMutex
	journals map[pairKey]*Journal
	// batchMu guards the batch file (PutBatch, Batches).
	batchMu sync.Mutex
}

type pairKey struct{ model, dataset string }

// Pair names one model on one dataset, with what its summary needs.
type Pair struct {
	Model, Dataset string
	Fingerprint    string
	// Parts fingerprint the model, data, prompt and scorers one by one.
	Parts   *Parts
	Total   int
	Metrics []string
	// Priced says the model has pricing: with no record, its cost is 0,
	// not unknown.
	Priced bool
}

// ErrLocked is returned when another process is using an output directory.
var ErrLocked = errors.New("output directory is in use by another run")

// OpenDir opens (creating) an output directory and locks it. Call it only once
// the run is known to be able to start: it creates the directory.
func OpenDir(root string) (*Dir, error) {
	if err := os.MkdirAll(filepath.Join(root, CheckpointDir), 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(root, CheckpointDir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	// An advisory lock, released by the kernel when the process dies however it dies.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", root, ErrLocked)
		}
		return nil, fmt.Errorf("%s: locking: %w", root, err)
	}
	return &Dir{root: root, lock: lock, journals: map[pairKey]*Journal{}}, nil
}

// Unlock releases the directory; call it last.
func (d *Dir) Unlock() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}

// CanReset reports why Reset could not discard the directory's results, before
// anything is discarded: --restart checks first, then acts.
func (d *Dir) CanReset() error {
	cp := filepath.Join(d.root, CheckpointDir)
	for _, dir := range []string{d.root, cp} {
		// Removing a file needs write and search permission on its directory.
		if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
			return fmt.Errorf("cannot remove files from %s: %w", dir, err)
		}
	}
	for _, f := range []string{filepath.Join(d.root, ResultsFile), filepath.Join(d.root, SummaryFile)} {
		if st, err := os.Lstat(f); err == nil && st.IsDir() {
			return fmt.Errorf("%s is a directory, not results proctor wrote", f)
		}
	}
	return nil
}

// Reset discards everything an earlier run left: results and journals. It
// destroys paid work: call it only after every check that can refuse the run,
// CanReset included. What is assembled from the journals goes first, so a
// failure part way leaves the journals, from which the next run resumes.
func (d *Dir) Reset() error {
	for _, f := range []string{ResultsFile, SummaryFile} {
		if err := os.Remove(filepath.Join(d.root, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	entries, err := os.ReadDir(filepath.Join(d.root, CheckpointDir))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".jsonl" {
			if err := os.Remove(filepath.Join(d.root, CheckpointDir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReplaceError says an output directory holds results a run would replace
// without having been told to.
type ReplaceError struct{ Msg string }

func (e *ReplaceError) Error() string { return e.Msg }

// Check refuses a directory whose results the run of pairs would replace:
// records of a model or dataset the run no longer has (renamed, removed, or
// another Evaluation's), which results.jsonl would silently drop, and a
// results.jsonl or summary.json no checkpoint accounts for (written by hand
// or by another tool). Call it before Open; --restart skips it, as it discards
// the directory's results anyway.
func (d *Dir) Check(pairs []Pair) error {
	want := map[pairKey]*Pair{}
	for i := range pairs {
		want[pairKey{pairs[i].Model, pairs[i].Dataset}] = &pairs[i]
	}
	entries, err := os.ReadDir(filepath.Join(d.root, CheckpointDir))
	if err != nil {
		return err
	}
	var others []string
	var mismatches []error
	journals := 0
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".jsonl" || filepath.Join(d.root, CheckpointDir, e.Name()) == d.batchFile() {
			continue
		}
		h, records, err := readHeader(filepath.Join(d.root, CheckpointDir, e.Name()), 0)
		if err != nil {
			return err
		}
		if h == nil {
			continue // empty: a run killed before its first line; nothing to lose
		}
		journals++
		p := want[pairKey{h.Model, h.Dataset}]
		if p == nil && records > 0 {
			others = append(others, fmt.Sprintf("model %q on dataset %q (%d records)", h.Model, h.Dataset, records))
		}
		if p != nil && records > 0 && d.journalPath(p.Model, p.Dataset) == filepath.Join(d.root, CheckpointDir, e.Name()) {
			// Answers that cannot be reused refuse the run before any
			// journal is opened (and any re-scored).
			if _, err := compareHeader(d.journalPath(p.Model, p.Dataset), h, pairHeader(*p), false, false); err != nil {
				mismatches = append(mismatches, err)
			}
		}
	}
	if len(mismatches) > 0 {
		return errors.Join(mismatches...)
	}
	if len(others) > 0 {
		return &ReplaceError{fmt.Sprintf("%s holds results of %s, which this Evaluation does not have (renamed, removed, or another Evaluation's): "+
			"its results.jsonl and summary.json would lose them", d.root, strings.Join(others, ", "))}
	}
	if journals == 0 {
		for _, f := range []string{ResultsFile, SummaryFile} {
			if _, err := os.Stat(filepath.Join(d.root, f)); err == nil {
				return &ReplaceError{fmt.Sprintf("%s already has a %s that no checkpoint of it accounts for (not written by proctor run, or its checkpoint was removed), which the run would replace",
					d.root, f)}
			}
		}
	}
	return nil
}

// Seed writes the journal of pair p, which must not exist yet, holding
// answers (by sample position) to be scored (unscored records): answers
// fetched from elsewhere (a cluster's results), which proctor score scores
// with the Evaluation's scoring. Their scores are dropped.
func (d *Dir) Seed(p Pair, answers map[int]*Record) error {
	if err := errors.Join(checkName("model", p.Model), checkName("dataset", p.Dataset)); err != nil {
		return err
	}
	path := d.journalPath(p.Model, p.Dataset)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	h, _ := json.Marshal(pairHeader(p))
	_, _ = w.Write(append(h, '\n')) // a bufio.Writer's error sticks: Flush returns it
	var buf []byte
	for _, i := range slices.Sorted(maps.Keys(answers)) {
		rec := *answers[i]
		rec.Scores, rec.ScoreErrors, rec.JudgePending, rec.Error, rec.ErrorKind = map[string]float64{}, nil, nil, "", ""
		if buf, err = appendUnscoredLine(buf[:0], i, &rec); err != nil {
			f.Close()
			return err
		}
		_, _ = w.Write(append(buf, '\n'))
	}
	return errors.Join(w.Flush(), f.Sync(), f.Close())
}

// HasAnswers refuses a directory that holds no record of any of pairs:
// there is nothing in it to score again.
func (d *Dir) HasAnswers(pairs []Pair) error {
	for _, p := range pairs {
		if checkName("model", p.Model) != nil || checkName("dataset", p.Dataset) != nil {
			continue
		}
		h, records, err := readHeader(d.journalPath(p.Model, p.Dataset), 1)
		if err == nil && h != nil && records > 0 {
			return nil
		}
	}
	return fmt.Errorf("%s holds no answers of this Evaluation's models and datasets", d.root)
}

// readHeader reads a journal's header and counts its records (lines after
// the header), up to most when it is positive; a nil header means an empty
// file.
func readHeader(path string, most int) (*header, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	first, err := r.ReadBytes('\n')
	if len(first) == 0 && errors.Is(err, io.EOF) {
		return nil, 0, nil
	}
	var h header
	if json.Unmarshal(first, &h) != nil || h.Checkpoint != journalVersion {
		return nil, 0, fmt.Errorf("%s is not a Proctor checkpoint: %w", path, ErrMismatch)
	}
	records := 0
	for most <= 0 || records < most {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			records++
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long record: skip to its end, counted once.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			if err == nil {
				records++
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return &h, records, nil
			}
			return nil, 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	return &h, records, nil
}

// Root is the directory's path.
func (d *Dir) Root() string { return d.root }

func (d *Dir) journalPath(model, dataset string) string {
	return filepath.Join(d.root, CheckpointDir, JournalName(model, dataset))
}

// JournalName is the file name of a pair's journal in CheckpointDir. Model
// and dataset names are DNS labels, which cannot contain a dot (checkName):
// the name is unambiguous and stays in the directory.
func JournalName(model, dataset string) string { return model + "." + dataset + ".jsonl" }

// BatchesFile is the batch log's file name in CheckpointDir.
const BatchesFile = "batches.jsonl"

// checkName refuses a model or dataset name that is not a DNS label (lower
// case letters, digits and '-'), as validation already does: names become
// file names, and "../x" or "a.b" would leave the directory or collide.
func checkName(kind, name string) error {
	ok := name != "" && len(name) <= 63 && name[0] != '-' && name[len(name)-1] != '-'
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%s name %q is not a DNS label (lower case letters, digits and '-'), so it cannot name a checkpoint file", kind, name)
	}
	return nil
}

// Open opens the journal of a pair, loading what an earlier run left.
func (d *Dir) Open(p Pair, opts OpenOptions) (*Journal, error) {
	if err := errors.Join(checkName("model", p.Model), checkName("dataset", p.Dataset)); err != nil {
		return nil, err
	}
	j, err := OpenJournal(d.journalPath(p.Model, p.Dataset), p, opts)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.journals[pairKey{p.Model, p.Dataset}] = j
	d.mu.Unlock()
	return j, nil
}

func (d *Dir) journal(model, dataset string) *Journal {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.journals[pairKey{model, dataset}]
}

// Rescoring lists the pairs whose answers are scored again, and why.
func (d *Dir) Rescoring() []Rescoring {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []Rescoring
	for _, j := range d.journals {
		if r := j.Rescoring(); r != nil {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b Rescoring) int { return strings.Compare(a.Model+"."+a.Dataset, b.Model+"."+b.Dataset) })
	return out
}

// Done reports whether a sample already has a record.
func (d *Dir) Done(model, dataset string, index int) bool {
	j := d.journal(model, dataset)
	return j != nil && j.Done(index)
}

// Answered returns, once, the earlier record of a sample whose call succeeded
// but whose scoring failed (with --retry-errors), so only its scoring runs again.
func (d *Dir) Answered(model, dataset string, index int) *Record {
	if j := d.journal(model, dataset); j != nil {
		return j.Answered(index)
	}
	return nil
}

// Awaiting returns a pair's records whose judging waits for a judge's batch,
// by sample position.
func (d *Dir) Awaiting(model, dataset string) map[int]*Record {
	if j := d.journal(model, dataset); j != nil {
		return j.Awaiting()
	}
	return nil
}

// Counts returns how many samples of a pair are done, and how many of those errored.
func (d *Dir) Counts(model, dataset string) (done, errored int) {
	if j := d.journal(model, dataset); j != nil {
		return j.Counts()
	}
	return 0, 0
}

// Put appends a record to its pair's journal.
func (d *Dir) Put(model, dataset string, index int, rec *Record) error {
	j := d.journal(model, dataset)
	if j == nil {
		return fmt.Errorf("no open checkpoint for %s on %s", model, dataset)
	}
	return j.Append(index, rec)
}

// Spent is what the records the directory's journals held when opened cost:
// a resumed run's spending so far.
func (d *Dir) Spent() spend.Totals {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var t spend.Totals
	for _, j := range d.journals {
		t = t.Add(j.Spent())
	}
	return t
}

// sync writes what every journal holds pending.
func (d *Dir) sync() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var errs []error
	for _, j := range d.journals {
		errs = append(errs, j.Sync())
	}
	return errors.Join(errs...)
}

// Close flushes and closes every journal.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for k, j := range d.journals {
		errs = append(errs, j.Close())
		delete(d.journals, k)
	}
	return errors.Join(errs...)
}

// Assemble writes results.jsonl (pairs in the order given, samples in dataset
// order) and summary.json from the journals, each replaced atomically, and returns
// the summaries.
func (d *Dir) Assemble(pairs []Pair) ([]Summary, error) {
	out, err := os.CreateTemp(d.root, ".results-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(out.Name())
	summaries := make([]Summary, 0, len(pairs))
	for _, p := range pairs {
		if err := errors.Join(checkName("model", p.Model), checkName("dataset", p.Dataset)); err != nil {
			out.Close()
			return nil, err
		}
		agg := NewAggregate(p.Model, p.Dataset, int64(p.Total), p.Metrics)
		agg.SetPriced(p.Priced)
		if err := Assemble(d.journalPath(p.Model, p.Dataset), out, agg, p.Total); err != nil {
			out.Close()
			return nil, err
		}
		summaries = append(summaries, agg.Summary())
	}
	// As readable as the checkpoint it is made from (CreateTemp makes 0600).
	if err := errors.Join(out.Chmod(0o644), out.Close()); err != nil {
		return nil, err
	}
	if err := os.Rename(out.Name(), filepath.Join(d.root, ResultsFile)); err != nil {
		return nil, err
	}
	if err := WriteSummary(d.root, struct {
		Results []Summary `json:"results"`
	}{summaries}); err != nil {
		return nil, err
	}
	return summaries, nil
}

// WriteSummary writes v as dir's summary.json, indented, atomically.
func WriteSummary(dir string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, SummaryFile), append(b, '\n'))
}

// WriteFileAtomic writes data to path through a file renamed into place
// (0644, as the checkpoint): a failure part way leaves what was there.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
