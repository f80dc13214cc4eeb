package v1alpha1

import (
	"fmt"
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
	for _, c := range spec.EndpointCallers() {
		out = append(out, c.Ref.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EndpointCaller is what calls through a ModelEndpoint: a model with
// endpointRef, or the agent of an agent model listing it in agent.endpoints.
type EndpointCaller struct {
	// Name is the caller's name in the endpoint's budget and in a runner's
	// usage: the model's, or AgentCallerName for an agent.
	Name string
	// Model is the model entry (the agent model for an agent).
	Model *Model
	// Ref is the reference to the endpoint, with its weight.
	Ref *EndpointReference
	// Path is the reference's field path, for messages.
	Path string
	// Agent is the agent.endpoints entry; nil for a model's own calls.
	Agent *AgentEndpoint
}

// AgentCallerName names the calls an agent model's agent makes through an
// endpoint (model names hold no slash, so it is no model's).
func AgentCallerName(model, endpoint string) string { return model + "/" + endpoint }

// EndpointCallers lists the callers of every ModelEndpoint spec refers to, in
// model order.
func (spec *EvaluationSpec) EndpointCallers() []EndpointCaller {
	var out []EndpointCaller
	for i := range spec.Models {
		m := &spec.Models[i]
		if m.EndpointRef != nil {
			out = append(out, EndpointCaller{Name: m.Name, Model: m, Ref: m.EndpointRef, Path: fmt.Sprintf("spec.models[%d].endpointRef", i)})
		}
		if m.Agent == nil {
			continue
		}
		for j := range m.Agent.Endpoints {
			a := &m.Agent.Endpoints[j]
			out = append(out, EndpointCaller{Name: AgentCallerName(m.Name, a.EndpointRef.Name), Model: m, Ref: &a.EndpointRef,
				Path: fmt.Sprintf("spec.models[%d].agent.endpoints[%d].endpointRef", i, j), Agent: a})
		}
	}
	return out
}
