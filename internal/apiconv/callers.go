package apiconv

import (
	"fmt"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// EndpointCaller is what calls through a ModelEndpoint: a model with
// endpointRef, or the agent of an agent model listing it in agent.endpoints.
type EndpointCaller struct {
	// Name is the caller's name in the endpoint's budget and in a runner's
	// usage: the model's, or AgentCallerName for an agent.
	Name string
	// Model is the model entry (the agent model for an agent).
	Model *v1alpha1.Model
	// Ref is the reference to the endpoint, with its weight.
	Ref *v1alpha1.EndpointReference
	// Path is the reference's field path, for messages.
	Path string
	// Agent is the agent.endpoints entry; nil for a model's own calls.
	Agent *v1alpha1.AgentEndpoint
}

// AgentCallerName names the calls an agent model's agent makes through an
// endpoint (model names hold no slash, so it is no model's).
func AgentCallerName(model, endpoint string) string { return model + "/" + endpoint }

// EndpointCallers lists the callers of every ModelEndpoint spec refers to, in
// model order.
func EndpointCallers(spec *v1alpha1.EvaluationSpec) []EndpointCaller {
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
