package results

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BatchRecord is one batch of a model's requests submitted to its provider's
// batch API, as a run keeps it durably: the record is written before the
// batch is submitted (State intended) and again once the provider gave its id
// (submitted), so that a run that was killed in between finds its batches
// again instead of submitting their samples twice.
type BatchRecord struct {
	// Key identifies the submission: its model, dataset, attempt and samples.
	Key     string `json:"key"`
	Model   string `json:"model"`
	Dataset string `json:"dataset"`
	// Attempt counts the earlier batches its samples were in (their requests
	// failed or expired there).
	Attempt int `json:"attempt"`
	// Indexes are its samples' positions in the dataset.
	Indexes Indexes `json:"indexes"`
	// Since is when it was (to be) submitted.
	Since time.Time `json:"since"`
	// ID is the provider's id for it; empty while it is only intended.
	ID    string     `json:"id,omitempty"`
	State BatchState `json:"state"`
}

// JudgeBatchName is the model a judge's batches are logged under
// (BatchRecord.Model): JUDGE/SCORER/MODEL, of names that hold no "/".
func JudgeBatchName(judge, scorer, model string) string { return judge + "/" + scorer + "/" + model }

// JudgeBatchOf reads a batch's logged model: the judge and scorer of a
// judge's batch (ok), or a model's own.
func JudgeBatchOf(logged string) (judge, scorer string, ok bool) {
	parts := strings.Split(logged, "/")
	if len(parts) != 3 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// BatchState is where a batch is, as the run knows it.
type BatchState string

// Batch states.
const (
	// BatchIntended: about to be submitted; it may have been.
	BatchIntended BatchState = "intended"
	// BatchSubmitted: the provider has it (ID).
	BatchSubmitted BatchState = "submitted"
	// BatchDone: its results were all recorded.
	BatchDone BatchState = "done"
)

// BatchLog keeps a run's batches durably. PutBatch returns once the record is
// safe (on disk, or in the cluster); the newest record of a key wins.
type BatchLog interface {
	// Batches are model's batches ("": every model's).
	Batches(model string) ([]BatchRecord, error)
	PutBatch(b BatchRecord) error
}

// Indexes are sample positions, written as ranges ("0-99,105").
type Indexes []int

// String writes the sorted positions as ranges.
func (ix Indexes) String() string {
	s := slices.Clone([]int(ix))
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// ParseIndexes reads what String wrote.
func ParseIndexes(s string) (Indexes, error) {
	var out Indexes
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("indexes %q: %q is not a position", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("indexes %q: %q is not a range", s, part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// MarshalJSON writes the ranges as a string.
func (ix Indexes) MarshalJSON() ([]byte, error) { return json.Marshal(ix.String()) }

// UnmarshalJSON reads the ranges.
func (ix *Indexes) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseIndexes(s)
	*ix = v
	return err
}

// batchFile is where a local run keeps its batches.
func (d *Dir) batchFile() string { return filepath.Join(d.root, CheckpointDir, BatchesFile) }

// Batches implements BatchLog: the newest record of each of model's batches
// (every model's for ""), in the order they were first recorded.
func (d *Dir) Batches(model string) ([]BatchRecord, error) {
	d.batchMu.Lock()
	defer d.batchMu.Unlock()
	f, err := os.Open(d.batchFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var order []string
	latest := map[string]BatchRecord{}
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var b BatchRecord
			if json.Unmarshal(line, &b) == nil && (model == "" || b.Model == model) {
				if _, seen := latest[b.Key]; !seen {
					order = append(order, b.Key)
				}
				latest[b.Key] = b
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.batchFile(), err)
		}
	}
	out := make([]BatchRecord, 0, len(order))
	for _, k := range order {
		out = append(out, latest[k])
	}
	return out, nil
}

// PutBatch implements BatchLog: appended and synced to disk before it
// returns (a batch submitted must not be forgotten by a kill -9).
func (d *Dir) PutBatch(b BatchRecord) error {
	line, err := json.Marshal(b)
	if err != nil {
		return err
	}
	// The records put before it are written first: a judge's batch holds
	// verdicts on answers that must outlive a kill -9 (and a batch done
	// names records that are there).
	if err := d.sync(); err != nil {
		return err
	}
	d.batchMu.Lock()
	defer d.batchMu.Unlock()
	f, err := os.OpenFile(d.batchFile(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
