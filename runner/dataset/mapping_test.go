package dataset

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
)

func msg(role, content string) provider.Message {
	return provider.Message{Role: role, Content: content}
}

func messages(m ...provider.Message) []provider.Message { return m }

// conversation maps one jsonl record and returns its messages, tools and error.
func conversation(t *testing.T, record string) ([]provider.Message, []provider.Tool, string) {
	t.Helper()
	// The table writes records over several lines for legibility; jsonl needs one.
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(record)); err != nil {
		t.Fatalf("bad test record %s: %v", record, err)
	}
	got, err := read(t, FormatJSONL, b.String(), Mapping{})
	if err != nil || len(got) != 1 {
		t.Fatalf("read %s: %d samples, %v", record, len(got), err)
	}
	errMsg := ""
	if got[0].Err != nil {
		errMsg = got[0].Err.Error()
	}
	return got[0].Messages, got[0].Tools, errMsg
}

func TestMessages(t *testing.T) {
	weather := json.RawMessage(`{"city":"Paris","days":2}`)
	tests := []struct {
		name     string
		messages string // the value of the messages field
		want     []provider.Message
		err      string
	}{
		{name: "absent", messages: ""},
		{name: "null", messages: `null`},
		{name: "empty", messages: `[]`},
		{
			name:     "plain conversation",
			messages: `[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":null},{"role":"user"}]`,
			want:     messages(msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", ""), msg("user", "")),
		},
		{
			name:     "content parts are concatenated",
			messages: `[{"role":"user","content":[{"type":"text","text":"Hello, "},{"type":"text","text":"world"},{"text":"!"}]}]`,
			want:     messages(msg("user", "Hello, world!")),
		},
		{
			name: "OpenAI tool calls with string and object arguments",
			messages: `[{"role":"user","content":"weather?"},
				{"role":"assistant","content":null,"tool_calls":[
					{"id":"c1","type":"function","function":{"name":"weather","arguments":"{\"city\": \"Paris\", \"days\": 2}"}},
					{"id":"c2","type":"function","function":{"name":"weather","arguments":{"days":2,"city":"Paris"}}},
					{"id":"c3","type":"function","function":{"name":"now","arguments":""}},
					{"id":"c4","function":{"name":"now"}}]},
				{"role":"tool","tool_call_id":"c1","content":"sunny"}]`,
			want: []provider.Message{
				msg("user", "weather?"),
				{Role: "assistant", ToolCalls: []provider.ToolCall{
					{ID: "c1", Name: "weather", Arguments: weather},
					{ID: "c2", Name: "weather", Arguments: weather},
					{ID: "c3", Name: "now", Arguments: json.RawMessage(`{}`)},
					{ID: "c4", Name: "now", Arguments: json.RawMessage(`{}`)},
				}},
				{Role: "tool", Content: "sunny", ToolCallID: "c1"},
			},
		},
		{
			name:     "flat tool calls",
			messages: `[{"role":"assistant","tool_calls":[{"id":"c1","name":"weather","arguments":{"city":"Paris","days":2}},{"name":"now","arguments":null}]}]`,
			want: messages(provider.Message{Role: "assistant", ToolCalls: []provider.ToolCall{
				{ID: "c1", Name: "weather", Arguments: weather},
				{Name: "now", Arguments: json.RawMessage(`{}`)},
			}}),
		},
		{
			name:     "messages as a JSON string",
			messages: `"[{\"role\":\"user\",\"content\":\"hi\"}]"`,
			want:     messages(msg("user", "hi")),
		},
		{name: "empty string", messages: `""`},
		{name: "not an array", messages: `{"role":"user"}`, err: `line 1: field "messages": not a JSON array`},
		{name: "string that is not JSON", messages: `"hello"`, err: `line 1: field "messages": invalid JSON: invalid character 'h' looking for beginning of value`},
		{name: "message not an object", messages: `[{"role":"user"},"hi"]`, err: `line 1: field "messages": message 2: not a JSON object`},
		{name: "unknown role", messages: `[{"role":"user"},{"role":"bot","content":"x"}]`, err: `line 1: field "messages": message 2: unknown role "bot"`},
		{name: "missing role", messages: `[{"content":"x"}]`, err: `line 1: field "messages": message 1: missing role`},
		{name: "role not a string", messages: `[{"role":1}]`, err: `line 1: field "messages": message 1: role is not a string`},
		{name: "content a number", messages: `[{"role":"user","content":1}]`, err: `line 1: field "messages": message 1: content is not a string, null or an array of parts`},
		{name: "image part", messages: `[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{}}]}]`, err: `line 1: field "messages": message 1: content part 2: unsupported type "image_url"`},
		{name: "part without type or text", messages: `[{"role":"user","content":[{}]}]`, err: `line 1: field "messages": message 1: content part 1: missing type`},
		{name: "part text not a string", messages: `[{"role":"user","content":[{"type":"text","text":1}]}]`, err: `line 1: field "messages": message 1: content part 1: text is not a string`},
		{
			name:     "uniform schema with empty tool fields",
			messages: `[{"role":"user","content":"hi","tool_calls":[],"tool_call_id":null},{"role":"assistant","content":"yo","tool_calls":null,"tool_call_id":null}]`,
			want:     messages(msg("user", "hi"), msg("assistant", "yo")),
		},
		{name: "tool calls on a user message", messages: `[{"role":"user","tool_calls":[{"name":"f"}]}]`, err: `line 1: field "messages": message 1: tool_calls in a "user" message`},
		{name: "tool calls not an array", messages: `[{"role":"assistant","tool_calls":{}}]`, err: `line 1: field "messages": message 1: tool_calls: not a JSON array`},
		{name: "tool call without name", messages: `[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"arguments":"{}"}}]}]`, err: `line 1: field "messages": message 1: tool call 1: missing name`},
		{name: "tool call of another type", messages: `[{"role":"assistant","tool_calls":[{"type":"custom","function":{"name":"f"}}]}]`, err: `line 1: field "messages": message 1: tool call 1: unsupported type "custom"`},
		{name: "arguments not JSON", messages: `[{"role":"assistant","tool_calls":[{"name":"f","arguments":"{city: Paris}"}]}]`, err: `line 1: field "messages": message 1: tool call 1: arguments: invalid JSON: invalid character 'c' looking for beginning of object key string`},
		{name: "arguments a JSON array", messages: `[{"role":"assistant","tool_calls":[{"name":"f","arguments":"[1]"}]}]`, err: `line 1: field "messages": message 1: tool call 1: arguments: not a JSON object`},
		{name: "arguments a number", messages: `[{"role":"assistant","tool_calls":[{"name":"f","arguments":3}]}]`, err: `line 1: field "messages": message 1: tool call 1: arguments: not a JSON object`},
		{name: "tool message without id", messages: `[{"role":"tool","content":"x"}]`, err: `line 1: field "messages": message 1: missing tool_call_id`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			record := `{"id":"s"}`
			if tc.messages != "" {
				record = `{"id":"s","messages":` + tc.messages + `}`
			}
			got, _, err := conversation(t, record)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
			if err != tc.err {
				t.Errorf("error = %q, want %q", err, tc.err)
			}
		})
	}
}

