package dataset

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/proctor-dev/proctor/runner/provider"
)

// withDefaults fills the empty fields of m from DefaultMapping.
func (m Mapping) withDefaults() Mapping {
	def := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	return Mapping{
		ID:       def(m.ID, DefaultMapping.ID),
		Input:    def(m.Input, DefaultMapping.Input),
		Expected: def(m.Expected, DefaultMapping.Expected),
		Messages: def(m.Messages, DefaultMapping.Messages),
		Tools:    def(m.Tools, DefaultMapping.Tools),
	}
}

// sample maps a record that was read as an object into a Sample. A problem with
// the messages or tools field sets Err but keeps everything else, so that the
// errored result still carries the sample's real id.
func (m *Mapping) sample(rec map[string]any, index, line int, unit string) Sample {
	s := Sample{
		Index:  index,
		Line:   line,
		ID:     idText(rec[m.ID], rec, m.ID),
		Fields: rec,
		Input:  inputText(rec[m.Input]),
	}
	s.Expected, s.HasExpected = rec[m.Expected]
	var err error
	if s.Messages, err = parseMessages(rec[m.Messages]); err != nil {
		s.Err = &RecordError{Unit: unit, N: line, Field: m.Messages, Err: err}
		return s
	}
	if s.Tools, err = parseTools(rec[m.Tools]); err != nil {
		s.Err = &RecordError{Unit: unit, N: line, Field: m.Tools, Err: err}
	}
	return s
}

// idText is a record's id: strings as they are, numbers as written, compact
// JSON for anything else, and for a record without one a hash of its content
// (contentID), which stays the sample's identity when lines are added, removed
// or moved (a position would pair one question with another in a comparison).
func idText(v any, rec map[string]any, idField string) string {
	switch v := v.(type) {
	case nil:
		return contentID(rec, idField)
	case string:
		if v == "" {
			return contentID(rec, idField)
		}
		return v
	case json.Number:
		return string(v)
	default:
		return string(compactJSON(v))
	}
}

// ContentIDPrefix starts the id of a record that has none.
const ContentIDPrefix = "sha256:"

// contentID identifies a record by its content: the first 64 bits of the
// SHA-256 of its canonical JSON (keys sorted), enough that a million samples
// collide with a chance of one in thirty million. An empty id field is not
// content.
func contentID(rec map[string]any, idField string) string {
	if _, ok := rec[idField]; ok {
		rec = maps.Clone(rec)
		delete(rec, idField)
	}
	sum := sha256.Sum256(compactJSON(rec))
	return ContentIDPrefix + hex.EncodeToString(sum[:8])
}

// inputText is a record's input: strings as they are, absent or null as "",
// anything else as compact JSON.
func inputText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return string(compactJSON(v))
	}
}

// nested returns the value of a messages or tools field. A string holds the
// value as JSON text: csv has no other way to carry it, and JSON datasets
// exported from data frames often stringify nested columns too. An empty
// string means the field is not set.
func nested(v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return v, nil
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var d valueDecoder
	v, _, err := d.decode([]byte(s), "top-level value")
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	return v, nil
}

// parseMessages reads an OpenAI-style conversation. Absent, null and empty
// mean no messages.
func parseMessages(v any) ([]provider.Message, error) {
	return parseList(v, "message", parseMessage)
}

// parseList reads a field holding a list (or, see nested, JSON text of one),
// parsing each element; errors name the element ("message 2: ..."). Absent,
// null and empty mean none.
func parseList[T any](v any, what string, parse func(any) (T, error)) ([]T, error) {
	v, err := nested(v)
	if err != nil || v == nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, ErrNotArray
	}
	if len(arr) == 0 {
		return nil, nil
	}
	out := make([]T, len(arr))
	for i, e := range arr {
		if out[i], err = parse(e); err != nil {
			return nil, fmt.Errorf("%s %d: %w", what, i+1, err)
		}
	}
	return out, nil
}

func parseMessage(v any) (provider.Message, error) {
	var msg provider.Message
	obj, ok := v.(map[string]any)
	if !ok {
		return msg, ErrNotObject
	}
	role, err := stringField(obj, "role", true)
	if err != nil {
		return msg, err
	}
	switch role {
	case provider.RoleSystem, provider.RoleUser, provider.RoleAssistant, provider.RoleTool:
		msg.Role = role
	default:
		return msg, fmt.Errorf("unknown role %q", role)
	}
	if msg.Content, err = parseContent(obj["content"]); err != nil {
		return msg, err
	}
	if msg.ToolCalls, err = parseToolCalls(obj["tool_calls"]); err != nil {
		return msg, err
	}
	// Exports with one schema for every message give user messages an empty
	// or null tool_calls; only actual calls are out of place there.
	if len(msg.ToolCalls) > 0 && role != provider.RoleAssistant {
		return msg, fmt.Errorf("tool_calls in a %q message", role)
	}
	if role == provider.RoleTool {
		// Without the id no provider can tell which call the result answers.
		if msg.ToolCallID, err = stringField(obj, "tool_call_id", true); err != nil {
			return msg, err
		}
	}
	return msg, nil
}

