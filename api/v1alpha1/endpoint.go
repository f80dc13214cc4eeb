package v1alpha1

import (
	"maps"
	"slices"
)

// UseEndpoint gives a model with endpointRef what it takes from its
// ModelEndpoint: provider, baseURL, headers and apiKey, defaulted as a model
// that says them itself. The model keeps endpointRef (its budget is the
// endpoint's) and its own rateLimit (a cap on its share).
func (m *Model) UseEndpoint(ep *ModelEndpointSpec) {
	m.Provider = Provider(ep.Provider)
	m.BaseURL = ep.BaseURL
	m.Headers = maps.Clone(ep.Headers)
	m.APIKey = ep.APIKey.DeepCopy()
	m.setDefaults()
}

// EndpointNames are the ModelEndpoints spec's models and agents refer to,
// sorted, each once.
func (spec *EvaluationSpec) EndpointNames() []string {
	var out []string
	for _, m := range spec.Models {
		if m.EndpointRef != nil {
			out = append(out, m.EndpointRef.Name)
		}
		if m.Agent != nil {
			for _, a := range m.Agent.Endpoints {
				out = append(out, a.EndpointRef.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
