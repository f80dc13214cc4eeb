package telemetry

import (
	"encoding/json"
	"net"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/proctor-dev/proctor/runner/provider"
)

// GenAI operations (gen_ai.operation.name) of Proctor's calls.
const (
	OperationChat        = "chat"         // an OpenAI-compatible or Anthropic call
	OperationInvokeAgent = "invoke_agent" // an agent CLI's run on a sample
)

// Attributes of Proctor's own, beside the conventions'.
const (
	AttrModel       = attribute.Key("proctor.model")   // the spec's model name
	AttrDataset     = attribute.Key("proctor.dataset") // the spec's dataset name
	AttrSampleID    = attribute.Key("proctor.sample.id")
	AttrSampleIndex = attribute.Key("proctor.sample.index")
	AttrAttempt     = attribute.Key("proctor.attempt") // 1 for the first
	AttrEndpoint    = attribute.Key("proctor.endpoint")
	AttrCost        = attribute.Key("proctor.cost_usd")
	AttrCached      = attribute.Key("proctor.cached") // answered from the cache
	AttrHook        = attribute.Key("proctor.hook")
	AttrSlot        = attribute.Key("proctor.slot")
	AttrEvaluation  = attribute.Key("proctor.evaluation")
	AttrRun         = attribute.Key("proctor.run")
	AttrWorker      = attribute.Key("proctor.worker")   // a runner pod's Job completion index
	AttrBatch       = attribute.Key("proctor.batch.id") // the provider's batch that answered
	// The GenAI conventions' names for cached input tokens (newer than the
	// semconv package Proctor builds with).
	AttrCacheReadTokens     = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	AttrCacheCreationTokens = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
)

// EvaluationResultEvent is the conventions' event of a score.
const EvaluationResultEvent = "gen_ai.evaluation.result"

// GenAI is what the GenAI conventions say of one model's calls, known before
// any is made.
type GenAI struct {
	Operation string // OperationChat or OperationInvokeAgent
	// Provider is gen_ai.provider.name: openai, anthropic; "" for an agent.
	Provider string
	// RequestModel is the provider's model id (gen_ai.request.model).
	RequestModel string
	// AgentName names an agent model (gen_ai.agent.name).
	AgentName string
	// BaseURL is the API's root (server.address, server.port).
	BaseURL string
	// Sampling parameters, where the spec sets them.
	Temperature, TopP *float64
	MaxTokens         int
	Seed              *int64
	Stop              []string
}

// Attributes are g's attributes of an attempt's span.
func (g GenAI) Attributes() []attribute.KeyValue {
	out := []attribute.KeyValue{semconv.GenAIOperationNameKey.String(g.operation())}
	if g.Provider != "" {
		out = append(out, semconv.GenAIProviderNameKey.String(g.Provider))
	}
	if g.RequestModel != "" {
		out = append(out, semconv.GenAIRequestModel(g.RequestModel))
	}
	if g.AgentName != "" {
		out = append(out, semconv.GenAIAgentName(g.AgentName))
	}
	if u, err := url.Parse(g.BaseURL); err == nil && u.Host != "" {
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
		}
		out = append(out, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			out = append(out, semconv.ServerPort(p))
		}
	} else if host, port, err := net.SplitHostPort(g.BaseURL); err == nil {
		out = append(out, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			out = append(out, semconv.ServerPort(p))
		}
	}
	if g.Temperature != nil {
		out = append(out, semconv.GenAIRequestTemperature(*g.Temperature))
	}
	if g.TopP != nil {
		out = append(out, semconv.GenAIRequestTopP(*g.TopP))
	}
	if g.MaxTokens > 0 {
		out = append(out, semconv.GenAIRequestMaxTokens(g.MaxTokens))
	}
	if g.Seed != nil {
		out = append(out, semconv.GenAIRequestSeed(int(*g.Seed)))
	}
	if len(g.Stop) > 0 {
		out = append(out, semconv.GenAIRequestStopSequences(g.Stop...))
	}
	return out
}

