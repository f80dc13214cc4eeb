package score

import (
	"encoding/json"
	"testing"

	"github.com/proctor-dev/proctor/runner/provider"
)

// call builds an actual tool call with raw JSON arguments.
func call(name, args string) provider.ToolCall {
	return provider.ToolCall{ID: "call_" + name, Name: name, Arguments: json.RawMessage(args)}
}

// calls is an Input with the given actual calls and expected value.
func calls(expected any, cs ...provider.ToolCall) Input {
	return Input{ToolCalls: cs, Expected: expected, HasExpected: true}
}

func TestToolCall(t *testing.T) {
	obj := func(s string) any { return mustJSON(t, s) }
	weather := call("get_weather", `{"city": "Paris", "unit": "C"}`)
	search := call("search", `{"q": "go"}`)
	withArgs := Config{CheckArguments: true}

	runScoreCases(t, TypeToolCall, nil, []scoreCase{
		// Name only.
		{name: "name string", in: calls("get_weather", weather), want: 1},
		{name: "wrong name", in: calls("get_time", weather), want: 0},
		{name: "name among several calls", in: calls("search", weather, search), want: 1},
		{name: "no tool calls", in: calls("get_weather"), want: 0},
		{name: "object ignores arguments without CheckArguments",
			in: calls(obj(`{"name": "get_weather", "arguments": {"city": "Rome"}}`), weather), want: 1},

		// Arguments.
		{name: "arguments subset", cfg: withArgs,
			in: calls(obj(`{"name": "get_weather", "arguments": {"city": "Paris"}}`), weather), want: 1},
		{name: "arguments all", cfg: withArgs,
			in: calls(obj(`{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}`), weather), want: 1},
		{name: "arguments differ", cfg: withArgs,
			in: calls(obj(`{"name": "get_weather", "arguments": {"city": "Rome"}}`), weather), want: 0},
		{name: "arguments missing key", cfg: withArgs,
			in: calls(obj(`{"name": "get_weather", "arguments": {"days": 3}}`), weather), want: 0},
		{name: "arguments as JSON string", cfg: withArgs,
			in: calls(obj(`{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}`), weather), want: 1},
		{name: "arguments numbers compare numerically", cfg: withArgs,
			in: calls(obj(`{"name": "f", "arguments": {"n": 2}}`), call("f", `{"n": 2.0}`)), want: 1},
		{name: "no expected arguments means any", cfg: withArgs,
			in: calls(obj(`{"name": "get_weather"}`), weather), want: 1},
		{name: "null expected arguments means any", cfg: withArgs,
			in: calls(obj(`{"name": "get_weather", "arguments": null}`), weather), want: 1},
		{name: "name string with CheckArguments", cfg: withArgs, in: calls("get_weather", weather), want: 1},
		{name: "empty expected arguments vs absent actual", cfg: withArgs,
			in: calls(obj(`{"name": "now", "arguments": {}}`), call("now", "")), want: 1},
		{name: "actual arguments not an object", cfg: withArgs,
			in: calls(obj(`{"name": "f", "arguments": {}}`), call("f", `"{}"`)), want: 0},
		{name: "actual arguments malformed", cfg: withArgs,
			in: calls(obj(`{"name": "f", "arguments": {"a": 1}}`), call("f", `{"a": 1`)), want: 0},
		{name: "right arguments on another call", cfg: withArgs,
			in: calls(obj(`{"name": "get_weather", "arguments": {"city": "Paris"}}`),
				call("get_weather", `{"city": "Rome"}`), weather), want: 1},

		// Several expected calls.
		{name: "all expected calls, any order", in: calls([]any{"search", "get_weather"}, weather, search), want: 1},
		{name: "one expected call missing", in: calls([]any{"search", "get_time"}, weather, search), want: 0},
		{name: "each expected call needs its own actual call", in: calls([]any{"search", "search"}, search, weather), want: 0},
		{name: "repeated calls", in: calls([]any{"search", "search"}, search, weather, search), want: 1},
		{name: "mixed string and object", cfg: withArgs,
			in: calls([]any{"search", obj(`{"name": "get_weather", "arguments": {"unit": "C"}}`)}, weather, search), want: 1},
		{name: "matching is not greedy", cfg: withArgs,
			// A greedy pass would give the first actual call to the unconstrained
			// expected call and then fail the constrained one.
			in: calls([]any{obj(`{"name": "f"}`), obj(`{"name": "f", "arguments": {"x": 1}}`)},
				call("f", `{"x": 1}`), call("f", `{"x": 2}`)), want: 1},
		{name: "same arguments twice need two calls", cfg: withArgs,
			in: calls([]any{obj(`{"name": "f", "arguments": {"x": 1}}`), obj(`{"name": "f", "arguments": {"x": 1}}`)},
				call("f", `{"x": 1}`), call("f", `{"x": 2}`)), want: 0},

		// Malformed expected values.
		{name: "empty name", in: calls("", weather), wantErr: "expected tool name is empty"},
		{name: "number", in: calls(num("3"), weather),
			wantErr: `expected tool call must be a tool name, an object {"name", "arguments"} or an array of them (got 3)`},
		{name: "object without name", in: calls(obj(`{"arguments": {}}`), weather), wantErr: `expected tool call has no "name"`},
		{name: "name not a string", in: calls(obj(`{"name": 3}`), weather), wantErr: `expected tool call has no valid "name" (got 3)`},
		{name: "unknown key", in: calls(obj(`{"name": "f", "args": {}}`), weather), wantErr: `unknown key "args"`},
		{name: "arguments not an object", in: calls(obj(`{"name": "f", "arguments": [1]}`), weather),
			wantErr: "expected tool arguments must be a JSON object (got [1])"},
		{name: "arguments string not JSON", in: calls(obj(`{"name": "f", "arguments": "city=Paris"}`), weather),
			wantErr: `expected tool arguments "city=Paris" are not valid JSON`},
		{name: "arguments string not an object", in: calls(obj(`{"name": "f", "arguments": "[1]"}`), weather),
			wantErr: "expected tool arguments must be a JSON object"},
		{name: "empty array", in: calls([]any{}, weather), wantErr: "expected tool calls: empty array"},
		{name: "bad array element", in: calls([]any{"f", true}, weather), wantErr: "expected tool call 2: expected tool call must be"},
		{name: "nested array", in: calls([]any{[]any{"f"}}, weather), wantErr: "expected tool call 1:"},
		{name: "malformed even without tool calls", in: calls(true), wantErr: "expected tool call must be"},
	})
}
