package objects

import (
	"bufio"
	"bytes"
	"context"
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
	"time"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/parquetpart"
)

// stateFile, in a working copy, says which commit the copy holds and how
// much of each journal is in the location.
const stateFile = ".location.json"

// Mirror keeps a local results directory (the working copy a run writes,
// with every rule of a local directory) and a location in step: Hydrate
// makes the copy hold the location's latest commit; Sync uploads what the
// journals gained since as Parquet parts and commits them.
type Mirror struct {
	b      Bucket
	where  string
	root   string
	writer string
	now    func() time.Time

	mu    sync.Mutex
	last  *Manifest
	state mirrorState
	// run names this process's parts; n counts them.
	run string
	n   int
}

type mirrorState struct {
	// ID is the commit the copy holds all of (and maybe more).
	ID string `json:"id"`
	// Files are the journals as far as they are in the location.
	Files map[string]fileState `json:"files"`
}

type fileState struct {
	// Bytes of the journal are in the location's parts.
	Bytes int64 `json:"bytes"`
	// Inode tells a journal written anew (scored again, restarted) from
	// the one that grew.
	Inode uint64 `json:"inode"`
}

// NewMirror keeps the results directory root and location b (named where
// in messages) in step; writer says who commits (for ConflictError), now
// is the clock.
func NewMirror(b Bucket, where, root, writer string, now func() time.Time) *Mirror {
	return &Mirror{b: b, where: where, root: root, writer: writer, now: now, run: NewID()}
}

// Hydrate makes the working copy hold the location's latest commit. A copy
// that already holds it (this machine wrote it) is kept as it is, with the
// records it has not synced yet; any other is rebuilt from the location.
// Call it with the directory locked (results.OpenDir), before its journals
// are opened.
func (m *Mirror) Hydrate(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	latest, err := Latest(ctx, m.b)
	if err != nil {
		return fmt.Errorf("%s: %w", m.where, err)
	}
	m.last = latest
	var st mirrorState
	if b, err := os.ReadFile(filepath.Join(m.root, stateFile)); err == nil {
		_ = json.Unmarshal(b, &st)
	}
	if latest == nil && st.ID == "" || latest != nil && st.ID == latest.ID {
		m.state = st
		if m.state.Files == nil {
			m.state.Files = map[string]fileState{}
		}
		return nil
	}
	return m.rebuild(ctx, latest)
}

