// Package objects keeps a run's records in an object store: a results
// location is a prefix holding Parquet parts and the manifests that commit
// them (issue 27).
//
//	PREFIX/parts/MODEL/DATASET/<commit>-<n>.parquet   records, sorted by sample position
//	PREFIX/manifests/<generation>.json                what is committed
//
// A writer uploads parts first and then commits manifest n+1 with a
// conditional create: of two writers only one commits, and the other learns
// who did (ConflictError). Readers read only the parts the highest manifest
// names, so a part uploaded by a writer killed before its commit is never
// counted, and a record is never counted twice: within a pair, the part
// written last wins for a sample, as the last line of a journal does.
package objects

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Format is the manifest format this package writes and reads.
const Format = 1

const (
	manifestDir = "manifests/"
	partDir     = "parts/"
)

// Manifest is one committed state of a location.
type Manifest struct {
	Format     int   `json:"format"`
	Generation int64 `json:"generation"`
	// ID names this commit (random); parts it added carry it in their keys.
	ID string `json:"id"`
	// Writer says who committed: "proctor run on HOST", "controller".
	Writer    string    `json:"writer,omitempty"`
	Committed time.Time `json:"committed"`
	// Pairs are the records of each model on each dataset.
	Pairs []PairParts `json:"pairs"`
	// Batches are the batch log's records (results.BatchRecord), oldest first.
	Batches []json.RawMessage `json:"batches,omitempty"`
	// Summary is the run's summary.json, once a run has written one.
	Summary json.RawMessage `json:"summary,omitempty"`
	// Stopped, when set, says the run stopped before its end (over its
	// budget) and may go on: a later generation then holds all this one
	// does. It is the writer's mark of the state it committed, so that a
	// writer finding the same state knows it committed it already.
	Stopped string `json:"stopped,omitempty"`
}

// PairParts are one model's records on one dataset.
type PairParts struct {
	Model   string `json:"model"`
	Dataset string `json:"dataset"`
	// Header is the pair's checkpoint header (fingerprints), as a journal's
	// first line holds it.
	Header json.RawMessage `json:"header"`
	// Parts in the order they were written: for a sample, the last wins.
	Parts []Part `json:"parts"`
}

// Part is one Parquet object of a pair's records.
type Part struct {
	Key   string `json:"key"`
	Lines int    `json:"lines"`
	Bytes int64  `json:"bytes"`
	// First and Last are its lowest and highest sample positions.
	First int `json:"first"`
	Last  int `json:"last"`
}

// ConflictError says another writer committed the generation this one
// meant to: two runs write one location.
type ConflictError struct {
	Location   string
	Generation int64
	// Writer is who committed it, when its manifest could be read.
	Writer string
}

func (e *ConflictError) Error() string {
	who := "another writer"
	if e.Writer != "" {
		who = e.Writer
	}
	return fmt.Sprintf("%s: %s committed generation %d first: two runs cannot write to one location (use another one, or wait for the other run to end)",
		e.Location, who, e.Generation)
}

// NewID is a random commit id.
func NewID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func manifestKey(gen int64) string { return fmt.Sprintf("%s%020d.json", manifestDir, gen) }

// PartKey is where a pair's part named name goes.
func PartKey(model, dataset, name string) string {
	return partDir + model + "/" + dataset + "/" + name + ".parquet"
}

// Commit writes m as generation m.Generation, only if no writer did: a
// *ConflictError otherwise.
func Commit(ctx context.Context, b Bucket, where string, m *Manifest) error {
	m.Format = Format
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	err = b.PutIfAbsent(ctx, manifestKey(m.Generation), data)
	if errors.Is(err, ErrExists) {
		ce := &ConflictError{Location: where, Generation: m.Generation}
		if other, rerr := ReadManifest(ctx, b, m.Generation); rerr == nil {
			ce.Writer = other.Writer
		}
		return ce
	}
	if err != nil {
		return fmt.Errorf("committing the results: %w", err)
	}
	return nil
}

// Latest reads the highest committed manifest; nil when there is none.
func Latest(ctx context.Context, b Bucket) (*Manifest, error) {
	// A writer deletes the manifests it supersedes: one listed may be gone
	// by the time it is read, and then a newer one exists; list again.
	for range 5 {
		keys, err := b.List(ctx, manifestDir)
		if err != nil {
			return nil, err
		}
		var gens []int64
		for _, k := range keys {
			if gen, ok := generationOf(k); ok {
				gens = append(gens, gen)
			}
		}
		if len(gens) == 0 {
			return nil, nil
		}
		m, err := ReadManifest(ctx, b, slices.Max(gens))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		return m, err
	}
	return nil, errors.New("the location's manifests kept changing while being read")
}

func generationOf(key string) (int64, bool) {
	name, ok := strings.CutSuffix(strings.TrimPrefix(key, manifestDir), ".json")
	if !ok || len(name) != 20 {
		return 0, false
	}
	gen, err := strconv.ParseInt(name, 10, 64)
	return gen, err == nil && gen > 0
}

// ReadManifest reads generation gen and checks it.
func ReadManifest(ctx context.Context, b Bucket, gen int64) (*Manifest, error) {
	data, err := b.Get(ctx, manifestKey(gen))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", manifestKey(gen), err)
	}
	if err := m.check(gen); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", manifestKey(gen), err)
	}
	return &m, nil
}

func (m *Manifest) check(gen int64) error {
	if m.Format != Format {
		return fmt.Errorf("format %d, not %d: written by another version of Proctor", m.Format, Format)
	}
	if m.Generation != gen {
		return fmt.Errorf("says generation %d", m.Generation)
	}
	for _, p := range m.Pairs {
		for _, pt := range p.Parts {
			if path.Clean(pt.Key) != pt.Key || !strings.HasPrefix(pt.Key, partDir+p.Model+"/"+p.Dataset+"/") {
				return fmt.Errorf("part %q of model %s on dataset %s is not under %s", pt.Key, p.Model, p.Dataset, partDir)
			}
			if pt.Lines <= 0 || pt.First < 0 || pt.Last < pt.First {
				return fmt.Errorf("part %q has %d lines from %d to %d", pt.Key, pt.Lines, pt.First, pt.Last)
			}
		}
	}
	return nil
}

// Pair is a manifest's pair, or nil.
func (m *Manifest) Pair(model, dataset string) *PairParts {
	for i := range m.Pairs {
		if m.Pairs[i].Model == model && m.Pairs[i].Dataset == dataset {
			return &m.Pairs[i]
		}
	}
	return nil
}

// Prune deletes what m supersedes: older manifests, and the parts under
// parts/ that neither m nor a writer's commit in progress names. Only
// manifests and the parts of pairs dropped or replaced since prev are
// deleted: parts another writer uploaded but has not committed are its own.
func Prune(ctx context.Context, b Bucket, prev, m *Manifest) error {
	var stale []string
	if prev != nil {
		kept := map[string]bool{}
		for _, p := range m.Pairs {
			for _, pt := range p.Parts {
				kept[pt.Key] = true
			}
		}
		for _, p := range prev.Pairs {
			for _, pt := range p.Parts {
				if !kept[pt.Key] {
					stale = append(stale, pt.Key)
				}
			}
		}
	}
	keys, err := b.List(ctx, manifestDir)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if gen, ok := generationOf(k); ok && gen < m.Generation {
			stale = append(stale, k)
		}
	}
	return b.Delete(ctx, stale...)
}
