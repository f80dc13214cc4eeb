package runner

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/proctor-dev/proctor/runner/dataset"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// The trace stage: each sample is a trace of its own, its root the sample's
// span (startSample, in finish); below it each attempt's span (the GenAI
// conventions', in send), each scorer's (the judge's attempts below it),
// each hook's, and each call an agent made through its proxy (its attempts
// below it). An agent is given its attempt's W3C trace context
// (TRACEPARENT), so that an agent that traces itself joins the trace. What a
// span says is redacted as records are; prompts and answers only when the
// Evaluation opts in (tracing.captureContent).

// startSample starts the root span of a sample's trace.
func (e *Engine) startSample(ctx context.Context, m *modelRun, ds *Dataset, s *dataset.Sample) (context.Context, trace.Span) {
	t := e.opts.Tracer
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.Start(ctx, "sample "+m.Name, trace.WithNewRoot(), trace.WithAttributes(
		telemetry.AttrModel.String(m.Name), telemetry.AttrDataset.String(ds.Name),
		telemetry.AttrSampleID.String(s.ID), telemetry.AttrSampleIndex.Int(s.Index)))
}

// endSample ends a sample's span with its record's outcome (nil: the run
// stopped before it finished).
func endSample(span trace.Span, rec *results.Record) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if rec == nil {
		span.SetAttributes(semconv.ErrorTypeKey.String("unfinished"))
		return
	}
	span.SetAttributes(semconv.GenAIUsageInputTokens(int(rec.InputTokens)), semconv.GenAIUsageOutputTokens(int(rec.OutputTokens)))
	if rec.Cost != nil {
		span.SetAttributes(telemetry.AttrCost.Float64(*rec.Cost))
	}
	if rec.Error != "" {
		telemetry.Fail(span, errorKind(rec), rec.Error)
	}
}

// startBatchSample starts the root span of a batch model's sample, as of its
// batch's submission (start), with the span of its request in the batch
// from then to now: what it answered (resp) or why it failed (err).
func (e *Engine) startBatchSample(ctx context.Context, m *modelRun, ds *Dataset, s *dataset.Sample, batch string, start time.Time, attempt int, resp *provider.Response, err error, cost float64) (context.Context, trace.Span) {
	t := e.opts.Tracer
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, root := t.Start(ctx, "sample "+m.Name, trace.WithNewRoot(), trace.WithTimestamp(start), trace.WithAttributes(
		telemetry.AttrModel.String(m.Name), telemetry.AttrDataset.String(ds.Name),
		telemetry.AttrSampleID.String(s.ID), telemetry.AttrSampleIndex.Int(s.Index), telemetry.AttrBatch.String(batch)))
	_, span := t.Start(ctx, m.spanName, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
		trace.WithAttributes(m.spanAttrs...), trace.WithAttributes(telemetry.AttrAttempt.Int(attempt), telemetry.AttrBatch.String(batch)))
	if err != nil {
		telemetry.Fail(span, "batch", e.redact(err.Error()))
	} else {
		telemetry.Answered(span, resp.Usage, resp.FinishReason, cost, m.Price != nil)
	}
	span.End(trace.WithTimestamp(e.clock.Now()))
	return ctx, root
}

// startAttempt starts an attempt's span: the GenAI conventions' client span
// of one request to m's provider (n counts the call's attempts from 1).
func (e *Engine) startAttempt(ctx context.Context, m *modelRun, n int) (context.Context, trace.Span) {
	t := e.opts.Tracer
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	name, attrs := m.spanName, m.spanAttrs
	if fc, ok := ctx.Value(forwardKey{}).(*forwardCall); ok && fc.model != "" {
		// An agent's call: the model its request names.
		name = telemetry.OperationChat + " " + fc.model
		attrs = append(attrs[:len(attrs):len(attrs)], semconv.GenAIRequestModel(fc.model))
	}
	ctx, span := t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	span.SetAttributes(telemetry.AttrAttempt.Int(n))
	return ctx, span
}

