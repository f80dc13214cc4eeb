package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Outputs as Claude Code (`-p --output-format json`, `stream-json`, and json
// with --verbose) and `codex exec --json` print them.
const (
	claudeJSON = `{"type":"result","subtype":"success","is_error":false,"duration_ms":2814,"duration_api_ms":3120,"num_turns":2,` +
		`"result":"The answer is 42.","session_id":"5f2c","total_cost_usd":0.0217,` +
		`"usage":{"input_tokens":12,"cache_creation_input_tokens":3000,"cache_read_input_tokens":11000,"output_tokens":250,"service_tier":"standard"}}`
	claudeStream = `{"type":"system","subtype":"init","session_id":"5f2c","tools":["Bash","Read"],"model":"claude-sonnet-4-5"}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Working on it"}],"usage":{"input_tokens":5,"output_tokens":9}}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"ok"}]}}
` + claudeJSON + "\n"
	claudeVerbose = `[{"type":"system","subtype":"init"},{"type":"assistant","message":{"content":[]}},` + claudeJSON + `]`
	claudeFailed  = `{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":10,"total_cost_usd":0.5,"usage":{"input_tokens":1,"output_tokens":2}}`

	codexEvents = `{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Reading the task**"}}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"main.go\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"First look done."}}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}
{"type":"turn.started"}
{"type":"error","message":"retrying: stream disconnected"}
{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"The answer is 42."}}
{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":0,"output_tokens":30}}
`
	codexFailed = `{"type":"thread.started","thread_id":"x"}
{"type":"turn.started"}
{"type":"turn.failed","error":{"message":"stream error: exceeded retry limit"}}
`
)

func TestReadOutput(t *testing.T) {
	claudeUsage := provider.Usage{InputTokens: 14012, OutputTokens: 250, CachedInputTokens: 11000, CacheWriteInputTokens: 3000}
	cases := []struct {
		name      string
		format    Format
		out       string
		truncated bool
		want      *provider.Response
		wantErr   string
	}{
		{name: "text is the answer", format: FormatText, out: "42\n", want: &provider.Response{Text: "42\n"}},
		{name: "no format is text", out: claudeJSON, want: &provider.Response{Text: claudeJSON}},
		{name: "claude-code json", format: FormatClaudeCode, out: claudeJSON + "\n",
			want: &provider.Response{Text: "The answer is 42.", Usage: claudeUsage, ReportedCost: new(0.0217)}},
		{name: "claude-code stream-json", format: FormatClaudeCode, out: claudeStream,
			want: &provider.Response{Text: "The answer is 42.", Usage: claudeUsage, ReportedCost: new(0.0217)}},
		{name: "claude-code json --verbose", format: FormatClaudeCode, out: claudeVerbose,
			want: &provider.Response{Text: "The answer is 42.", Usage: claudeUsage, ReportedCost: new(0.0217)}},
		{name: "claude-code reporting its failure", format: FormatClaudeCode, out: claudeFailed,
			wantErr: "Claude Code reported an error (error_max_turns)"},
		{name: "claude-code run as text", format: FormatClaudeCode, out: "The answer is 42.\n",
			wantErr: `the agent's output is not Claude Code's JSON result (run it with -p --output-format json or stream-json): "The answer is 42."`},
		{name: "claude-code with nothing printed", format: FormatClaudeCode, out: "",
			wantErr: "not Claude Code's JSON result (run it with -p --output-format json or stream-json): (empty)"},
		{name: "codex events", format: FormatCodex, out: codexEvents,
			want: &provider.Response{Text: "The answer is 42.", Usage: provider.Usage{InputTokens: 25763, CachedInputTokens: 24448, OutputTokens: 152}}},
		{name: "codex failed turn", format: FormatCodex, out: codexFailed,
			wantErr: "Codex reported a failed turn: stream error: exceeded retry limit"},
		{name: "codex without an answer", format: FormatCodex, out: `{"type":"thread.started","thread_id":"x"}` + "\n",
			wantErr: "Codex's events hold no agent message"},
		{name: "codex run as text", format: FormatCodex, out: "42\n",
			wantErr: `the agent's output holds no Codex events (run it as codex exec --json): "42"`},
		{name: "a report past the output cap", format: FormatCodex, out: codexEvents[:100], truncated: true,
			wantErr: "passed the output cap, so its codex report could not be read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := &provider.Response{Text: tc.out, Truncated: tc.truncated}
			if tc.truncated {
				resp.FullBytes = 20 << 20
			}
			err := readOutput(tc.format, resp)
			if tc.wantErr != "" {
				var oe *OutputError
				if !errors.As(err, &oe) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want an *OutputError saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, resp); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnknownOutputFormat(t *testing.T) {
	_, err := New(Config{Command: []string{"true"}, OutputFormat: "yaml"})
	if err == nil || !strings.Contains(err.Error(), `output format "yaml" is not text, claude-code or codex`) {
		t.Fatalf("New: %v", err)
	}
}
