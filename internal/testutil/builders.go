// Package testutil holds fluent builders for tests:
//
//	testutil.MakeEvaluation("arith", "ns").
//		InlineDataset("d", 10).
//		OpenAIModel("small", fakeURL).
//		Scorer(v1alpha1.ScorerExactMatch).
//		Obj()
package testutil

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// EvaluationWrapper builds an Evaluation.
type EvaluationWrapper struct{ v1alpha1.Evaluation }

// MakeEvaluation starts an Evaluation with defaults applied as the API server
// would (via SetDefaults when Obj is called).
func MakeEvaluation(name, ns string) *EvaluationWrapper {
	return &EvaluationWrapper{v1alpha1.Evaluation{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Evaluation"},
		// A UID as the API server would give (which replaces it on create): the
		// controller and runners trust only objects controlled by it.
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + ns + "-" + name)},
	}}
}

// Obj returns the Evaluation, defaulted.
func (w *EvaluationWrapper) Obj() *v1alpha1.Evaluation {
	ev := w.Evaluation.DeepCopy()
	v1alpha1.SetDefaults(&ev.Spec)
	return ev
}

// InlineDataset adds a dataset of n arithmetic questions "What is i+1?" whose
// expected answer is i+1 (the fake server answers them).
func (w *EvaluationWrapper) InlineDataset(name string, n int) *EvaluationWrapper {
	items := make([]runtime.RawExtension, n)
	for i := range n {
		items[i] = runtime.RawExtension{Raw: fmt.Appendf(nil, `{"id":"%s-%d","input":"What is %d+1?","expected":"%d"}`, name, i, i, i+1)}
	}
	return w.Dataset(v1alpha1.Dataset{Name: name, Source: v1alpha1.DatasetSource{Inline: items}})
}

// InlineItems adds a dataset of the given JSON objects.
func (w *EvaluationWrapper) InlineItems(name string, items ...any) *EvaluationWrapper {
	raw := make([]runtime.RawExtension, len(items))
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			panic(err)
		}
		raw[i] = runtime.RawExtension{Raw: b}
	}
	return w.Dataset(v1alpha1.Dataset{Name: name, Source: v1alpha1.DatasetSource{Inline: raw}})
}

// ConfigMapDataset adds a dataset read from a ConfigMap key.
func (w *EvaluationWrapper) ConfigMapDataset(name, configMap, key string) *EvaluationWrapper {
	return w.Dataset(v1alpha1.Dataset{Name: name, Source: v1alpha1.DatasetSource{ConfigMap: &v1alpha1.ConfigMapSource{Name: configMap, Key: key}}})
}

// Dataset adds a dataset.
func (w *EvaluationWrapper) Dataset(d v1alpha1.Dataset) *EvaluationWrapper {
	w.Spec.Datasets = append(w.Spec.Datasets, d)
	return w
}

// OpenAIModel adds an OpenAI-compatible model at baseURL (…/v1).
func (w *EvaluationWrapper) OpenAIModel(name, baseURL string) *EvaluationWrapper {
	return w.Model(v1alpha1.Model{Name: name, Provider: v1alpha1.ProviderOpenAI, Model: "fake-" + name, BaseURL: baseURL})
}

// AnthropicModel adds an Anthropic model at baseURL.
func (w *EvaluationWrapper) AnthropicModel(name, baseURL string) *EvaluationWrapper {
	return w.Model(v1alpha1.Model{Name: name, Provider: v1alpha1.ProviderAnthropic, Model: "fake-" + name, BaseURL: baseURL})
}

// Model adds a model.
func (w *EvaluationWrapper) Model(m v1alpha1.Model) *EvaluationWrapper {
	w.Spec.Models = append(w.Spec.Models, m)
	return w
}

// RateLimit sets the last model's requests per minute.
func (w *EvaluationWrapper) RateLimit(rpm int64) *EvaluationWrapper {
	w.Spec.Models[len(w.Spec.Models)-1].RateLimit = &v1alpha1.RateLimit{RequestsPerMinute: rpm}
	return w
}