// endAttempt ends an attempt's span with what it came to.
func (e *Engine) endAttempt(span trace.Span, m *modelRun, req *provider.Request, resp *provider.Response, err error, cost float64, priced bool) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		kind := telemetry.Outcome(err)
		var he *provider.HTTPError
		if errors.As(err, &he) {
			kind = strconv.Itoa(he.StatusCode)
			span.SetAttributes(semconv.HTTPResponseStatusCode(he.StatusCode))
		}
		telemetry.Fail(span, kind, e.redact(err.Error()))
		if priced && cost > 0 {
			span.SetAttributes(telemetry.AttrCost.Float64(cost))
		}
		return
	}
	telemetry.Answered(span, resp.Usage, resp.FinishReason, cost, priced)
	if e.opts.Tracer.Content() && !m.forwarded {
		e.spanContent(span, m, req, resp)
	}
}

// spanContent puts what an attempt was sent and answered on its span,
// redacted. An agent was sent its prompt.
func (e *Engine) spanContent(span trace.Span, m *modelRun, req *provider.Request, resp *provider.Response) {
	in := make([]provider.Message, 0, len(req.Messages))
	if m.Agent {
		in = append(in, provider.Message{Role: provider.RoleUser, Content: e.redact(req.Prompt)})
	} else {
		for _, msg := range req.Messages {
			msg.Content = e.redact(msg.Content)
			msg.ToolCalls = e.redactToolCalls(msg.ToolCalls)
			in = append(in, msg)
		}
	}
	out := *resp
	out.Text, out.ToolCalls = e.redact(resp.Text), e.redactToolCalls(resp.ToolCalls)
	telemetry.Content(span, e.redact(req.System), in, &out)
}

// withTraceParent gives an agent's request its attempt's trace context.
func withTraceParent(ctx context.Context, m *modelRun, req *provider.Request) *provider.Request {
	if !m.Agent {
		return req
	}
	tp := telemetry.TraceParent(ctx)
	if tp == "" {
		return req
	}
	r := *req
	r.Env = append(req.Env[:len(req.Env):len(req.Env)], "TRACEPARENT="+tp)
	if s := sessionOf(ctx); s != nil {
		s.setParent(trace.SpanContextFromContext(ctx))
	}
	return &r
}

// startProxied starts the span of a call an agent made through p's proxy
// in session s: below the agent's attempt, or below the agent's own span
// when the agent traces itself in the same trace.
func (e *Engine) startProxied(ctx context.Context, s *agentSession, p *agentProxy, r *http.Request, model string) (context.Context, trace.Span) {
	t := e.opts.Tracer
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	parent := s.parentSpan()
	ctx = trace.ContextWithSpanContext(ctx, parent)
	if own := trace.SpanContextFromContext(telemetry.WithRemoteParent(context.Background(), r.Header.Get("Traceparent"))); own.IsValid() && own.TraceID() == parent.TraceID() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, own)
	}
	return t.Start(ctx, "proxy "+p.ep.Endpoint, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		telemetry.AttrEndpoint.String(p.ep.Endpoint), semconv.HTTPRequestMethodKey.String(r.Method),
		semconv.URLPath(r.URL.Path), semconv.GenAIRequestModel(model)))
}

// endProxied ends a proxied call's span with what the agent was answered.
func endProxied(span trace.Span, c results.ProxiedCall) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(telemetry.AttrAttempt.Int(c.Attempts), semconv.GenAIUsageInputTokens(int(c.InputTokens)), semconv.GenAIUsageOutputTokens(int(c.OutputTokens)))
	if c.Status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(c.Status))
	}
	if c.Cost != nil {
		span.SetAttributes(telemetry.AttrCost.Float64(*c.Cost))
	}
	if c.Error != "" {
		kind := "error"
		if c.Status != 0 {
			kind = strconv.Itoa(c.Status)
		}
		telemetry.Fail(span, kind, c.Error)
	}
}

// startHook starts a hook's span in its slot.
func (e *Engine) startHook(ctx context.Context, hook *Hook, hc HookContext) (context.Context, trace.Span) {
	t := e.opts.Tracer
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.Start(ctx, "hook "+hook.Name, trace.WithAttributes(telemetry.AttrHook.String(hook.Name), telemetry.AttrSlot.Int(hc.Slot)))
}

// startScorer starts a scorer's span (its judge's attempts go below it).
func (e *Engine) startScorer(ctx context.Context, name string) (context.Context, trace.Span) {
	t := e.opts.Tracer
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.Start(ctx, "score "+name, trace.WithAttributes(semconv.GenAIEvaluationName(name)))
}

// sessionKey holds, in a sample's context, its agent's session.
type sessionKey struct{}

func sessionOf(ctx context.Context) *agentSession {
	s, _ := ctx.Value(sessionKey{}).(*agentSession)
	return s
}
