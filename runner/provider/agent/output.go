package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/anthropic"
)

// Format is what an agent prints on its standard output.
type Format string

const (
	// FormatText: the output is the answer (the default, also "").
	FormatText Format = "text"
	// FormatClaudeCode: Claude Code's `-p --output-format json` result object
	// (also as the last element of the array --verbose prints), or its
	// `stream-json` lines, the last of which is the result.
	FormatClaudeCode Format = "claude-code"
	// FormatCodex: the JSON Lines events of `codex exec --json`.
	FormatCodex Format = "codex"
)

func (f Format) check() error {
	switch f {
	case "", FormatText, FormatClaudeCode, FormatCodex:
		return nil
	}
	return fmt.Errorf("output format %q is not text, claude-code or codex", f)
}

// OutputError is an agent whose output is not in its declared format, or
// that reported its own failure there: the sample's error, not retried.
type OutputError struct{ Msg string }

func (e *OutputError) Error() string { return e.Msg }

// readOutput turns what the agent printed, in format f, into its answer and
// the usage (and cost) it reported. resp.Text is the whole output.
func readOutput(f Format, resp *provider.Response) error {
	switch f {
	case "", FormatText:
		return nil
	}
	if resp.Truncated {
		return &OutputError{Msg: fmt.Sprintf("the agent's output (%d bytes) passed the output cap, so its %s report could not be read", resp.FullBytes, f)}
	}
	out := []byte(resp.Text)
	switch f {
	case FormatClaudeCode:
		return readClaudeCode(out, resp)
	case FormatCodex:
		return readCodex(out, resp)
	}
	return f.check()
}

// claudeResult is Claude Code's result message: what `--output-format json`
// prints, and the last line of stream-json.
type claudeResult struct {
	Type         string          `json:"type"`
	Subtype      string          `json:"subtype"`
	IsError      bool            `json:"is_error"`
	Result       *string         `json:"result"`
	TotalCostUSD *float64        `json:"total_cost_usd"`
	Usage        anthropic.Usage `json:"usage"`
}

func readClaudeCode(out []byte, resp *provider.Response) error {
	r, err := findClaudeResult(out)
	if err != nil {
		return err
	}
	if r.IsError || r.Result == nil {
		what := r.Subtype
		if r.Result != nil && *r.Result != "" {
			what += ": " + *r.Result
		}
		return &OutputError{Msg: "Claude Code reported an error (" + strings.TrimPrefix(what, ": ") + ")"}
	}
	resp.Text, resp.Usage, resp.ReportedCost = *r.Result, r.Usage.Usage(), r.TotalCostUSD
	return nil
}

// findClaudeResult finds the result message in Claude Code's output: the
// whole output (an object, or the array --verbose prints), else its last
// line that is one (stream-json).
func findClaudeResult(out []byte) (*claudeResult, error) {
	trimmed := bytes.TrimSpace(out)
	var one claudeResult
	if json.Unmarshal(trimmed, &one) == nil && one.Type == "result" {
		return &one, nil
	}
	var all []claudeResult
	if json.Unmarshal(trimmed, &all) == nil {
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].Type == "result" {
				return &all[i], nil
			}
		}
	}
	lines := bytes.Split(trimmed, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var r claudeResult
		if json.Unmarshal(bytes.TrimSpace(lines[i]), &r) == nil && r.Type == "result" {
			return &r, nil
		}
	}
	return nil, &OutputError{Msg: fmt.Sprintf("the agent's output is not Claude Code's JSON result (run it with -p --output-format json or stream-json): %s", head(trimmed))}
}

// codexEvent is one line of `codex exec --json`.
type codexEvent struct {
	Type string `json:"type"`
	Item *struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"item"`
	Usage *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func readCodex(out []byte, resp *provider.Response) error {
	var answer *string
	var usage provider.Usage
	var events int
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), len(out)+1)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		var ev codexEvent
		if len(line) == 0 || json.Unmarshal(line, &ev) != nil || ev.Type == "" {
			continue // not an event: a line some wrapper printed
		}
		events++
		switch ev.Type {
		case "item.completed":
			// agent_message; assistant_message in Codex's first releases.
			if ev.Item != nil && (ev.Item.Type == "agent_message" || ev.Item.Type == "assistant_message") {
				answer = &ev.Item.Text
			}
		case "turn.completed":
			if u := ev.Usage; u != nil {
				// OpenAI's input_tokens include the cached ones.
				usage.InputTokens += u.InputTokens
				usage.CachedInputTokens += u.CachedInputTokens
				usage.OutputTokens += u.OutputTokens
			}
		case "turn.failed":
			msg := "no message"
			if ev.Error != nil && ev.Error.Message != "" {
				msg = ev.Error.Message
			}
			return &OutputError{Msg: "Codex reported a failed turn: " + msg}
		}
	}
	if err := sc.Err(); err != nil {
		return &OutputError{Msg: fmt.Sprintf("reading the agent's Codex events: %v", err)}
	}
	switch {
	case events == 0:
		return &OutputError{Msg: fmt.Sprintf("the agent's output holds no Codex events (run it as codex exec --json): %s", head(bytes.TrimSpace(out)))}
	case answer == nil:
		return &OutputError{Msg: "Codex's events hold no agent message: the agent gave no answer"}
	}
	resp.Text, resp.Usage = *answer, usage
	return nil
}

// head is the start of an output, for an error message.
func head(b []byte) string {
	const n = 200
	if len(b) == 0 {
		return "(empty)"
	}
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
