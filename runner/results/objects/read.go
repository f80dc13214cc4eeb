package objects

import (
	"bufio"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/parquetpart"
)

// ReadPair calls fn with each sample's line of pair p, in sample order: of
// the lines of one sample, the one of the part written last. The parts are
// merged in one pass, each opened only once the merge reaches its first
// sample, so a run's shards (whose parts do not overlap) are read one at a
// time.
func ReadPair(ctx context.Context, b Bucket, p *PairParts, fn func(results.Line) error) error {
	h := &cursors{}
	for i, pt := range p.Parts {
		h.items = append(h.items, &cursor{part: pt, ord: i, index: pt.First})
	}
	heap.Init(h)
	defer h.close()
	for h.Len() > 0 {
		c := h.items[0]
		if c.r == nil {
			if err := c.open(ctx, b); err != nil {
				return err
			}
			if !c.advance() {
				heap.Pop(h)
			} else {
				heap.Fix(h, 0)
			}
			if c.err != nil {
				return c.err
			}
			continue
		}
		// The part written last wins (cursors order so); the others'
		// lines of this sample are passed over.
		line := c.line
		if err := fn(line); err != nil {
			return err
		}
		for h.Len() > 0 && h.items[0].r != nil && h.items[0].index == line.Index {
			top := h.items[0]
			if !top.advance() {
				heap.Pop(h)
			} else {
				heap.Fix(h, 0)
			}
			if top.err != nil {
				return top.err
			}
		}
	}
	return nil
}

type cursor struct {
	part  Part
	ord   int
	r     *parquetpart.Reader
	line  results.Line
	index int
	prev  int
	err   error
}

func (c *cursor) open(ctx context.Context, b Bucket) error {
	ra, size, err := b.ReaderAt(ctx, c.part.Key)
	if err != nil {
		return fmt.Errorf("part %s: %w", c.part.Key, err)
	}
	if size != c.part.Bytes {
		return fmt.Errorf("part %s holds %d bytes, its manifest says %d", c.part.Key, size, c.part.Bytes)
	}
	if c.r, err = parquetpart.NewReader(ra, size); err != nil {
		return fmt.Errorf("part %s: %w", c.part.Key, err)
	}
	c.prev = -1
	return nil
}

// advance moves to the part's next line; false at its end or on an error
// (c.err).
func (c *cursor) advance() bool {
	l, err := c.r.Next()
	if errors.Is(err, io.EOF) {
		return false
	}
	if err == nil && l.Index <= c.prev {
		err = fmt.Errorf("sample %d after sample %d: not sorted", l.Index, c.prev)
	}
	if err != nil {
		c.err = fmt.Errorf("part %s: %w", c.part.Key, err)
		return false
	}
	c.line, c.index, c.prev = l, l.Index, l.Index
	return true
}

// cursors is a heap by sample position; at one position, parts not yet
// opened first (their first line may be that sample's), then the part
// written last.
type cursors struct{ items []*cursor }

func (h *cursors) Len() int { return len(h.items) }
func (h *cursors) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.index != b.index {
		return a.index < b.index
	}
	if (a.r == nil) != (b.r == nil) {
		return a.r == nil
	}
	return a.ord > b.ord
}
func (h *cursors) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *cursors) Push(x any)    { h.items = append(h.items, x.(*cursor)) }
func (h *cursors) Pop() any {
	c := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	if c.r != nil {
		_ = c.r.Close()
	}
	return c
}
func (h *cursors) close() {
	for _, c := range h.items {
		if c.r != nil {
			_ = c.r.Close()
		}
	}
}

// Results is a location's committed results, as read by proctor results,
// proctor compare and baselines.
type Results struct {
	Bucket Bucket
	// Where names the location in messages.
	Where    string
	Manifest *Manifest
}

// ReadResults reads the latest commit of a location; an error when it
// holds none.
func ReadResults(ctx context.Context, b Bucket, where string) (*Results, error) {
	m, err := Latest(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s holds no committed results (no manifests/)", where)
	}
	return &Results{Bucket: b, Where: where, Manifest: m}, nil
}

// summaryFile is a summary.json: its results in the run's order.
type summaryFile struct {
	Results []results.Summary `json:"results"`
}

// pairs are the manifest's pairs in the summary's order (the spec's), then
// any it does not name.
func (r *Results) pairs() []*PairParts {
	var sum summaryFile
	_ = json.Unmarshal(r.Manifest.Summary, &sum)
	order := map[[2]string]int{}
	for i, s := range sum.Results {
		order[[2]string{s.Model, s.Dataset}] = i
	}
	out := make([]*PairParts, 0, len(r.Manifest.Pairs))
	for i := range r.Manifest.Pairs {
		out = append(out, &r.Manifest.Pairs[i])
	}
	slices.SortStableFunc(out, func(a, b *PairParts) int {
		ia, oka := order[[2]string{a.Model, a.Dataset}]
		ib, okb := order[[2]string{b.Model, b.Dataset}]
		switch {
		case oka && okb:
			return ia - ib
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
	return out
}

// Each calls fn with every finished record's line (answers waiting to be
// scored again are not finished), pair by pair in the run's order, samples
// in dataset order.
func (r *Results) Each(ctx context.Context, fn func(p *PairParts, l results.Line) error) error {
	for _, p := range r.pairs() {
		err := ReadPair(ctx, r.Bucket, p, func(l results.Line) error {
			if l.Unscored {
				return nil
			}
			return fn(p, l)
		})
		if err != nil {
			return fmt.Errorf("%s: model %s on dataset %s: %w", r.Where, p.Model, p.Dataset, err)
		}
	}
	return nil
}

// Export writes the location's results.jsonl and summary.json into dir, as
// proctor run writes them, each replaced atomically.
func (r *Results) Export(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".results-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	w := bufio.NewWriterSize(f, 256<<10)
	err = r.Each(ctx, func(_ *PairParts, l results.Line) error {
		_, _ = w.Write(l.Record)
		return w.WriteByte('\n')
	})
	if err = errors.Join(err, w.Flush(), f.Chmod(0o644), f.Close()); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, results.ResultsFile)); err != nil {
		return err
	}
	sum := r.Manifest.Summary
	if len(sum) == 0 {
		sum = json.RawMessage(`{"results":[]}`)
	}
	var indented any
	if err := json.Unmarshal(sum, &indented); err != nil {
		return fmt.Errorf("%s: its summary: %w", r.Where, err)
	}
	return results.WriteSummary(dir, indented)
}

// Summaries are the run's summaries, from its summary.json; none before a
// run wrote one.
func (r *Results) Summaries() ([]results.Summary, error) {
	if len(r.Manifest.Summary) == 0 {
		return nil, nil
	}
	var sum summaryFile
	if err := json.Unmarshal(r.Manifest.Summary, &sum); err != nil {
		return nil, fmt.Errorf("%s: its summary: %w", r.Where, err)
	}
	return sum.Results, nil
}

// Records calls fn with every finished record, as Each orders them.
func (r *Results) Records(ctx context.Context, fn func(*results.Record)) error {
	return r.Each(ctx, func(_ *PairParts, l results.Line) error {
		var rec results.Record
		if err := json.Unmarshal(l.Record, &rec); err != nil {
			return fmt.Errorf("the record of sample %d: %w", l.Index, err)
		}
		fn(&rec)
		return nil
	})
}
