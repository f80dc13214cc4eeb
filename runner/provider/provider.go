// Package provider defines what the engine asks of a model: one call that turns a
// conversation into an answer. Implementations live in subpackages (openai,
// anthropic, agent); this package holds the shared request, response and error types.
//
// Providers never retry, never rate-limit and never cache: the engine owns those
// policies so that they are the same for every provider.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Roles of chat messages.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one chat turn, in a provider-neutral form close to the OpenAI shape.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the tools an assistant turn called.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// ToolCallID links a tool-result turn (Role "tool") to the call it answers.
	ToolCallID string `json:"toolCallID,omitempty"`
}

// ToolCall is a model's request to call a tool.
type ToolCall struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	// Arguments is a JSON object (never a JSON-encoded string).
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Tool is a function the model may call.
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parameters is a JSON Schema object; nil means no parameters.
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// Params are the sampling parameters of a model entry. Nil means "server default".
type Params struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"topP,omitempty"`
	MaxTokens   int      `json:"maxTokens,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	Stop        []string `json:"stop,omitempty"`
}

// Request is one call. System, Messages and Tools make the conversation; Prompt
// and Sample are the rendered prompt and the raw sample fields, used by providers
// (the agent) that render their own inputs.
type Request struct {
	System   string
	Messages []Message
	Tools    []Tool

	Prompt   string
	SampleID string
	Sample   map[string]any
	// Env is more of an agent's environment for this sample (name=value, a
	// later one of a name winning): where its endpoints' proxies are and the
	// sample's placeholder key.
	Env []string
	// Slot is the sample's slot, 0 to Slots-1: no two samples in flight
	// share one (agent and hook templates: .Slot, .Slots).
	Slot, Slots int
	// Model and Dataset name what the sample belongs to (hook templates).
	Model, Dataset string
}

// Usage is the token accounting reported by the server.
type Usage struct {
	// InputTokens counts every input token, cached ones included.
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	// CachedInputTokens are the input tokens read from the provider's prompt
	// cache, and CacheWriteInputTokens those written to it (Anthropic); both
	// are part of InputTokens and are priced apart.
	CachedInputTokens     int64 `json:"cachedInputTokens,omitempty"`
	CacheWriteInputTokens int64 `json:"cacheWriteInputTokens,omitempty"`
}

// TokenCounter counts a request's input tokens exactly, with the provider's
// own token counting endpoint: no model call is made, and nothing is paid.
type TokenCounter interface {
	CountTokens(ctx context.Context, req *Request) (int64, error)
}

// Response is a successful call's answer.
type Response struct {
	Text         string     `json:"text"`
	ToolCalls    []ToolCall `json:"toolCalls,omitempty"`
	Usage        Usage      `json:"usage"`
	FinishReason string     `json:"finishReason,omitempty"`
	// Truncated says Text is only the start of the answer (an agent's output
	// past its cap); FullBytes is then the whole answer's size.
	Truncated bool `json:"truncated,omitempty"`
	FullBytes int  `json:"fullBytes,omitempty"`
	// ReportedCost is what an agent said its run cost, in dollars (Claude
	// Code's total_cost_usd), when it said.
	ReportedCost *float64 `json:"reportedCost,omitempty"`
}

// MaxTokensReached reports whether the model stopped at its output limit:
// OpenAI's finish_reason "length", Anthropic's stop_reason "max_tokens".
func (r *Response) MaxTokensReached() bool {
	return r.FinishReason == "length" || r.FinishReason == "max_tokens"
}

// Provider makes one call. It must be safe for concurrent use. Errors are either
// *HTTPError (the server answered with an error status), *ExitError (an agent process
// failed), a context error (the attempt's deadline or the run's cancellation), or a
// transport error (connection refused, reset, dropped).
type Provider interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
}

// HTTPError is a non-2xx answer from a model server.
type HTTPError struct {
	StatusCode int
	// Code is the server's machine-readable error code or type, when it gave one
	// (for example "insufficient_quota" or "overloaded_error").
	Code string
	// Message is the server's human-readable message, truncated and with any
	// secret the provider knows of removed.
	Message string
	// RetryAfter is what the server asked us to wait (retry-after-ms or retry-after);
	// zero when it did not say.
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("HTTP %d", e.StatusCode)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// ExitError is an agent process that ran but failed.
type ExitError struct {
	ExitCode int
	// Stderr is the tail of the process's standard error.
	Stderr string
}

func (e *ExitError) Error() string {
	if e.Stderr == "" {
		return fmt.Sprintf("agent exited with status %d", e.ExitCode)
	}
	return fmt.Sprintf("agent exited with status %d: %s", e.ExitCode, e.Stderr)
}

// AsHTTPError returns the *HTTPError in err's chain, if any.
func AsHTTPError(err error) (*HTTPError, bool) {
	var h *HTTPError
	ok := errors.As(err, &h)
	return h, ok
}