// parseContent reads a message's content: a string, null, or an array of text
// parts whose texts are concatenated. Other parts (images, audio) cannot be
// passed on by every provider, so they are an error rather than dropped.
func parseContent(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []any:
		var b strings.Builder
		for i, p := range v {
			part, ok := p.(map[string]any)
			if !ok {
				return "", fmt.Errorf("content part %d: %w", i+1, ErrNotObject)
			}
			typ, err := stringField(part, "type", false)
			if err != nil {
				return "", fmt.Errorf("content part %d: %w", i+1, err)
			}
			if typ == "" && part["text"] == nil {
				return "", fmt.Errorf("content part %d: missing type", i+1)
			}
			if typ != "text" && typ != "" {
				return "", fmt.Errorf("content part %d: unsupported type %q", i+1, typ)
			}
			text, err := stringField(part, "text", false)
			if err != nil {
				return "", fmt.Errorf("content part %d: %w", i+1, err)
			}
			b.WriteString(text)
		}
		return b.String(), nil
	default:
		return "", errors.New("content is not a string, null or an array of parts")
	}
}

// parseToolCalls reads an assistant message's tool calls, in the OpenAI shape
// {id, type: "function", function: {name, arguments}} or flat {id, name, arguments}.
func parseToolCalls(v any) ([]provider.ToolCall, error) {
	if v == nil {
		return nil, nil
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("tool_calls: %w", ErrNotArray)
	}
	if len(arr) == 0 {
		return nil, nil
	}
	calls := make([]provider.ToolCall, len(arr))
	for i, e := range arr {
		call, err := parseToolCall(e)
		if err != nil {
			return nil, fmt.Errorf("tool call %d: %w", i+1, err)
		}
		calls[i] = call
	}
	return calls, nil
}

func parseToolCall(v any) (provider.ToolCall, error) {
	var call provider.ToolCall
	obj, ok := v.(map[string]any)
	if !ok {
		return call, ErrNotObject
	}
	var err error
	if call.ID, err = stringField(obj, "id", false); err != nil {
		return call, err
	}
	fn, err := functionOf(obj)
	if err != nil {
		return call, err
	}
	if call.Name, err = stringField(fn, "name", true); err != nil {
		return call, err
	}
	if call.Arguments, err = parseArguments(fn["arguments"]); err != nil {
		return call, err
	}
	return call, nil
}

// functionOf returns the object holding a tool's or tool call's name: the
// "function" member of the OpenAI shape, or obj itself in the flat shapes.
func functionOf(obj map[string]any) (map[string]any, error) {
	f, ok := obj["function"]
	if !ok {
		return obj, nil
	}
	if typ, err := stringField(obj, "type", false); err != nil {
		return nil, err
	} else if typ != "" && typ != "function" {
		return nil, fmt.Errorf("unsupported type %q", typ)
	}
	fn, ok := f.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("function: %w", ErrNotObject)
	}
	return fn, nil
}

// emptyArgs is the arguments of a call that has none: providers expect an object.
var emptyArgs = json.RawMessage("{}")

// parseArguments returns a tool call's arguments as a compact JSON object.
// OpenAI sends them as a JSON string, other sources as an object.
func parseArguments(v any) (json.RawMessage, error) {
	switch v := v.(type) {
	case nil:
		return emptyArgs, nil
	case string:
		if strings.TrimSpace(v) == "" {
			return emptyArgs, nil
		}
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(v)); err != nil {
			return nil, fmt.Errorf("arguments: invalid JSON: %w", err)
		}
		if b.Bytes()[0] != '{' {
			return nil, fmt.Errorf("arguments: %w", ErrNotObject)
		}
		return b.Bytes(), nil
	case map[string]any:
		return compactJSON(v), nil
	default:
		return nil, fmt.Errorf("arguments: %w", ErrNotObject)
	}
}

// parseTools reads tool definitions. Absent, null and empty mean no tools.
func parseTools(v any) ([]provider.Tool, error) {
	return parseList(v, "tool", parseTool)
}

// parseTool reads one tool in the OpenAI shape {type: "function", function:
// {name, description, parameters}}, flat {name, description, parameters}, or
// Anthropic's {name, description, input_schema}.
func parseTool(v any) (provider.Tool, error) {
	var tool provider.Tool
	obj, ok := v.(map[string]any)
	if !ok {
		return tool, ErrNotObject
	}
	fn, err := functionOf(obj)
	if err != nil {
		return tool, err
	}
	if tool.Name, err = stringField(fn, "name", true); err != nil {
		return tool, err
	}
	if tool.Description, err = stringField(fn, "description", false); err != nil {
		return tool, err
	}
	key := "parameters"
	if _, ok := fn[key]; !ok {
		key = "input_schema"
	}
	switch p := fn[key].(type) {
	case nil:
	case map[string]any:
		tool.Parameters = compactJSON(p)
	default:
		return tool, fmt.Errorf("%s: %w", key, ErrNotObject)
	}
	return tool, nil
}

// stringField returns obj[key], which must be a string when present (null
// counts as absent). A required field must be present and non-empty.
func stringField(obj map[string]any, key string, required bool) (string, error) {
	switch v := obj[key].(type) {
	case nil:
		if required {
			return "", fmt.Errorf("missing %s", key)
		}
		return "", nil
	case string:
		if v == "" && required {
			return "", fmt.Errorf("missing %s", key)
		}
		return v, nil
	default:
		return "", fmt.Errorf("%s is not a string", key)
	}
}
