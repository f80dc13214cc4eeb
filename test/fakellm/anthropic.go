package fakellm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// anthropic is the Anthropic messages dialect.
type anthropic struct{}

type anRequest struct {
	Model         string      `json:"model"`
	MaxTokens     *int        `json:"max_tokens"`
	System        textContent `json:"system"`
	Messages      []anMessage `json:"messages"`
	Tools         []anTool    `json:"tools"`
	Temperature   *float64    `json:"temperature"`
	TopP          *float64    `json:"top_p"`
	StopSequences []string    `json:"stop_sequences"` // unused
	Stream        bool        `json:"stream"`
}

type anMessage struct {
	Role    string    `json:"role"`
	Content anContent `json:"content"`
}

// anContent is a message's content: a string (one text block) or an array of blocks.
type anContent []anBlock

func (c *anContent) UnmarshalJSON(b []byte) error {
	switch b[0] {
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = anContent{{Type: "text", Text: s}}
		return nil
	case '[':
		return json.Unmarshal(b, (*[]anBlock)(c))
	}
	return errors.New("content must be a string or an array of content blocks")
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`        // text
	ID        string          `json:"id"`          // tool_use
	Name      string          `json:"name"`        // tool_use
	Input     json.RawMessage `json:"input"`       // tool_use
	ToolUseID string          `json:"tool_use_id"` // tool_result
	// Content is a tool_result's content (a string or text blocks). It is decoded
	// only for tool_result blocks, since other block types use the name otherwise.
	Content json.RawMessage `json:"content"`
}

type anTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anResponse struct {
	ID           string       `json:"id"`
	Type         string       `json:"type"`
	Role         string       `json:"role"`
	Model        string       `json:"model"`
	Content      []anOutBlock `json:"content"`
	StopReason   string       `json:"stop_reason"`
	StopSequence *string      `json:"stop_sequence"`
	Usage        anUsage      `json:"usage"`
}

type anOutBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"` // a pointer, so an empty text block still has "text"
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type anUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

type anErrorBody struct {
	Type  string  `json:"type"`
	Error anError `json:"error"`
}

type anError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (anthropic) toolIDPrefix() string { return "toolu_" }

func (anthropic) failureStatuses() []int {
	return []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, 529}
}

func (anthropic) parse(body []byte) (Request, error) {
	var in anRequest
	if err := decode(body, &in); err != nil {
		return Request{}, err
	}
	switch {
	case in.Model == "":
		return Request{}, errors.New("model: Field required")
	case in.MaxTokens == nil:
		return Request{}, errors.New("max_tokens: Field required")
	case *in.MaxTokens < 1:
		return Request{}, fmt.Errorf("max_tokens: %d is less than the minimum of 1", *in.MaxTokens)
	case in.Stream:
		return Request{}, errors.New("stream: streaming is not supported by fakellm")
	case len(in.Messages) == 0:
		return Request{}, errors.New("messages: at least one message is required")
	}
	if err := errors.Join(checkRange("temperature", in.Temperature, 0, 1), checkRange("top_p", in.TopP, 0, 1)); err != nil {
		return Request{}, err
	}
	req := Request{
		API:         APIAnthropic,
		Model:       in.Model,
		System:      string(in.System),
		MaxTokens:   *in.MaxTokens,
		Temperature: in.Temperature,
		Messages:    make([]Message, 0, len(in.Messages)),
	}
	for i, m := range in.Messages {
		var texts []string
		var calls []ToolCall
		results := 0
		for j, b := range m.Content {
			where := fmt.Sprintf("messages[%d].content[%d]", i, j)
			switch b.Type {
			case "text":
				texts = append(texts, b.Text)
			case "tool_use":
				if m.Role != "assistant" {
					return Request{}, fmt.Errorf("%s: tool_use blocks are only allowed in assistant messages", where)
				}
				if b.ID == "" || b.Name == "" {
					return Request{}, fmt.Errorf("%s: tool_use blocks need an id and a name", where)
				}
				calls = append(calls, ToolCall{ID: b.ID, Name: b.Name, Arguments: b.Input})
			case "tool_result":
				if m.Role != "user" {
					return Request{}, fmt.Errorf("%s: tool_result blocks are only allowed in user messages", where)
				}
				if b.ToolUseID == "" {
					return Request{}, fmt.Errorf("%s.tool_use_id: required", where)
				}
				var content textContent
				if len(b.Content) > 0 {
					if err := json.Unmarshal(b.Content, &content); err != nil {
						return Request{}, fmt.Errorf("%s.content: %w", where, err)
					}
				}
				// Tool results come first in a user turn, as the neutral form has them.
				req.Messages = append(req.Messages, Message{Role: "tool", Content: string(content), ToolCallID: b.ToolUseID})
				results++
			case "":
				return Request{}, fmt.Errorf("%s.type: required", where)
			}
			// Other blocks (images, documents, thinking) carry no text we use.
		}
		switch m.Role {
		case "user":
			// A turn of tool results alone has no user message.
			if len(texts) > 0 || results == 0 {
				req.Messages = append(req.Messages, Message{Role: "user", Content: strings.Join(texts, "\n")})
			}
		case "assistant":
			req.Messages = append(req.Messages, Message{Role: "assistant", Content: strings.Join(texts, "\n"), ToolCalls: calls})
		case "":
			return Request{}, fmt.Errorf("messages[%d].role: required", i)
		default:
			return Request{}, fmt.Errorf("messages[%d].role: unexpected role %q; use the top-level system parameter for a system prompt", i, m.Role)
		}
	}
	for i, t := range in.Tools {
		if t.Name == "" {
			return Request{}, fmt.Errorf("tools[%d].name: required", i)
		}
		req.Tools = append(req.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return req, nil
}

func (anthropic) writeCompletion(w http.ResponseWriter, c *completion) {
	content := make([]anOutBlock, 0, 1+len(c.toolCalls))
	if c.text != "" || len(c.toolCalls) == 0 && !c.cut {
		content = append(content, anOutBlock{Type: "text", Text: &c.text})
	}
	stop := "end_turn"
	for _, tc := range c.toolCalls {
		content = append(content, anOutBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: tc.Arguments})
		stop = "tool_use"
	}
	if c.cut {
		stop = "max_tokens"
	}
	writeJSON(w, http.StatusOK, anResponse{
		ID:         "msg_" + c.id,
		Type:       "message",
		Role:       "assistant",
		Model:      c.model,
		Content:    content,
		StopReason: stop,
		Usage:      anUsage{InputTokens: c.in, OutputTokens: c.out},
	})
}

func (anthropic) writeError(w http.ResponseWriter, e apiError) {
	typ := "invalid_request_error"
	switch e.status {
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusForbidden:
		typ = "permission_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case 529:
		typ = "overloaded_error"
	default:
		if e.status >= 500 {
			typ = "api_error"
		}
	}
	writeJSON(w, e.status, anErrorBody{Type: "error", Error: anError{Type: typ, Message: e.message}})
}
