package score

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/proctor-dev/proctor/runner/provider"
)

// toolCall scores 1 when the model made every expected tool call.
type toolCall struct {
	base
	checkArgs bool
}

// wantCall is one expected tool call; args is nil when the dataset gave none.
type wantCall struct {
	name string
	args map[string]any
}

func (s *toolCall) Score(_ context.Context, in Input) (float64, error) {
	if !hasExpected(in) {
		return 0, ErrNoExpected
	}
	want, err := expectedCalls(in.Expected)
	if err != nil {
		return 0, err
	}
	if len(in.ToolCalls) < len(want) {
		// Covers "no tool calls at all"; each expected call needs its own actual call.
		return 0, nil
	}

	// Actual arguments are decoded lazily, at most once each, and only when needed.
	args := make([]any, len(in.ToolCalls))
	decoded := make([]bool, len(in.ToolCalls))
	matches := func(w wantCall, j int) bool {
		got := in.ToolCalls[j]
		if got.Name != w.name {
			return false
		}
		if !s.checkArgs || w.args == nil {
			return true
		}
		if !decoded[j] {
			args[j], decoded[j] = decodeArguments(got), true
		}
		return args[j] != nil && Subset(w.args, args[j])
	}
	return boolScore(matchAll(len(want), len(in.ToolCalls), func(i, j int) bool { return matches(want[i], j) })), nil
}

// decodeArguments decodes a call's arguments; an absent or null value is an empty
// object. It returns nil when the arguments are not a JSON object: a model that
// sent garbage has simply not made the expected call.
func decodeArguments(c provider.ToolCall) any {
	raw := bytes.TrimSpace(c.Arguments)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}
	}
	v, err := decodeJSON(string(raw))
	if err != nil {
		return nil
	}
	if _, ok := v.(map[string]any); !ok {
		return nil
	}
	return v
}

// matchAll reports whether each of n expected items can be paired with a distinct
// one of m actual items, where ok(i, j) says whether they may pair. A greedy
// pairing is not enough (an expected call without arguments could take the only
// actual call that a more specific expected call needs), so this finds a maximum
// bipartite matching with augmenting paths; n and m are tiny in practice.
func matchAll(n, m int, ok func(i, j int) bool) bool {
	owner := make([]int, m) // owner[j] is the expected item paired with actual j, or -1
	for j := range owner {
		owner[j] = -1
	}
	var try func(i int, seen []bool) bool
	try = func(i int, seen []bool) bool {
		for j := range m {
			if seen[j] || !ok(i, j) {
				continue
			}
			seen[j] = true
			if owner[j] < 0 || try(owner[j], seen) {
				owner[j] = i
				return true
			}
		}
		return false
	}
	for i := range n {
		if !try(i, make([]bool, m)) {
			return false
		}
	}
	return true
}

// expectedCalls reads the expected value of a tool_call sample: a tool name, an
// object {"name": ..., "arguments": {...}}, or a non-empty array of those.
func expectedCalls(v any) ([]wantCall, error) {
	list, ok := v.([]any)
	if !ok {
		w, err := expectedCall(v)
		if err != nil {
			return nil, err
		}
		return []wantCall{w}, nil
	}
	if len(list) == 0 {
		return nil, errors.New("expected tool calls: empty array")
	}
	calls := make([]wantCall, len(list))
	for i, e := range list {
		w, err := expectedCall(e)
		if err != nil {
			return nil, fmt.Errorf("expected tool call %d: %w", i+1, err)
		}
		calls[i] = w
	}
	return calls, nil
}

func expectedCall(v any) (wantCall, error) {
	switch v := v.(type) {
	case string:
		if v == "" {
			return wantCall{}, errors.New("expected tool name is empty")
		}
		return wantCall{name: v}, nil
	case map[string]any:
		var w wantCall
		for k, val := range v {
			switch k {
			case "name":
				name, ok := val.(string)
				if !ok || name == "" {
					return wantCall{}, fmt.Errorf("expected tool call has no valid \"name\" (got %s)", textForm(val))
				}
				w.name = name
			case "arguments":
				args, err := expectedArguments(val)
				if err != nil {
					return wantCall{}, err
				}
				w.args = args
			default:
				// Rejecting unknown keys catches typos such as "args", which would
				// otherwise silently skip the argument check.
				return wantCall{}, fmt.Errorf("expected tool call has unknown key %q (want \"name\" and \"arguments\")", k)
			}
		}
		if w.name == "" {
			return wantCall{}, errors.New("expected tool call has no \"name\"")
		}
		return w, nil
	}
	return wantCall{}, fmt.Errorf("expected tool call must be a tool name, an object {\"name\", \"arguments\"} or an array of them (got %s)", truncate(textForm(v), 80))
}

// expectedArguments reads expected arguments: an object, a string holding a JSON
// object (as OpenAI-style datasets carry them), or null for "any arguments".
func expectedArguments(v any) (map[string]any, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return v, nil
	case string:
		d, err := decodeJSON(v)
		if err != nil {
			return nil, fmt.Errorf("expected tool arguments %q are not valid JSON: %w", truncate(v, 80), err)
		}
		if m, ok := d.(map[string]any); ok {
			return m, nil
		}
	}
	return nil, fmt.Errorf("expected tool arguments must be a JSON object (got %s)", truncate(textForm(v), 80))
}
