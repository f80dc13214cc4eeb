package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

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
	Total          int
	Metrics        []string
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

// Reset discards everything an earlier run left: journals and results. It
// destroys paid work: call it only after every check that can refuse the run.
func (d *Dir) Reset() error {
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
	for _, f := range []string{ResultsFile, SummaryFile} {
		if err := os.Remove(filepath.Join(d.root, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Root is the directory's path.
func (d *Dir) Root() string { return d.root }

func (d *Dir) journalPath(model, dataset string) string {
	// Model and dataset names are DNS labels, which cannot contain a dot
	// (checkName): the file name is unambiguous and stays in the directory.
	return filepath.Join(d.root, CheckpointDir, model+"."+dataset+".jsonl")
}

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
func (d *Dir) Open(p Pair, retryErrors bool) (*Journal, error) {
	if err := errors.Join(checkName("model", p.Model), checkName("dataset", p.Dataset)); err != nil {
		return nil, err
	}
	j, err := OpenJournal(d.journalPath(p.Model, p.Dataset), p.Model, p.Dataset, p.Fingerprint, p.Total, retryErrors)
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
		if err := Assemble(d.journalPath(p.Model, p.Dataset), out, agg, p.Total); err != nil {
			out.Close()
			return nil, err
		}
		summaries = append(summaries, agg.Summary())
	}
	if err := out.Close(); err != nil {
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
	return writeFileAtomic(filepath.Join(dir, SummaryFile), append(b, '\n'))
}

func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
