package v1alpha1

import (
	"maps"
	"slices"
)

// UseEndpoint gives a model with endpointRef what it takes from its
// ModelEndpoint: provider, baseURL, headers and apiKey, defaulted as a model
// that says them itself, and the endpoint's pricing of its model unless it
// has its own. The model keeps endpointRef (its budget is the endpoint's) and
// its own rateLimit (a cap on its share).
func (m *Model) UseEndpoint(ep *ModelEndpointSpec) {
	m.Provider = Provider(ep.Provider)
	m.BaseURL = ep.BaseURL
	m.Headers = maps.Clone(ep.Headers)
	m.APIKey = ep.APIKey.DeepCopy()
	if m.Pricing == nil {
		m.Pricing = ep.PriceOf(m.Model)
	}
	m.setDefaults()
}

// PriceOf is the endpoint's pricing of a model identifier, or nil.
func (ep *ModelEndpointSpec) PriceOf(model string) *Pricing {
	for i := range ep.Pricing {
		if ep.Pricing[i].Model == model {
			return ep.Pricing[i].Pricing.DeepCopy()
		}
	}
	return nil
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