// APIKeySecret makes the last model read its key from a Secret.
// Pricing prices the last model added, in dollars per million tokens.
func (w *EvaluationWrapper) Pricing(input, output string) *EvaluationWrapper {
	w.Spec.Models[len(w.Spec.Models)-1].Pricing = &v1alpha1.Pricing{InputPerMillion: v1alpha1.Number(input), OutputPerMillion: v1alpha1.Number(output)}
	return w
}

// MaxTokens caps the answers of the last model added.
func (w *EvaluationWrapper) MaxTokens(n int32) *EvaluationWrapper {
	m := &w.Spec.Models[len(w.Spec.Models)-1]
	if m.Parameters == nil {
		m.Parameters = &v1alpha1.Parameters{}
	}
	m.Parameters.MaxTokens = &n
	return w
}

// Budget sets spec.budget.maxCost, in dollars.
func (w *EvaluationWrapper) Budget(maxCost string) *EvaluationWrapper {
	n := v1alpha1.Number(maxCost)
	w.Spec.Budget = &v1alpha1.Budget{MaxCost: &n}
	return w
}

func (w *EvaluationWrapper) APIKeySecret(secret, key string) *EvaluationWrapper {
	w.Spec.Models[len(w.Spec.Models)-1].APIKey = &v1alpha1.APIKey{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
	}}
	return w
}

// Scorer adds a scorer of the given type.
func (w *EvaluationWrapper) Scorer(t v1alpha1.ScorerType) *EvaluationWrapper {
	w.Spec.Scoring = append(w.Spec.Scoring, v1alpha1.Scorer{Type: t})
	return w
}

// Prompt sets the prompt template.
func (w *EvaluationWrapper) Prompt(template string) *EvaluationWrapper {
	w.Spec.Prompt = &v1alpha1.Prompt{Template: template}
	return w
}

// ShardSize sets the samples per shard.
func (w *EvaluationWrapper) ShardSize(n int32) *EvaluationWrapper {
	w.Spec.ShardSize = ptr.To(n)
	return w
}

// Parallelism sets the shards of a model running at once.
func (w *EvaluationWrapper) Parallelism(n int32) *EvaluationWrapper {
	w.Spec.Parallelism = ptr.To(n)
	return w
}

// Concurrency sets the samples in flight per shard.
func (w *EvaluationWrapper) Concurrency(n int32) *EvaluationWrapper {
	w.Spec.Concurrency = ptr.To(n)
	return w
}

// Baseline compares the run with the results of Evaluation name.
func (w *EvaluationWrapper) Baseline(name string) *EvaluationWrapper {
	w.Spec.Baseline = &v1alpha1.Baseline{Evaluation: name}
	return w
}

// Suspend sets spec.suspend.
// Queue has Kueue admit the Evaluation's Jobs through LocalQueue name.
func (w *EvaluationWrapper) Queue(name string) *EvaluationWrapper {
	if w.Spec.Scheduling == nil {
		w.Spec.Scheduling = &v1alpha1.Scheduling{}
	}
	w.Spec.Scheduling.QueueName = name
	return w
}

func (w *EvaluationWrapper) Suspend(s bool) *EvaluationWrapper {
	w.Spec.Suspend = ptr.To(s)
	return w
}

// Retry sets the retry policy.
func (w *EvaluationWrapper) Retry(attempts int32, initial, maxBackoff string) *EvaluationWrapper {
	w.Spec.Retry = &v1alpha1.RetryPolicy{MaxAttempts: ptr.To(attempts), InitialBackoff: duration(initial), MaxBackoff: duration(maxBackoff)}
	return w
}

