package runner

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
)

func TestPromptEmptyIsError(t *testing.T) {
	tests := []struct {
		name         string
		template     string
		emptyIsError bool
		sample       dataset.Sample
		wantPrompt   string
		wantEmpty    bool
	}{
		{name: "input", template: "{{ .Input }}", emptyIsError: true, sample: dataset.Sample{Input: "2+2?"}, wantPrompt: "2+2?"},
		{name: "empty input refused", template: "{{ .Input }}", emptyIsError: true, sample: dataset.Sample{}, wantEmpty: true},
		{name: "space only refused", template: "  {{ .Input }}\n", emptyIsError: true, sample: dataset.Sample{Input: " "}, wantEmpty: true},
		{name: "empty allowed when not asked", template: "{{ .Input }}", sample: dataset.Sample{}, wantPrompt: ""},
		{
			name: "a conversation needs no input", template: "{{ .Input }}", emptyIsError: true,
			sample:     dataset.Sample{Messages: []provider.Message{{Role: provider.RoleUser, Content: "hi"}}},
			wantPrompt: "hi",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPrompt("", tt.template)
			if err != nil {
				t.Fatal(err)
			}
			p.EmptyIsError = tt.emptyIsError
			req, err := p.Request(&tt.sample)
			if got := errors.Is(err, ErrEmptyPrompt); got != tt.wantEmpty {
				t.Fatalf("Request error = %v, want ErrEmptyPrompt: %v", err, tt.wantEmpty)
			}
			if tt.wantEmpty {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantPrompt, req.Prompt); diff != "" {
				t.Errorf("prompt (-want +got):\n%s", diff)
			}
		})
	}
}