func TestTools(t *testing.T) {
	schema := json.RawMessage(`{"properties":{"city":{"type":"string"}},"type":"object"}`)
	tests := []struct {
		name  string
		tools string
		want  []provider.Tool
		err   string
	}{
		{name: "null", tools: `null`},
		{
			name: "all three shapes",
			tools: `[{"type":"function","function":{"name":"weather","description":"Forecast.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
				{"name":"weather","description":"Forecast.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},
				{"name":"weather","description":"Forecast.","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},
				{"name":"now"}]`,
			want: []provider.Tool{
				{Name: "weather", Description: "Forecast.", Parameters: schema},
				{Name: "weather", Description: "Forecast.", Parameters: schema},
				{Name: "weather", Description: "Forecast.", Parameters: schema},
				{Name: "now"},
			},
		},
		{name: "as a JSON string", tools: `"[{\"name\":\"now\"}]"`, want: []provider.Tool{{Name: "now"}}},
		{name: "not an array", tools: `{"name":"now"}`, err: `line 1: field "tools": not a JSON array`},
		{name: "missing name", tools: `[{"name":"a"},{"type":"function","function":{"description":"x"}}]`, err: `line 1: field "tools": tool 2: missing name`},
		{name: "tool not an object", tools: `["now"]`, err: `line 1: field "tools": tool 1: not a JSON object`},
		{name: "function not an object", tools: `[{"type":"function","function":"now"}]`, err: `line 1: field "tools": tool 1: function: not a JSON object`},
		{name: "parameters not an object", tools: `[{"name":"a","parameters":"{}"}]`, err: `line 1: field "tools": tool 1: parameters: not a JSON object`},
		{name: "input_schema not an object", tools: `[{"name":"a","input_schema":[]}]`, err: `line 1: field "tools": tool 1: input_schema: not a JSON object`},
		{name: "description not a string", tools: `[{"name":"a","description":1}]`, err: `line 1: field "tools": tool 1: description is not a string`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := conversation(t, `{"id":"s","tools":`+tc.tools+`}`)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
			if err != tc.err {
				t.Errorf("error = %q, want %q", err, tc.err)
			}
		})
	}
}

