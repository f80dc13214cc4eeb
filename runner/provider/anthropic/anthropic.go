// Package anthropic is a lean client for the Anthropic Messages endpoint.
//
// It is hand-written on net/http rather than built on the official SDK, which
// measured at half the throughput of a bare net/http loop: one typed request
// struct, one pooled POST, one decode. It never retries, sleeps or rate-limits;
// the engine owns those policies.
package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/proctor-dev/proctor/runner/provider"
)

// DefaultVersion is the anthropic-version header sent when Config.Version is
// empty: a protocol detail, not a setting of the Evaluation (whose defaults,
// the base URL and max tokens among them, live in api/v1alpha1 and reach the
// provider through Config).
const DefaultVersion = "2023-06-01"

// Config configures a Provider.
type Config struct {
	// BaseURL is the API root; the endpoint is BaseURL + "/v1/messages", or
	// BaseURL + "/messages" when BaseURL already ends in "/v1". Required.
	BaseURL string
	// APIKey is sent as the x-api-key header when non-empty. It is removed from
	// any error message.
	APIKey string
	Model  string
	Params provider.Params
	// Version is the anthropic-version header; empty means DefaultVersion.
	Version string
	// Headers are extra request headers (for example anthropic-beta). They are
	// applied last, so they can override the defaults.
	Headers map[string]string
	// HTTPClient is the client to use; nil means provider.NewHTTPClient(16).
	HTTPClient *http.Client
}

// Provider calls the Messages endpoint. It is safe for concurrent use.
type Provider struct {
	endpoint provider.Endpoint
	// counter is the token counting endpoint (CountTokens).
	counter provider.Endpoint
	// api makes the Message Batches requests, under apiBase (…/v1).
	api     *provider.API
	apiBase string
	model   string
	params  provider.Params
}

var _ provider.Provider = (*Provider)(nil)

