package results

import (
	"encoding/json"
	"io"
)

// Collector picks one record per sample from a record log read in the order
// it was written, and gives them back in sample order. The rule for a sample
// with several records is: the one written last wins. A sample has several
// when --retry-errors ran it again (its newer record replaces the error), or
// when a cluster shard's runner sealed records into a chunk and died before
// its head said so (the records are the same).
//
// It holds a position per sample (P: where the record is, or the record
// itself for a log already in memory), never more: a local journal keeps
// offsets into its file (16 bytes a sample); a cluster collects one shard's
// records at a time.
type Collector[P any] struct {
	first int
	pos   []P
	has   []bool
}

// NewCollector collects the samples at positions [first, first+n).
func NewCollector[P any](first, n int) *Collector[P] {
	return &Collector[P]{first: first, pos: make([]P, n), has: make([]bool, n)}
}

// Add records that sample index's latest record is at p. A position outside
// the collector's range is ignored, and reported false.
func (c *Collector[P]) Add(index int, p P) bool {
	i := index - c.first
	if i < 0 || i >= len(c.pos) {
		return false
	}
	c.pos[i], c.has[i] = p, true
	return true
}

// Each calls fn with each sample's winning position, in sample order, until fn
// returns an error.
func (c *Collector[P]) Each(fn func(index int, p P) error) error {
	for i, ok := range c.has {
		if !ok {
			continue
		}
		if err := fn(c.first+i, c.pos[i]); err != nil {
			return err
		}
	}
	return nil
}

// Emit is the end of every collection: it decodes a winning record, counts it
// in agg and writes it, as a results.jsonl line, to w (when w is not nil).
func Emit(raw json.RawMessage, agg *Aggregate, w io.Writer) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, err
	}
	if agg != nil {
		agg.Add(&rec)
	}
	if w != nil {
		if _, err := w.Write(raw); err != nil {
			return nil, err
		}
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return nil, err
		}
	}
	return &rec, nil
}
