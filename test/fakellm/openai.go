package fakellm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// openAI is the OpenAI chat completions dialect.
type openAI struct{}

type oaRequest struct {
	Model               string          `json:"model"`
	Messages            []oaMessage     `json:"messages"`
	Tools               []oaTool        `json:"tools"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"` // a string or an array; unused
	Stream              bool            `json:"stream"`
}

type oaMessage struct {
	Role       string       `json:"role"`
	Content    textContent  `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls"`
	ToolCallID string       `json:"tool_call_id"`
}

type oaToolCall struct {
	ID       string         `json:"id"`
	Type     string         `json:"type"`
	Function oaFunctionCall `json:"function"`
}

type oaFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text inside a string, as OpenAI has it
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type oaResponse struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []oaChoice `json:"choices"`
	Usage   oaUsage    `json:"usage"`
}

type oaChoice struct {
	Index        int          `json:"index"`
	Message      oaOutMessage `json:"message"`
	FinishReason string       `json:"finish_reason"`
}

type oaOutMessage struct {
	Role      string       `json:"role"`
	Content   *string      `json:"content"` // null when the answer is only tool calls
	ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
}

type oaUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

type oaErrorBody struct {
	Error oaError `json:"error"`
}

type oaError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    *string `json:"code"`
}

func (openAI) toolIDPrefix() string { return "call_" }

func (openAI) failureStatuses() []int {
	return []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable}
}

func (openAI) parse(body []byte) (Request, error) {
	var in oaRequest
	if err := decode(body, &in); err != nil {
		return Request{}, err
	}
	switch {
	case in.Model == "":
		return Request{}, errors.New("model: you must provide a model parameter")
	case in.Stream:
		return Request{}, errors.New("stream: streaming is not supported by fakellm")
	case len(in.Messages) == 0:
		return Request{}, errors.New("messages: must contain at least one message")
	}
	if err := errors.Join(checkRange("temperature", in.Temperature, 0, 2), checkRange("top_p", in.TopP, 0, 1)); err != nil {
		return Request{}, err
	}
	req := Request{API: APIOpenAI, Model: in.Model, Temperature: in.Temperature}
	// max_completion_tokens supersedes the deprecated max_tokens.
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_completion_tokens", in.MaxCompletionTokens}, {"max_tokens", in.MaxTokens}} {
		if p.v == nil {
			continue
		}
		if *p.v < 1 {
			return Request{}, fmt.Errorf("%s: %d is less than the minimum of 1", p.name, *p.v)
		}
		if req.MaxTokens == 0 {
			req.MaxTokens = *p.v
		}
	}

	var system []string
	req.Messages = make([]Message, 0, len(in.Messages))
	for i, m := range in.Messages {
		msg := Message{Role: m.Role, Content: string(m.Content)}
		switch m.Role {
		case "system", "developer":
			system = append(system, msg.Content)
			continue
		case "user":
		case "assistant":
			for j, tc := range m.ToolCalls {
				if tc.Function.Name == "" {
					return Request{}, fmt.Errorf("messages[%d].tool_calls[%d].function.name: required", i, j)
				}
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: argumentsJSON(tc.Function.Arguments)})
			}
		case "tool":
			if m.ToolCallID == "" {
				return Request{}, fmt.Errorf("messages[%d].tool_call_id: required for role 'tool'", i)
			}
			msg.ToolCallID = m.ToolCallID
		case "":
			return Request{}, fmt.Errorf("messages[%d].role: required", i)
		default:
			return Request{}, fmt.Errorf("messages[%d].role: unsupported role %q", i, m.Role)
		}
		req.Messages = append(req.Messages, msg)
	}
	req.System = strings.Join(system, "\n")

	for i, t := range in.Tools {
		if t.Type != "" && t.Type != "function" {
			return Request{}, fmt.Errorf("tools[%d].type: unsupported type %q", i, t.Type)
		}
		if t.Function.Name == "" {
			return Request{}, fmt.Errorf("tools[%d].function.name: required", i)
		}
		req.Tools = append(req.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return req, nil
}

// argumentsJSON turns OpenAI's string-wrapped arguments into JSON; text that is
// not JSON (OpenAI does not check) is kept as a JSON string.
func argumentsJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

func (openAI) writeCompletion(w http.ResponseWriter, c *completion) {
	msg := oaOutMessage{Role: "assistant"}
	finish := "stop"
	if c.text != "" || len(c.toolCalls) == 0 && !c.cut {
		msg.Content = &c.text // null when max_tokens left nothing to say
	}
	if c.cut {
		finish = "length"
	}
	if len(c.toolCalls) > 0 {
		finish = "tool_calls"
		msg.ToolCalls = make([]oaToolCall, len(c.toolCalls))
		for i, tc := range c.toolCalls {
			msg.ToolCalls[i] = oaToolCall{ID: tc.ID, Type: "function", Function: oaFunctionCall{Name: tc.Name, Arguments: string(tc.Arguments)}}
		}
	}
	writeJSON(w, http.StatusOK, oaResponse{
		ID:      "chatcmpl-" + c.id,
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   c.model,
		Choices: []oaChoice{{Index: 0, Message: msg, FinishReason: finish}},
		Usage:   oaUsage{PromptTokens: c.in, CompletionTokens: c.out, TotalTokens: c.in + c.out},
	})
}

func (openAI) writeError(w http.ResponseWriter, e apiError) {
	typ, code := "invalid_request_error", (*string)(nil)
	switch {
	case e.status == http.StatusUnauthorized:
		code = ptr("invalid_api_key")
	case e.status == http.StatusTooManyRequests:
		// OpenAI names the exhausted limit in the type.
		typ, code = e.limit, ptr("rate_limit_exceeded")
	case e.status >= 500:
		typ = "server_error"
	}
	writeJSON(w, e.status, oaErrorBody{Error: oaError{Message: e.message, Type: typ, Code: code}})
}