// New validates cfg and returns a Provider.
func New(cfg Config) (*Provider, error) {
	u, err := provider.BaseURL("anthropic", cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Model == "" {
		return nil, errors.New("anthropic: model is required")
	}
	if cfg.Params.MaxTokens <= 0 {
		return nil, errors.New("anthropic: maxTokens is required (the Messages API requires max_tokens)")
	}
	base := u.String()
	apiBase := base + "/v1"
	if strings.HasSuffix(base, "/v1") {
		apiBase = base
	}
	endpoint := apiBase + "/messages"
	version := cfg.Version
	if version == "" {
		version = DefaultVersion
	}
	fixed := map[string]string{"Anthropic-Version": version}
	cred := provider.Credential{Header: "X-Api-Key"}
	return &Provider{
		endpoint: provider.NewEndpoint(cfg.HTTPClient, endpoint, fixed, cred, cfg.APIKey, cfg.Headers),
		counter:  provider.NewEndpoint(cfg.HTTPClient, endpoint+"/count_tokens", fixed, cred, cfg.APIKey, cfg.Headers),
		api:      provider.NewAPI(cfg.HTTPClient, apiBase, fixed, cred, cfg.APIKey, cfg.Headers),
		apiBase:  apiBase,
		model:    cfg.Model,
		params:   cfg.Params,
	}, nil
}

// Complete sends one Messages request.
func (p *Provider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	if req == nil {
		return nil, errors.New("anthropic: nil request")
	}
	body := p.newRequest(req)
	var out messagesResponse
	if err := p.endpoint.Post(ctx, body, &out); err != nil {
		return nil, err
	}
	if e := provider.ErrorInBody(out.Error, p.endpoint.Secrets()...); e != nil {
		return nil, e
	}
	// An empty content array is a real (empty) answer; no content at all is not
	// a message, unless the server says it is one.
	if out.Content == nil && out.Type != "message" {
		return nil, fmt.Errorf("anthropic: the response has no content and is not a message (type %q); is baseURL the Messages API?", out.Type)
	}
	return out.toResponse(), nil
}

// Wire types. Only the fields we send or read are declared: encoding/json skips
// the rest of a response without allocating for it.

type messagesRequest struct {
	Model         string    `json:"model"`
	MaxTokens     int       `json:"max_tokens"`
	System        string    `json:"system,omitempty"`
	Messages      []message `json:"messages"`
	Tools         []toolDef `json:"tools,omitempty"`
	Temperature   *float64  `json:"temperature,omitempty"`
	TopP          *float64  `json:"top_p,omitempty"`
	StopSequences []string  `json:"stop_sequences,omitempty"`
}

type message struct {
	Role string `json:"role"`
	// Content is a *string (plain text, pointing into the caller's Message) or a
	// []contentBlock (tool use and tool results); the API takes either.
	Content any `json:"content"`
}

type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`        // text
	ID        string          `json:"id,omitempty"`          // tool_use
	Name      string          `json:"name,omitempty"`        // tool_use
	Input     json.RawMessage `json:"input,omitempty"`       // tool_use
	ToolUseID string          `json:"tool_use_id,omitempty"` // tool_result
	Content   *string         `json:"content,omitempty"`     // tool_result
}

type toolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// emptySchema is the input schema of a tool without parameters.
var emptySchema = json.RawMessage(`{"type":"object"}`)

// emptyInput is the input of a tool call without arguments: the API requires an object.
var emptyInput = json.RawMessage(`{}`)

type messagesResponse struct {
	// Type is "message", or "error" when a proxy answers 200 with an error.
	Type  string          `json:"type"`
	Error json.RawMessage `json:"error"`
	// Content is nil when absent or null, which no message is.
	Content []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason string `json:"stop_reason"`
	Usage      Usage  `json:"usage"`
}

// Usage is Anthropic's usage object, as the Messages API and Claude Code's
// result report it.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

// Usage is u as Proctor counts it. input_tokens excludes the tokens written
// to or read from the prompt cache; the sum is what the model read.
func (u Usage) Usage() provider.Usage {
	return provider.Usage{
		InputTokens:           u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens:          u.OutputTokens,
		CachedInputTokens:     u.CacheReadInputTokens,
		CacheWriteInputTokens: u.CacheCreationInputTokens,
	}
}

// newRequest builds the request body. It points into req rather than copying
// its strings, so req must not change until the call returns (it does not: the
// engine owns it for the duration of Complete).
func (p *Provider) newRequest(req *provider.Request) *messagesRequest {
	body := &messagesRequest{
		Model:         p.model,
		MaxTokens:     p.params.MaxTokens,
		System:        systemPrompt(req),
		Messages:      make([]message, 0, len(req.Messages)),
		Temperature:   p.params.Temperature,
		TopP:          p.params.TopP,
		StopSequences: p.params.Stop,
		// Seed is not sent: the Messages API has no seed parameter and rejects
		// unknown fields.
	}

	// toolResults is the block list of the message being built from consecutive
	// tool results: the API wants all the results answering one assistant turn
	// in a single user message.
	var toolResults []contentBlock
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role != provider.RoleTool && toolResults != nil {
			body.Messages[len(body.Messages)-1].Content = toolResults
			toolResults = nil
		}
		switch {
		case m.Role == provider.RoleSystem:
			// Already part of the system prompt: the API has no system role.
		case m.Role == provider.RoleTool:
			if toolResults == nil {
				body.Messages = append(body.Messages, message{Role: provider.RoleUser})
			}
			toolResults = append(toolResults, contentBlock{
				Type:      "tool_result",
				ToolUseID: m.ToolCallID,
				Content:   &m.Content,
			})
		case len(m.ToolCalls) > 0:
			blocks := make([]contentBlock, 0, len(m.ToolCalls)+1)
			if m.Content != "" { // the API rejects empty text blocks
				blocks = append(blocks, contentBlock{Type: "text", Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, contentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: toolInput(tc.Arguments)})
			}
			body.Messages = append(body.Messages, message{Role: m.Role, Content: blocks})
		default:
			body.Messages = append(body.Messages, message{Role: m.Role, Content: &m.Content})
		}
	}
	if toolResults != nil {
		body.Messages[len(body.Messages)-1].Content = toolResults
	}

	if len(req.Tools) > 0 {
		body.Tools = make([]toolDef, len(req.Tools))
		for i, t := range req.Tools {
			schema := t.Parameters
			if len(bytes.TrimSpace(schema)) == 0 {
				schema = emptySchema
			}
			body.Tools[i] = toolDef{Name: t.Name, Description: t.Description, InputSchema: schema}
		}
	}
	return body
}

// systemPrompt joins req.System and the conversation's system messages with a
// blank line: the API takes the system prompt as a separate field.
func systemPrompt(req *provider.Request) string {
	sys := req.System
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role != provider.RoleSystem || m.Content == "" {
			continue
		}
		if sys == "" {
			sys = m.Content
		} else {
			sys += "\n\n" + m.Content
		}
	}
	return sys
}

// toolInput returns a tool call's arguments as the input object the API wants.
func toolInput(args json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(args); len(t) == 0 || string(t) == "null" {
		return emptyInput
	}
	return args
}

func (r *messagesResponse) toResponse() *provider.Response {
	resp := &provider.Response{FinishReason: r.StopReason, Usage: r.Usage.Usage()}
	for i := range r.Content {
		b := &r.Content[i]
		switch b.Type {
		case "text":
			resp.Text += b.Text
		case "tool_use":
			args := b.Input
			if t := bytes.TrimSpace(args); len(t) == 0 || string(t) == "null" {
				args = json.RawMessage("{}") // fresh: callers may keep and modify it
			}
			resp.ToolCalls = append(resp.ToolCalls, provider.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
		// Other blocks (thinking, redacted_thinking, server tools) carry no answer.
	}
	return resp
}