func TestMappedFieldErrorKeepsSample(t *testing.T) {
	// A bad tools field still yields the sample's real id and fields, so the
	// errored result can be reported against the right sample.
	got, err := read(t, FormatJSONL, `{"qid":"k","in":"x","calls":[{"role":"user","content":"x"}],"fns":[{}]}`,
		Mapping{ID: "qid", Input: "in", Messages: "calls", Tools: "fns"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{{
		Index: 0, Line: 1, ID: "k", Input: "x",
		Fields: map[string]any{
			"qid": "k", "in": "x",
			"calls": []any{map[string]any{"role": "user", "content": "x"}},
			"fns":   []any{map[string]any{}},
		},
		Messages: messages(msg("user", "x")),
		Err:      recErr("line", 1, "fns", "tool 1: missing name"),
	}}
	if diff := cmp.Diff(want, got, errText); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCSVMessagesAsJSON(t *testing.T) {
	data := "id,messages,tools\n" +
		`a,"[{""role"":""user"",""content"":""hi""}]","[{""name"":""now""}]"` + "\n" +
		"b,,\n" +
		`c,"[{""role"":""bot""}]",` + "\n"
	got, err := read(t, FormatCSV, data, Mapping{})
	if err != nil {
		t.Fatal(err)
	}
	type brief struct {
		ID       string
		Messages []provider.Message
		Tools    []provider.Tool
		Err      string
	}
	var gotBrief []brief
	for _, s := range got {
		b := brief{ID: s.ID, Messages: s.Messages, Tools: s.Tools}
		if s.Err != nil {
			b.Err = s.Err.Error()
		}
		gotBrief = append(gotBrief, b)
	}
	want := []brief{
		{ID: "a", Messages: messages(msg("user", "hi")), Tools: []provider.Tool{{Name: "now"}}},
		{ID: "b"},
		{ID: "c", Err: `line 4: field "messages": message 1: unknown role "bot"`},
	}
	if diff := cmp.Diff(want, gotBrief); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestMappingDefaults(t *testing.T) {
	got := Mapping{Input: "question"}.withDefaults()
	want := Mapping{ID: "id", Input: "question", Expected: "expected", Messages: "messages", Tools: "tools"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
