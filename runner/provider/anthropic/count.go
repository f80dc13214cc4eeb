package anthropic

import (
	"context"
	"errors"

	"github.com/proctor-dev/proctor/runner/provider"
)

var _ provider.TokenCounter = (*Provider)(nil)

// countRequest is the body of POST /v1/messages/count_tokens: a Messages
// request without max_tokens or sampling parameters, which it refuses.
type countRequest struct {
	Model    string    `json:"model"`
	System   string    `json:"system,omitempty"`
	Messages []message `json:"messages"`
	Tools    []toolDef `json:"tools,omitempty"`
}

// CountTokens counts req's input tokens with the Messages API's free token
// counting endpoint: no model call is made.
func (p *Provider) CountTokens(ctx context.Context, req *provider.Request) (int64, error) {
	if req == nil {
		return 0, errors.New("anthropic: nil request")
	}
	full := p.newRequest(req)
	body := &countRequest{Model: full.Model, System: full.System, Messages: full.Messages, Tools: full.Tools}
	var out struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if err := p.counter.Post(ctx, body, &out); err != nil {
		return 0, err
	}
	if out.InputTokens == nil {
		return 0, errors.New("anthropic: the token count has no input_tokens")
	}
	return *out.InputTokens, nil
}
