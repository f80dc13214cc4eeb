package runner

import (
	"errors"
	"strings"
	"text/template"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/tmpl"
)

// Prompt renders a sample into a request.
type Prompt struct {
	system *template.Template // nil when there is no system prompt
	user   *template.Template
	// The sources, which identify the prompt in checkpoints.
	systemSrc, userSrc string
	// EmptyIsError makes a sample whose rendered prompt is empty (or only
	// space) and that carries no conversation fail before any call: a paid
	// model would answer nothing in particular. Agents that do not read the
	// prompt leave it unset.
	EmptyIsError bool
}

// ErrEmptyPrompt is the error of a sample whose prompt rendered empty.
var ErrEmptyPrompt = errors.New("the prompt is empty: the sample's input is empty or missing")

// promptData is what prompt templates see: .Sample (the record's fields, by their
// names in the data) and the mapped .Input, .Expected and .ID. It is a map rather
// than a struct because text/template finds struct fields by reflection on every
// execution, which costs more than the rest of a sample's bookkeeping.
func promptData(s *dataset.Sample) map[string]any {
	expected := s.Expected
	if expected == nil {
		expected = ""
	}
	return map[string]any{"Sample": s.Fields, "Input": s.Input, "Expected": expected, "ID": s.ID}
}

// PromptError is a prompt template that failed to parse or render; Field is
// "system" or "template", the spec.prompt field at fault.
type PromptError struct {
	Field string
	Err   error
}

func (e *PromptError) Error() string { return e.Err.Error() }
func (e *PromptError) Unwrap() error { return e.Err }

// NewPrompt parses the system and user templates.
func NewPrompt(system, user string) (*Prompt, error) {
	p := &Prompt{systemSrc: system, userSrc: user}
	var err error
	if system != "" {
		if p.system, err = tmpl.Parse("system", system); err != nil {
			return nil, &PromptError{Field: "system", Err: err}
		}
	}
	if p.user, err = tmpl.Parse("template", user); err != nil {
		return nil, &PromptError{Field: "template", Err: err}
	}
	return p, nil
}

// Request builds the request for a sample. A sample that carries a conversation is
// sent as it is (with the system prompt, if any); others get the rendered template
// as their one user message.
func (p *Prompt) Request(s *dataset.Sample) (*provider.Request, error) {
	data := promptData(s)
	req := &provider.Request{Tools: s.Tools, SampleID: s.ID, Sample: s.Fields}
	if p.system != nil {
		sys, err := tmpl.Execute(p.system, data)
		if err != nil {
			return nil, &PromptError{Field: "system", Err: err}
		}
		req.System = sys
	}
	if len(s.Messages) > 0 {
		req.Messages = s.Messages
		for i := len(s.Messages) - 1; i >= 0; i-- {
			if s.Messages[i].Role == provider.RoleUser {
				req.Prompt = s.Messages[i].Content
				break
			}
		}
		return req, nil
	}
	user, err := tmpl.Execute(p.user, data)
	if err != nil {
		return nil, &PromptError{Field: "template", Err: err}
	}
	if p.EmptyIsError && strings.TrimSpace(user) == "" {
		return nil, &PromptError{Field: "template", Err: ErrEmptyPrompt}
	}
	req.Prompt = user
	req.Messages = []provider.Message{{Role: provider.RoleUser, Content: user}}
	return req, nil
}
