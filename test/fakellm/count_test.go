package fakellm_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/anthropic"
	"github.com/proctor-dev/proctor/runner/provider/openai"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// counterAndCaller is a provider that can both count and call.
type counterAndCaller interface {
	provider.Provider
	provider.TokenCounter
}

// TestTokenCountsMatchUsage: the counting endpoints, called through Proctor's
// clients, count exactly the input tokens a model call of the same
// conversation is charged, make no model call, and are counted apart.
func TestTokenCountsMatchUsage(t *testing.T) {
	srv := fakellm.New(fakellm.Config{APIKey: "sk-test"})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	oa, err := openai.New(openai.Config{BaseURL: hs.URL + "/v1", APIKey: "sk-test", Model: "fake-model"})
	if err != nil {
		t.Fatal(err)
	}
	an, err := anthropic.New(anthropic.Config{BaseURL: hs.URL, APIKey: "sk-test", Model: "fake-model", Params: provider.Params{MaxTokens: 64}})
	if err != nil {
		t.Fatal(err)
	}
	weather := provider.Tool{Name: "weather", Description: "Current weather for a city.", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}
	requests := map[string]*provider.Request{
		"text": {Messages: []provider.Message{{Role: provider.RoleUser, Content: "What is 12 * 7? Answer with the number only."}}},
		"system": {System: "You are terse; answer in one word.", Messages: []provider.Message{
			{Role: provider.RoleUser, Content: "Capital of France?"},
			{Role: provider.RoleAssistant, Content: "Paris."},
			{Role: provider.RoleUser, Content: "And of Italy, with its population?"},
		}},
		"tools": {Tools: []provider.Tool{weather}, Messages: []provider.Message{
			{Role: provider.RoleUser, Content: "Weather in Oslo and Lima?"},
			{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{
				{ID: "call_1", Name: "weather", Arguments: json.RawMessage(`{"city":"Oslo"}`)},
				{ID: "call_2", Name: "weather", Arguments: json.RawMessage(`{"city":"Lima"}`)},
			}},
			{Role: provider.RoleTool, ToolCallID: "call_1", Content: `{"temp": -3, "sky": "snow"}`},
			{Role: provider.RoleTool, ToolCallID: "call_2", Content: `{"temp": 19, "sky": "clear"}`},
		}},
	}
	ctx := context.Background()
	for name, req := range requests {
		for api, p := range map[string]counterAndCaller{"openai": oa, "anthropic": an} {
			before := srv.Stats().Requests
			n, err := p.CountTokens(ctx, req)
			if err != nil {
				t.Fatalf("%s %s: CountTokens: %v", api, name, err)
			}
			if srv.Stats().Requests != before {
				t.Errorf("%s %s: counting made a model request", api, name)
			}
			resp, err := p.Complete(ctx, req)
			if err != nil {
				t.Fatalf("%s %s: Complete: %v", api, name, err)
			}
			if n != resp.Usage.InputTokens || n == 0 {
				t.Errorf("%s %s: counted %d input tokens, the call was charged %d", api, name, n, resp.Usage.InputTokens)
			}
		}
	}
	if got := srv.Stats().Counted; got != int64(2*len(requests)) {
		t.Errorf("Counted = %d, want %d", got, 2*len(requests))
	}
	bad, err := openai.New(openai.Config{BaseURL: hs.URL + "/v1", APIKey: "wrong", Model: "fake-model"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.CountTokens(ctx, requests["text"]); err == nil {
		t.Error("a count with a wrong key was answered")
	}
}