// SpanName is the conventions' name of an attempt's span:
// "{operation} {model}".
func (g GenAI) SpanName() string {
	name := g.RequestModel
	if g.Operation == OperationInvokeAgent {
		name = g.AgentName
	}
	if name == "" {
		return g.operation()
	}
	return g.operation() + " " + name
}

// operation is g's operation, chat when unset.
func (g GenAI) operation() string {
	if g.Operation == "" {
		return OperationChat
	}
	return g.Operation
}

// Answered sets an attempt's answer on its span: tokens, finish reason, cost.
func Answered(span trace.Span, u provider.Usage, finishReason string, cost float64, priced bool) {
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		semconv.GenAIUsageInputTokens(int(u.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(u.OutputTokens)),
	}
	if u.CachedInputTokens > 0 {
		attrs = append(attrs, AttrCacheReadTokens.Int64(u.CachedInputTokens))
	}
	if u.CacheWriteInputTokens > 0 {
		attrs = append(attrs, AttrCacheCreationTokens.Int64(u.CacheWriteInputTokens))
	}
	if finishReason != "" {
		attrs = append(attrs, semconv.GenAIResponseFinishReasons(finishReason))
	}
	if priced {
		attrs = append(attrs, AttrCost.Float64(cost))
	}
	span.SetAttributes(attrs...)
}

// The conventions' message shapes (gen_ai.input.messages and
// gen_ai.output.messages are JSON of these).
type (
	chatMessage struct {
		Role         string `json:"role"`
		Parts        []part `json:"parts"`
		FinishReason string `json:"finish_reason,omitempty"`
	}
	part struct {
		Type      string          `json:"type"`
		Content   string          `json:"content,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
		Response  string          `json:"response,omitempty"`
	}
)

// Content sets what a call was sent and answered on its span, as the
// conventions' opt-in attributes: system instructions, input and output
// messages. Its caller redacts them (and opted in).
func Content(span trace.Span, system string, in []provider.Message, out *provider.Response) {
	if !span.IsRecording() {
		return
	}
	var attrs []attribute.KeyValue
	if system != "" {
		attrs = append(attrs, semconv.GenAISystemInstructionsKey.String(marshal([]part{{Type: "text", Content: system}})))
	}
	if len(in) > 0 {
		msgs := make([]chatMessage, 0, len(in))
		for _, m := range in {
			msgs = append(msgs, messageOf(m))
		}
		attrs = append(attrs, semconv.GenAIInputMessagesKey.String(marshal(msgs)))
	}
	if out != nil {
		m := messageOf(provider.Message{Role: provider.RoleAssistant, Content: out.Text, ToolCalls: out.ToolCalls})
		m.FinishReason = out.FinishReason
		attrs = append(attrs, semconv.GenAIOutputMessagesKey.String(marshal([]chatMessage{m})))
	}
	span.SetAttributes(attrs...)
}

func messageOf(m provider.Message) chatMessage {
	out := chatMessage{Role: m.Role}
	switch {
	case m.Role == provider.RoleTool:
		out.Parts = append(out.Parts, part{Type: "tool_call_response", ID: m.ToolCallID, Response: m.Content})
	case m.Content != "":
		out.Parts = append(out.Parts, part{Type: "text", Content: m.Content})
	}
	for _, c := range m.ToolCalls {
		out.Parts = append(out.Parts, part{Type: "tool_call", ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	if out.Parts == nil {
		out.Parts = []part{}
	}
	return out
}

func marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// Scored adds a score to the sample's span, as the conventions' evaluation
// result event, and to the scorer's span.
func Scored(sample, scorer trace.Span, name string, value float64) {
	attrs := []attribute.KeyValue{semconv.GenAIEvaluationName(name), semconv.GenAIEvaluationScoreValue(value)}
	if scorer.IsRecording() {
		scorer.SetAttributes(attrs...)
	}
	if sample.IsRecording() {
		sample.AddEvent(EvaluationResultEvent, trace.WithAttributes(attrs...))
	}
}
