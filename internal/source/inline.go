package source

import (
	"encoding/json"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// Inline samples are in the spec (source.inline): every mode reads them as they
// are, and the controller counts them.
type Inline struct{}

var _ Itemized = Inline{}

func (Inline) Field() string                       { return "inline" }
func (Inline) Uses(s *v1alpha1.DatasetSource) bool { return len(s.Inline) > 0 }

func (Inline) Items(d *v1alpha1.Dataset) []json.RawMessage {
	items := make([]json.RawMessage, len(d.Source.Inline))
	for i, x := range d.Source.Inline {
		items[i] = json.RawMessage(x.Raw)
	}
	return items
}
