// Package parquetpart writes and reads lines of a record log (results.Line)
// as Parquet parts, so that a run's records can live in an object store and
// be read there by any tool that reads Parquet (DuckDB, pandas, Spark) as
// well as by Proctor: one row a line, each field of the record a typed
// column, long text whole, zstd. Reading a part gives back the lines it was
// written from: the same positions, cache keys and records.
package parquetpart

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
)

// partRow is a line as a part's row. Every field of results.Record has its
// column (TestPartKeepsEveryField fails when one has none).
type partRow struct {
	Index             int64              `parquet:"index"`
	Unscored          bool               `parquet:"unscored"`
	CacheKey          string             `parquet:"cache_key"`
	ID                string             `parquet:"id"`
	Model             string             `parquet:"model,dict"`
	Dataset           string             `parquet:"dataset,dict"`
	Output            string             `parquet:"output"`
	Scores            map[string]float64 `parquet:"scores"`
	Error             string             `parquet:"error"`
	ErrorKind         string             `parquet:"error_kind,dict"`
	ScoreErrors       map[string]string  `parquet:"score_errors"`
	Rescored          bool               `parquet:"rescored"`
	Attempts          int64              `parquet:"attempts"`
	LatencyMillis     int64              `parquet:"latency_ms"`
	InputTokens       int64              `parquet:"input_tokens"`
	OutputTokens      int64              `parquet:"output_tokens"`
	ToolCalls         string             `parquet:"tool_calls"` // their JSON array; "" for none
	MaxTokensReached  bool               `parquet:"max_tokens_reached"`
	JudgeInputTokens  int64              `parquet:"judge_input_tokens"`
	JudgeOutputTokens int64              `parquet:"judge_output_tokens"`
	AgentCalls        int64              `parquet:"agent_calls"`
	ProxiedCalls      string             `parquet:"proxied_calls"` // their JSON array; "" for none
	OutputTruncated   bool               `parquet:"output_truncated"`
	OutputBytes       int64              `parquet:"output_bytes"`
	Cost              *float64           `parquet:"cost,optional"`
	JudgeCost         *float64           `parquet:"judge_cost,optional"`
	Batch             string             `parquet:"batch,dict"`
	JudgePending      []string           `parquet:"judge_pending,list"`
	Expected          string             `parquet:"expected"` // its JSON; "" for none
	Input             string             `parquet:"input"`    // its JSON array of messages; "" for none
	InputTruncated    bool               `parquet:"input_truncated"`
	Reasons           map[string]string  `parquet:"reasons"`
	StartedAt         *time.Time         `parquet:"started_at,timestamp(millisecond),optional"`
	EndedAt           *time.Time         `parquet:"ended_at,timestamp(millisecond),optional"`
}

func rowOf(l results.Line) (partRow, error) {
	var r results.Record
	if err := json.Unmarshal(l.Record, &r); err != nil {
		return partRow{}, fmt.Errorf("the record of sample %d: %w", l.Index, err)
	}
	row := partRow{
		Index: int64(l.Index), Unscored: l.Unscored, CacheKey: l.Key,
		ID: r.ID, Model: r.Model, Dataset: r.Dataset, Output: r.Output, Scores: r.Scores,
		Error: r.Error, ErrorKind: r.ErrorKind, ScoreErrors: r.ScoreErrors, Rescored: r.Rescored,
		Attempts: int64(r.Attempts), LatencyMillis: r.LatencyMillis, InputTokens: r.InputTokens, OutputTokens: r.OutputTokens,
		MaxTokensReached: r.MaxTokensReached, JudgeInputTokens: r.JudgeInputTokens, JudgeOutputTokens: r.JudgeOutputTokens,
		AgentCalls: r.AgentCalls, OutputTruncated: r.OutputTruncated, OutputBytes: int64(r.OutputBytes),
		Cost: r.Cost, JudgeCost: r.JudgeCost, Batch: r.Batch, JudgePending: r.JudgePending,
		Expected: string(r.Expected), StartedAt: r.StartedAt, EndedAt: r.EndedAt,
		InputTruncated: r.InputTruncated, Reasons: r.Reasons,
	}
	if len(r.Input) > 0 {
		b, err := json.Marshal(r.Input)
		if err != nil {
			return partRow{}, fmt.Errorf("the input of sample %d: %w", l.Index, err)
		}
		row.Input = string(b)
	}
	if len(r.ToolCalls) > 0 {
		b, err := json.Marshal(r.ToolCalls)
		if err != nil {
			return partRow{}, fmt.Errorf("the tool calls of sample %d: %w", l.Index, err)
		}
		row.ToolCalls = string(b)
	}
	if len(r.ProxiedCalls) > 0 {
		b, err := json.Marshal(r.ProxiedCalls)
		if err != nil {
			return partRow{}, fmt.Errorf("the proxied calls of sample %d: %w", l.Index, err)
		}
		row.ProxiedCalls = string(b)
	}
	return row, nil
}

