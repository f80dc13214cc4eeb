package fakellm

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// Token counting, as the providers offer it for free: OpenAI's
// POST /v1/responses/input_tokens (a Responses API input) and Anthropic's
// POST /v1/messages/count_tokens (a Messages request without max_tokens).
// Both answer what a model call with the same conversation would be charged
// as input (CountInputTokens), make no model call, and are counted apart
// (Stats.Counted), never as model requests.

// rsCountRequest is the body of POST /v1/responses/input_tokens.
type rsCountRequest struct {
	Model        string          `json:"model"`
	Instructions string          `json:"instructions"`
	Input        json.RawMessage `json:"input"`
	Tools        []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"tools"`
}

// rsItem is an item of a Responses input: a message, a function call or its
// output.
type rsItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    string          `json:"output"`
}

// parseResponsesCount reads a Responses input into the neutral form, counted
// as the same conversation sent to chat completions would be: a function
// call belongs to the assistant turn before it.
func parseResponsesCount(body []byte) (Request, error) {
	var in rsCountRequest
	if err := decode(body, &in); err != nil {
		return Request{}, err
	}
	if in.Model == "" {
		return Request{}, errors.New("model: you must provide a model parameter")
	}
	req := Request{API: APIOpenAI, Model: in.Model, System: in.Instructions}
	var items []rsItem
	var text string
	switch {
	case len(in.Input) == 0:
		return Request{}, errors.New("input: required")
	case json.Unmarshal(in.Input, &text) == nil:
		items = []rsItem{{Type: "message", Role: "user", Content: in.Input}}
	case json.Unmarshal(in.Input, &items) != nil:
		return Request{}, errors.New("input: must be a string or an array of items")
	}
	var system []string
	if in.Instructions != "" {
		system = append(system, in.Instructions)
	}
	for _, it := range items {
		switch it.Type {
		case "", "message":
			var c textContent
			if len(it.Content) > 0 {
				if err := json.Unmarshal(it.Content, &c); err != nil {
					return Request{}, errors.New("input: " + err.Error())
				}
			}
			if it.Role == "system" || it.Role == "developer" {
				system = append(system, string(c))
				continue
			}
			req.Messages = append(req.Messages, Message{Role: it.Role, Content: string(c)})
		case "function_call":
			tc := ToolCall{ID: it.CallID, Name: it.Name, Arguments: argumentsJSON(it.Arguments)}
			if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "assistant" {
				req.Messages[n-1].ToolCalls = append(req.Messages[n-1].ToolCalls, tc)
			} else {
				req.Messages = append(req.Messages, Message{Role: "assistant", ToolCalls: []ToolCall{tc}})
			}
		case "function_call_output":
			req.Messages = append(req.Messages, Message{Role: "tool", Content: it.Output, ToolCallID: it.CallID})
		default:
			return Request{}, errors.New("input: unknown item type " + it.Type)
		}
	}
	req.System = strings.Join(system, "\n")
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return req, nil
}

// parseMessagesCount reads a count_tokens body: a Messages request that has
// no max_tokens.
func parseMessagesCount(body []byte) (Request, error) {
	var m map[string]json.RawMessage
	if err := decode(body, &m); err != nil {
		return Request{}, err
	}
	if _, ok := m["max_tokens"]; ok {
		return Request{}, errors.New("max_tokens: Extra inputs are not permitted")
	}
	m["max_tokens"] = json.RawMessage("1")
	b, err := json.Marshal(m)
	if err != nil {
		return Request{}, err
	}
	return anthropic{}.parse(b)
}

// serveCount answers a token-counting request with parse and write.
func (s *Server) serveCount(w http.ResponseWriter, r *http.Request, d dialect, parse func([]byte) (Request, error), write func(int64) any) {
	s.counted.Add(1)
	if len(s.key) > 0 && !s.authorized(r.Header) {
		d.writeError(w, apiError{status: http.StatusUnauthorized, message: "invalid or missing API key"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		d.writeError(w, apiError{status: http.StatusBadRequest, message: "reading the request body: " + err.Error()})
		return
	}
	req, err := parse(body)
	if err != nil {
		d.writeError(w, apiError{status: http.StatusBadRequest, message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, write(CountInputTokens(req)))
}
