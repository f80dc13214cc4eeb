package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/proctor-dev/proctor/runner/provider"
)

var _ provider.TokenCounter = (*Provider)(nil)

// countRequest is the body of POST /responses/input_tokens: the Responses
// API's input for the same conversation.
type countRequest struct {
	Model        string      `json:"model"`
	Instructions string      `json:"instructions,omitempty"`
	Input        []inputItem `json:"input"`
	Tools        []countTool `json:"tools,omitempty"`
}

// inputItem is a message, a function call or a function call's output.
type inputItem struct {
	Type      string `json:"type"`
	Role      string `json:"role,omitempty"`
	Content   string `json:"content,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Output    string `json:"output,omitempty"`
}

type countTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// CountTokens counts req's input tokens with OpenAI's free input token
// counting endpoint (POST /v1/responses/input_tokens): no model call is made.
// Many OpenAI-compatible servers lack it; they answer 404.
func (p *Provider) CountTokens(ctx context.Context, req *provider.Request) (int64, error) {
	if req == nil {
		return 0, errors.New("openai: nil request")
	}
	body := &countRequest{Model: p.model, Instructions: req.System}
	for i := range req.Messages {
		m := &req.Messages[i]
		switch {
		case m.Role == provider.RoleTool:
			body.Input = append(body.Input, inputItem{Type: "function_call_output", CallID: m.ToolCallID, Output: m.Content})
			continue
		case m.Role == provider.RoleSystem && i == 0:
			// The conversation's own system message takes the place of req.System.
			body.Instructions = m.Content
			continue
		}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			body.Input = append(body.Input, inputItem{Type: "message", Role: m.Role, Content: m.Content})
		}
		for _, tc := range m.ToolCalls {
			body.Input = append(body.Input, inputItem{Type: "function_call", CallID: tc.ID, Name: tc.Name, Arguments: argumentsString(tc.Arguments)})
		}
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = emptyParameters
		}
		body.Tools = append(body.Tools, countTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: params})
	}
	var out struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if err := p.counter.Post(ctx, body, &out); err != nil {
		return 0, err
	}
	if out.InputTokens == nil {
		return 0, errors.New("openai: the token count has no input_tokens")
	}
	return *out.InputTokens, nil
}
