// Package openai is a lean client for the OpenAI Chat Completions endpoint and
// the many servers that copy it (vLLM, llama.cpp, Ollama, OpenRouter, ...).
//
// It is hand-written on net/http rather than built on the official SDK, which
// measured at half the throughput of a bare net/http loop: one typed request
// struct, one pooled POST, one decode. It never retries, sleeps or rate-limits;
// the engine owns those policies.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Config configures a Provider.
type Config struct {
	// BaseURL is the API root; requests go to BaseURL + "/chat/completions".
	// Required (the Evaluation's default, OpenAI's API, is applied by api/v1alpha1.SetDefaults).
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>" when non-empty (local
	// servers often need none). It is removed from any error message.
	APIKey string
	Model  string
	Params provider.Params
	// Headers are extra request headers (for example OpenRouter's HTTP-Referer).
	// They are applied last, so they can override the defaults.
	Headers map[string]string
	// HTTPClient is the client to use; nil means provider.NewHTTPClient(16).
	HTTPClient *http.Client
}

// Provider calls a chat completions endpoint. It is safe for concurrent use.
type Provider struct {
	endpoint provider.Endpoint
	// counter is the token counting endpoint (CountTokens).
	counter provider.Endpoint
	// api makes the Batch API's requests.
	api    *provider.API
	model  string
	params provider.Params
	// maxCompletionTokens selects the name of the output limit; see
	// usesMaxCompletionTokens.
	maxCompletionTokens bool
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg and returns a Provider.
func New(cfg Config) (*Provider, error) {
	u, err := provider.BaseURL("openai", cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Model == "" {
		return nil, errors.New("openai: model is required")
	}
	bearer := provider.Credential{Header: "Authorization", Prefix: "Bearer "}
	return &Provider{
		endpoint:            provider.NewEndpoint(cfg.HTTPClient, u.String()+"/chat/completions", nil, bearer, cfg.APIKey, cfg.Headers),
		counter:             provider.NewEndpoint(cfg.HTTPClient, u.String()+"/responses/input_tokens", nil, bearer, cfg.APIKey, cfg.Headers),
		api:                 provider.NewAPI(cfg.HTTPClient, u.String(), nil, bearer, cfg.APIKey, cfg.Headers),
		model:               cfg.Model,
		params:              cfg.Params,
		maxCompletionTokens: usesMaxCompletionTokens(u),
	}, nil
}

// usesMaxCompletionTokens reports whether the output limit must be sent as
// max_completion_tokens rather than max_tokens. OpenAI itself deprecated
// max_tokens and its reasoning models (o-series, gpt-5) reject it, but most
// OpenAI-compatible servers (vLLM, llama.cpp, Ollama, many gateways) only know
// max_tokens. So the new name is used for api.openai.com only.
func usesMaxCompletionTokens(base *url.URL) bool {
	return strings.EqualFold(base.Hostname(), "api.openai.com")
}

// Complete sends one chat completion request.
func (p *Provider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	if req == nil {
		return nil, errors.New("openai: nil request")
	}
	body := p.newRequest(req)
	var out chatResponse
	if err := p.endpoint.Post(ctx, body, &out); err != nil {
		return nil, err
	}
	if e := provider.ErrorInBody(out.Error, p.endpoint.Secrets()...); e != nil {
		return nil, e
	}
	return out.toResponse()
}

// Wire types. Only the fields we send or read are declared: encoding/json skips
// the rest of a response without allocating for it.

type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Tools               []chatTool    `json:"tools,omitempty"`
	Temperature         *float64      `json:"temperature,omitempty"`
	TopP                *float64      `json:"top_p,omitempty"`
	Seed                *int64        `json:"seed,omitempty"`
	Stop                []string      `json:"stop,omitempty"`
	MaxTokens           int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens int           `json:"max_completion_tokens,omitempty"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content points into the caller's Message (no copy); nil omits it, which is
	// how an assistant turn that only calls tools is sent.
	Content    *string        `json:"content,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name string `json:"name"`
	// Arguments is a JSON object encoded as a string, as the API wants it.
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string      `json:"type"`
	Function chatToolDef `json:"function"`
}

type chatToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// emptyParameters is the schema of a tool without parameters; some servers
// reject a function without one.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

type chatResponse struct {
	// Error is set by gateways that answer 200 with an error instead of choices.
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		// Message is nil when the choice has none: not a chat completion (a
		// legacy completions endpoint answers {"text": ...}).
		Message *struct {
			// Content is null when the model only calls tools; decoding null into
			// a string leaves it empty.
			Content   string         `json:"content"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			// CachedTokens are part of prompt_tokens.
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// newRequest builds the request body. It points into req rather than copying
// its strings, so req must not change until the call returns (it does not: the
// engine owns it for the duration of Complete).
func (p *Provider) newRequest(req *provider.Request) *chatRequest {
	msgs := make([]chatMessage, 0, len(req.Messages)+1)
	// The system prompt goes first, unless the conversation already starts with
	// its own system message, which then takes precedence.
	if req.System != "" && (len(req.Messages) == 0 || req.Messages[0].Role != provider.RoleSystem) {
		msgs = append(msgs, chatMessage{Role: provider.RoleSystem, Content: &req.System})
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		cm := chatMessage{Role: m.Role, Content: &m.Content}
		switch {
		case m.Role == provider.RoleTool:
			cm.ToolCallID = m.ToolCallID
		case len(m.ToolCalls) > 0:
			if m.Content == "" {
				cm.Content = nil
			}
			cm.ToolCalls = make([]chatToolCall, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				cm.ToolCalls[j] = chatToolCall{
					ID:       tc.ID,
					Type:     "function",
					Function: chatFunction{Name: tc.Name, Arguments: argumentsString(tc.Arguments)},
				}
			}
		}
		msgs = append(msgs, cm)
	}

	body := &chatRequest{
		Model:       p.model,
		Messages:    msgs,
		Temperature: p.params.Temperature,
		TopP:        p.params.TopP,
		Seed:        p.params.Seed,
		Stop:        p.params.Stop,
	}
	if p.params.MaxTokens > 0 {
		if p.maxCompletionTokens {
			body.MaxCompletionTokens = p.params.MaxTokens
		} else {
			body.MaxTokens = p.params.MaxTokens
		}
	}
	if len(req.Tools) > 0 {
		body.Tools = make([]chatTool, len(req.Tools))
		for i, t := range req.Tools {
			params := t.Parameters
			if len(bytes.TrimSpace(params)) == 0 {
				params = emptyParameters
			}
			body.Tools[i] = chatTool{
				Type:     "function",
				Function: chatToolDef{Name: t.Name, Description: t.Description, Parameters: params},
			}
		}
	}
	return body
}

// argumentsString turns ToolCall.Arguments back into the string the API wants.
// A JSON string value is what toResponse made of arguments that were not valid
// JSON, so it is unquoted to send back exactly what the model produced.
func argumentsString(args json.RawMessage) string {
	args = bytes.TrimSpace(args)
	switch {
	case len(args) == 0 || string(args) == "null":
		return "{}"
	case args[0] == '"':
		var s string
		if json.Unmarshal(args, &s) == nil {
			return s
		}
	}
	return string(args)
}

// parseArguments turns the API's arguments string into ToolCall.Arguments. A
// JSON object is kept as is. Anything else (truncated or malformed JSON, which
// models do produce) is kept as a JSON string value, so that nothing the model
// produced is lost and a scorer can still see it. Empty arguments mean none.
func parseArguments(s string) json.RawMessage {
	b := []byte(strings.TrimSpace(s))
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	if b[0] == '{' && json.Valid(b) {
		return b
	}
	q, err := json.Marshal(s)
	if err != nil { // cannot happen for a string
		return json.RawMessage("{}")
	}
	return q
}

func (r *chatResponse) toResponse() (*provider.Response, error) {
	if len(r.Choices) == 0 {
		return nil, errors.New("openai: response has no choices")
	}
	c := &r.Choices[0]
	if c.Message == nil {
		return nil, errors.New("openai: the response's choice has no message; is baseURL a chat completions API?")
	}
	resp := &provider.Response{
		Text:         c.Message.Content,
		FinishReason: c.FinishReason,
		Usage: provider.Usage{
			InputTokens:       r.Usage.PromptTokens,
			OutputTokens:      r.Usage.CompletionTokens,
			CachedInputTokens: r.Usage.PromptTokensDetails.CachedTokens,
		},
	}
	if len(c.Message.ToolCalls) > 0 {
		resp.ToolCalls = make([]provider.ToolCall, len(c.Message.ToolCalls))
		for i, tc := range c.Message.ToolCalls {
			resp.ToolCalls[i] = provider.ToolCall{
				ID:        tc.ID,
				Name:      tc.Function.Name,
				Arguments: parseArguments(tc.Function.Arguments),
			}
		}
	}
	return resp, nil
}