// rebuild replaces the copy's journals, batch log and summary with the
// commit's (none when latest is nil).
func (m *Mirror) rebuild(ctx context.Context, latest *Manifest) error {
	cp := filepath.Join(m.root, results.CheckpointDir)
	if err := os.MkdirAll(cp, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(cp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".jsonl" {
			if err := os.Remove(filepath.Join(cp, e.Name())); err != nil {
				return err
			}
		}
	}
	for _, f := range []string{results.ResultsFile, results.SummaryFile} {
		if err := os.Remove(filepath.Join(m.root, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	st := mirrorState{Files: map[string]fileState{}}
	if latest != nil {
		st.ID = latest.ID
		for i := range latest.Pairs {
			p := &latest.Pairs[i]
			name := results.JournalName(p.Model, p.Dataset)
			fs, err := m.writeJournal(ctx, filepath.Join(cp, name), p)
			if err != nil {
				return fmt.Errorf("%s: model %s on dataset %s: %w", m.where, p.Model, p.Dataset, err)
			}
			st.Files[name] = fs
		}
		if len(latest.Batches) > 0 {
			var buf bytes.Buffer
			for _, b := range latest.Batches {
				buf.Write(b)
				buf.WriteByte('\n')
			}
			if err := results.WriteFileAtomic(filepath.Join(cp, results.BatchesFile), buf.Bytes()); err != nil {
				return err
			}
		}
		if len(latest.Summary) > 0 {
			if err := results.WriteFileAtomic(filepath.Join(m.root, results.SummaryFile), append(bytes.Clone(latest.Summary), '\n')); err != nil {
				return err
			}
		}
	}
	m.state = st
	return m.saveState()
}

// writeJournal writes a pair's journal from its parts, in the order they
// were written (its lines in that order: the last wins, as in the parts).
func (m *Mirror) writeJournal(ctx context.Context, path string, p *PairParts) (fileState, error) {
	f, err := os.CreateTemp(filepath.Dir(path), ".journal-*")
	if err != nil {
		return fileState{}, err
	}
	defer os.Remove(f.Name())
	w := bufio.NewWriterSize(f, 256<<10)
	// A bufio.Writer's error sticks: Flush returns it.
	_, _ = w.Write(bytes.TrimSpace(p.Header))
	_ = w.WriteByte('\n')
	for _, pt := range p.Parts {
		ra, size, err := m.b.ReaderAt(ctx, pt.Key)
		if err != nil {
			f.Close()
			return fileState{}, fmt.Errorf("part %s: %w", pt.Key, err)
		}
		err = parquetpart.Read(ra, size, func(l results.Line) error {
			b, err := json.Marshal(l)
			if err != nil {
				return err
			}
			_, _ = w.Write(b)
			return w.WriteByte('\n')
		})
		if err != nil {
			f.Close()
			return fileState{}, fmt.Errorf("part %s: %w", pt.Key, err)
		}
	}
	if err := errors.Join(w.Flush(), f.Chmod(0o644), f.Sync(), f.Close()); err != nil {
		return fileState{}, err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fileState{}, err
	}
	return statJournal(path)
}

func statJournal(path string) (fileState, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileState{}, err
	}
	fs := fileState{Bytes: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fs.Inode = sys.Ino
	}
	return fs, nil
}

func (m *Mirror) saveState() error {
	b, err := json.Marshal(m.state)
	if err != nil {
		return err
	}
	return results.WriteFileAtomic(filepath.Join(m.root, stateFile), b)
}

// Restarted says the copy's journals were discarded (--restart): the next
// Sync uploads them anew, whatever their files look like.
func (m *Mirror) Restarted() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state.Files = map[string]fileState{}
}

// Committed is the last commit seen or made; nil for none.
func (m *Mirror) Committed() *Manifest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// Sync uploads what the journals gained since the last commit, each
// journal's new lines as one part (sorted, one line a sample), and commits
// them with the batch log and summary.json: nothing is committed when
// nothing changed. A journal written anew replaces its pair's parts. A
// *ConflictError says another writer committed first: this one must stop.
func (m *Mirror) Sync(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp := filepath.Join(m.root, results.CheckpointDir)
	entries, err := os.ReadDir(cp)
	if err != nil {
		return err
	}
	next := &Manifest{Generation: 1, ID: NewID(), Writer: m.writer, Committed: m.now().UTC()}
	if m.last != nil {
		next.Generation = m.last.Generation + 1
	}
	changed := false
	files := map[string]fileState{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || filepath.Ext(name) != ".jsonl" || name == results.BatchesFile {
			continue
		}
		pp, fs, grew, err := m.syncJournal(ctx, filepath.Join(cp, name))
		if err != nil {
			return fmt.Errorf("%s: syncing %s: %w", m.where, name, err)
		}
		if pp == nil {
			continue // empty: nothing of it yet
		}
		changed = changed || grew
		files[name] = fs
		next.Pairs = append(next.Pairs, *pp)
	}
	if m.last == nil || len(next.Pairs) != len(m.last.Pairs) {
		changed = true
	}
	if next.Batches, err = readLines(filepath.Join(cp, results.BatchesFile)); err != nil {
		return err
	}
	if sum, err := os.ReadFile(filepath.Join(m.root, results.SummaryFile)); err == nil {
		var c bytes.Buffer
		if json.Compact(&c, sum) == nil {
			next.Summary = c.Bytes()
		}
	}
	if m.last != nil && !changed && len(next.Batches) == len(m.last.Batches) && bytes.Equal(next.Summary, m.last.Summary) {
		return nil
	}
	if err := Commit(ctx, m.b, m.where, next); err != nil {
		return err
	}
	// The commit stands whether or not what it supersedes is deleted: what
	// is left is never read.
	_ = Prune(ctx, m.b, m.last, next)
	m.last = next
	m.state = mirrorState{ID: next.ID, Files: files}
	return m.saveState()
}

// syncJournal uploads what a journal gained as a part, and returns its
// pair as the next commit has it; nil for a journal without a header yet.
func (m *Mirror) syncJournal(ctx context.Context, path string) (*PairParts, fileState, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileState{}, false, err
	}
	defer f.Close()
	now, err := statJournal(path)
	if err != nil {
		return nil, fileState{}, false, err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	head, err := r.ReadBytes('\n')
	if err != nil {
		return nil, fileState{}, false, nil // no whole header: an empty journal
	}
	var h struct{ Model, Dataset string }
	if err := json.Unmarshal(head, &h); err != nil || h.Model == "" || h.Dataset == "" {
		return nil, fileState{}, false, fmt.Errorf("not a Proctor checkpoint")
	}
	pp := &PairParts{Model: h.Model, Dataset: h.Dataset, Header: bytes.TrimSpace(head), Parts: []Part{}}
	start := int64(len(head))
	was, ok := m.state.Files[filepath.Base(path)]
	prev := (*PairParts)(nil)
	if m.last != nil {
		prev = m.last.Pair(h.Model, h.Dataset)
	}
	grew := prev == nil || !bytes.Equal(prev.Header, pp.Header)
	if ok && prev != nil && was.Inode == now.Inode && was.Bytes <= now.Bytes && was.Bytes >= start && !grew {
		// The journal grew: its parts stay, and what it gained is added.
		pp.Parts = append(pp.Parts, prev.Parts...)
		start = was.Bytes
	} else {
		grew = true
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return nil, fileState{}, false, err
	}
	lines, end, err := readJournalLines(bufio.NewReaderSize(f, 256<<10), start)
	if err != nil {
		return nil, fileState{}, false, err
	}
	if len(lines) > 0 {
		part, err := m.upload(ctx, h.Model, h.Dataset, lines)
		if err != nil {
			return nil, fileState{}, false, err
		}
		pp.Parts = append(pp.Parts, part)
		grew = true
	}
	return pp, fileState{Bytes: end, Inode: now.Inode}, grew, nil
}

// readJournalLines reads the whole lines from off on, and where they end: a
// line being written is left for the next sync.
func readJournalLines(r *bufio.Reader, off int64) ([]results.Line, int64, error) {
	var lines []results.Line
	for {
		b, err := r.ReadBytes('\n')
		if len(b) > 0 && b[len(b)-1] == '\n' {
			l, perr := results.ParseLine(b)
			if perr != nil {
				return nil, 0, fmt.Errorf("the line at offset %d: %w", off, perr)
			}
			l.Record = bytes.Clone(l.Record)
			lines = append(lines, l)
			off += int64(len(b))
		}
		if errors.Is(err, io.EOF) {
			return lines, off, nil
		}
		if err != nil {
			return nil, 0, err
		}
	}
}

// upload writes lines as this writer's next part of a pair.
func (m *Mirror) upload(ctx context.Context, model, dataset string, lines []results.Line) (Part, error) {
	m.n++
	return PutPart(ctx, m.b, PartKey(model, dataset, fmt.Sprintf("%s-%d", m.run, m.n)), lines)
}

// PutPart writes lines at key as a part, one line a sample (the last),
// sorted, and returns the part as a manifest names it. lines is not empty.
func PutPart(ctx context.Context, b Bucket, key string, lines []results.Line) (Part, error) {
	lines = LastPerSample(lines)
	var buf bytes.Buffer
	if err := parquetpart.Write(&buf, lines); err != nil {
		return Part{}, err
	}
	if err := b.Put(ctx, key, buf.Bytes()); err != nil {
		return Part{}, err
	}
	return Part{Key: key, Lines: len(lines), Bytes: int64(buf.Len()), First: lines[0].Index, Last: lines[len(lines)-1].Index}, nil
}

// LastPerSample keeps the last line of each sample, sorted by sample position.
func LastPerSample(lines []results.Line) []results.Line {
	last := map[int]int{}
	for i, l := range lines {
		last[l.Index] = i
	}
	out := make([]results.Line, 0, len(last))
	for _, i := range slices.Sorted(maps.Values(last)) {
		out = append(out, lines[i])
	}
	slices.SortFunc(out, func(a, b results.Line) int { return a.Index - b.Index })
	return out
}

func readLines(path string) ([]json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for line := range strings.SplitSeq(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && json.Valid([]byte(line)) {
			out = append(out, json.RawMessage(line))
		}
	}
	return out, nil
}