func lineOf(row *partRow) (results.Line, error) {
	r := results.Record{
		ID: row.ID, Model: row.Model, Dataset: row.Dataset, Output: row.Output, Scores: row.Scores,
		Error: row.Error, ErrorKind: row.ErrorKind, ScoreErrors: row.ScoreErrors, Rescored: row.Rescored,
		Attempts: int(row.Attempts), LatencyMillis: row.LatencyMillis, InputTokens: row.InputTokens, OutputTokens: row.OutputTokens,
		MaxTokensReached: row.MaxTokensReached, JudgeInputTokens: row.JudgeInputTokens, JudgeOutputTokens: row.JudgeOutputTokens,
		AgentCalls: row.AgentCalls, OutputTruncated: row.OutputTruncated, OutputBytes: int(row.OutputBytes),
		Cost: row.Cost, JudgeCost: row.JudgeCost, Batch: row.Batch, JudgePending: row.JudgePending,
		StartedAt: utc(row.StartedAt), EndedAt: utc(row.EndedAt),
		InputTruncated: row.InputTruncated, Reasons: row.Reasons,
	}
	if row.Input != "" {
		if err := json.Unmarshal([]byte(row.Input), &r.Input); err != nil {
			return results.Line{}, fmt.Errorf("the input of sample %d: %w", row.Index, err)
		}
	}
	if row.Expected != "" {
		r.Expected = json.RawMessage(row.Expected)
	}
	if row.ToolCalls != "" {
		var calls []provider.ToolCall
		if err := json.Unmarshal([]byte(row.ToolCalls), &calls); err != nil {
			return results.Line{}, fmt.Errorf("the tool calls of sample %d: %w", row.Index, err)
		}
		r.ToolCalls = calls
	}
	if row.ProxiedCalls != "" {
		if err := json.Unmarshal([]byte(row.ProxiedCalls), &r.ProxiedCalls); err != nil {
			return results.Line{}, fmt.Errorf("the proxied calls of sample %d: %w", row.Index, err)
		}
	}
	b, err := json.Marshal(&r)
	if err != nil {
		return results.Line{}, err
	}
	return results.Line{Index: int(row.Index), Key: row.CacheKey, Unscored: row.Unscored, Record: b}, nil
}

// utc is t in UTC, as records hold their times.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Write writes lines to w as one Parquet part.
func Write(w io.Writer, lines []results.Line) error {
	rows := make([]partRow, 0, len(lines))
	for _, l := range lines {
		row, err := rowOf(l)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	pw := parquet.NewGenericWriter[partRow](w, parquet.Compression(&parquet.Zstd))
	if _, err := pw.Write(rows); err != nil {
		return fmt.Errorf("writing a Parquet part: %w", err)
	}
	if err := pw.Close(); err != nil {
		return fmt.Errorf("writing a Parquet part: %w", err)
	}
	return nil
}

// Read calls fn with each line of the Parquet part r holds (size bytes),
// in the order they were written. Only the columns' pages are read, as fn
// needs them: r may read a remote object by ranges.
func Read(r io.ReaderAt, size int64, fn func(results.Line) error) error {
	pr, err := NewReader(r, size)
	if err != nil {
		return err
	}
	defer pr.Close()
	for {
		l, err := pr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(l); err != nil {
			return err
		}
	}
}

// Reader reads a part's lines one at a time, a few hundred rows decoded
// at once: readers merging many parts pull from each in turn.
type Reader struct {
	pr   *parquet.GenericReader[partRow]
	buf  []partRow
	next int
	err  error
}

// NewReader opens the Parquet part r holds (size bytes).
func NewReader(r io.ReaderAt, size int64) (*Reader, error) {
	f, err := parquet.OpenFile(r, size)
	if err != nil {
		return nil, fmt.Errorf("reading a Parquet part: %w", err)
	}
	return &Reader{pr: parquet.NewGenericReader[partRow](f)}, nil
}

// Next returns the next line, or io.EOF after the last.
func (r *Reader) Next() (results.Line, error) {
	for r.next >= len(r.buf) {
		if r.err != nil {
			return results.Line{}, r.err
		}
		if cap(r.buf) == 0 {
			r.buf = make([]partRow, 256)
		}
		n, err := r.pr.Read(r.buf[:cap(r.buf)])
		r.buf, r.next = r.buf[:n], 0
		switch {
		case errors.Is(err, io.EOF):
			r.err = io.EOF
		case err != nil:
			r.err = fmt.Errorf("reading a Parquet part: %w", err)
		}
	}
	row := &r.buf[r.next]
	r.next++
	return lineOf(row)
}

// Close releases the reader.
func (r *Reader) Close() error { return r.pr.Close() }