// RunnerImage sets spec.runner.image.
func (w *EvaluationWrapper) RunnerImage(image string) *EvaluationWrapper {
	if w.Spec.Runner == nil {
		w.Spec.Runner = &v1alpha1.Runner{}
	}
	w.Spec.Runner.Image = image
	return w
}

// Generation sets metadata.generation (for unit tests; the API server sets it).
func (w *EvaluationWrapper) Generation(g int64) *EvaluationWrapper {
	w.ObjectMeta.Generation = g
	return w
}

func duration(s string) *v1alpha1.Backoff {
	var d v1alpha1.Backoff
	if err := d.UnmarshalJSON([]byte(`"` + s + `"`)); err != nil {
		panic(err)
	}
	return &d
}

// EndpointModel adds a model calling through ModelEndpoint endpoint, with
// weight (0: unset).
func (w *EvaluationWrapper) EndpointModel(name, endpoint string, weight int32) *EvaluationWrapper {
	ref := &v1alpha1.EndpointReference{Name: endpoint}
	if weight > 0 {
		ref.Weight = &weight
	}
	return w.Model(v1alpha1.Model{Name: name, EndpointRef: ref, Model: "fake-model"})
}

// AgentModel adds an agent model running command (image: a placeholder the
// integration kubelet does not pull) whose agent calls through the given
// ModelEndpoints, learning each's address and key from OPENAI_BASE_URL and
// OPENAI_API_KEY (the first) or NAME_BASE_URL and NAME_API_KEY.
func (w *EvaluationWrapper) AgentModel(name string, command []string, endpoints ...string) *EvaluationWrapper {
	a := &v1alpha1.Agent{Image: "agent:test", Command: command}
	for i, ep := range endpoints {
		prefix := "OPENAI"
		if i > 0 {
			prefix = strings.ToUpper(strings.ReplaceAll(ep, "-", "_"))
		}
		a.Endpoints = append(a.Endpoints, v1alpha1.AgentEndpoint{
			EndpointRef: v1alpha1.EndpointReference{Name: ep}, BaseURLEnv: prefix + "_BASE_URL", APIKeyEnv: prefix + "_API_KEY",
		})
	}
	return w.Model(v1alpha1.Model{Name: name, Provider: v1alpha1.ProviderAgent, Agent: a})
}

// EndpointWrapper builds ModelEndpoints for tests.
type EndpointWrapper struct{ ep v1alpha1.ModelEndpoint }

// MakeEndpoint starts an openai ModelEndpoint calling baseURL.
func MakeEndpoint(name, ns, baseURL string) *EndpointWrapper {
	w := &EndpointWrapper{}
	w.ep.Name, w.ep.Namespace = name, ns
	w.ep.Spec = v1alpha1.ModelEndpointSpec{Provider: v1alpha1.EndpointProvider(v1alpha1.ProviderOpenAI), BaseURL: baseURL}
	return w
}

// Obj returns the ModelEndpoint.
func (w *EndpointWrapper) Obj() *v1alpha1.ModelEndpoint { return w.ep.DeepCopy() }

// RequestsPerMinute sets the endpoint's request limit.
func (w *EndpointWrapper) RequestsPerMinute(n int64) *EndpointWrapper {
	if w.ep.Spec.Limits == nil {
		w.ep.Spec.Limits = &v1alpha1.EndpointLimits{}
	}
	w.ep.Spec.Limits.RequestsPerMinute = n
	return w
}

// MaxInFlight sets the endpoint's bound on calls in flight.
func (w *EndpointWrapper) MaxInFlight(n int64) *EndpointWrapper {
	if w.ep.Spec.Limits == nil {
		w.ep.Spec.Limits = &v1alpha1.EndpointLimits{}
	}
	w.ep.Spec.Limits.MaxInFlight = n
	return w
}

// APIKeySecret takes the endpoint's key from a Secret.
func (w *EndpointWrapper) APIKeySecret(secret, key string) *EndpointWrapper {
	w.ep.Spec.APIKey = &v1alpha1.APIKey{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}
	return w
}
