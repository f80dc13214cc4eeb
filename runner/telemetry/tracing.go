package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing: one trace per sample, its root the sample's span; below it a span
// per model attempt (the OpenTelemetry GenAI semantic conventions), per
// scorer (the judge's attempts below it), per hook and per call an agent
// made through its proxy. Off unless an OTLP endpoint is configured.

// Protocols of OTLP, as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// ServiceName is the service the spans come from, unless OTEL_SERVICE_NAME
// says otherwise.
const ServiceName = "proctor"

// TracingConfig says whether and where a run sends its traces. The standard
// OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, ..._TRACES_ENDPOINT,
// ..._PROTOCOL, ..._HEADERS, OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER=none)
// win over the spec's endpoint and protocol.
type TracingConfig struct {
	// Endpoint is the spec's OTLP endpoint, the base URL as
	// OTEL_EXPORTER_OTLP_ENDPOINT takes it (/v1/traces is added for HTTP).
	Endpoint string
	// Protocol is the spec's protocol: http/protobuf (default) or grpc.
	Protocol string
	// Content: prompts, system instructions and answers are recorded on the
	// attempts' spans (gen_ai.input.messages, ...), redacted as records are.
	Content bool
	// Attributes describe the process: its Evaluation, run, namespace, pod.
	Attributes []attribute.KeyValue
	// Version is Proctor's (service.version).
	Version string
	// Log hears of spans that could not be exported.
	Log logr.Logger
	// Getenv reads the environment; nil: os.Getenv.
	Getenv func(string) string
}

// Tracer makes a run's spans. A nil *Tracer makes none (and costs nothing).
type Tracer struct {
	tracer   trace.Tracer
	content  bool
	provider *sdktrace.TracerProvider
}

// NewTracer makes spans with tp (tests give an SDK provider with an
// in-memory exporter); content as TracingConfig.Content.
func NewTracer(tp trace.TracerProvider, content bool) *Tracer {
	return &Tracer{tracer: tp.Tracer("github.com/proctor-dev/proctor/runner"), content: content}
}

// Enabled reports whether cfg (with the environment) sends traces.
func (cfg TracingConfig) Enabled() bool {
	env := cfg.getenv()
	if strings.EqualFold(strings.TrimSpace(env("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if strings.TrimSpace(env("OTEL_TRACES_EXPORTER")) == "none" {
		return false
	}
	return env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || cfg.Endpoint != ""
}

func (cfg TracingConfig) getenv() func(string) string {
	if cfg.Getenv != nil {
		return cfg.Getenv
	}
	return os.Getenv
}

// protocol is the OTLP protocol of the traces: the environment's, else the
// spec's, else http/protobuf (the specification's default).
func (cfg TracingConfig) protocol() (string, error) {
	env := cfg.getenv()
	p := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		p = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if p == "" {
		p = cfg.Protocol
	}
	switch p {
	case "", ProtocolHTTP:
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("OTLP protocol %q: Proctor sends traces over http/protobuf or grpc", p)
}

// StartTracing starts sending traces as cfg says, or returns nil when it
// says nothing of where to. Shutdown sends what is left.
func StartTracing(ctx context.Context, cfg TracingConfig) (*Tracer, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	proto, err := cfg.protocol()
	if err != nil {
		return nil, err
	}
	env := cfg.getenv()
	// The spec's endpoint counts only where the environment names none: the
	// exporters read OTEL_EXPORTER_OTLP_* themselves.
	fromSpec := env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_ENDPOINT") == ""
	var exp sdktrace.SpanExporter
	switch proto {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if fromSpec {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if fromSpec {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("starting the OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(append([]attribute.KeyValue{semconv.ServiceName(ServiceName), semconv.ServiceVersion(cfg.Version)}, cfg.Attributes...)...),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("describing the process for traces: %w", err)
	}
	var batch []sdktrace.BatchSpanProcessorOption
	if env("OTEL_BSP_MAX_QUEUE_SIZE") == "" {
		// A few spans a sample, hundreds of samples a second: the default
		// queue (2048) would drop spans while one export is under way.
		batch = append(batch, sdktrace.WithMaxQueueSize(32768), sdktrace.WithMaxExportBatchSize(2048))
	}
	// The sampler is OTEL_TRACES_SAMPLER's (default: every trace).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batch...), sdktrace.WithResource(res))
	log := cfg.Log
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Error(err, "Failed to send traces")
	}))
	t := NewTracer(tp, cfg.Content)
	t.provider = tp
	return t, nil
}

// Shutdown sends the spans not yet sent and stops; ctx bounds the wait.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Content reports whether prompts and answers go on spans.
func (t *Tracer) Content() bool { return t != nil && t.content }

// On reports whether spans are made.
func (t *Tracer) On() bool { return t != nil }

var noopSpan = noop.Span{}

// Start starts a span in ctx; with a nil Tracer, ctx and a span that
// records nothing.
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noopSpan
	}
	return t.tracer.Start(ctx, name, opts...)
}

// Fail marks span failed with err's kind (error.type) and message (msg,
// already redacted: spans never carry a key).
func Fail(span trace.Span, kind, msg string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(kind))
	span.SetStatus(codes.Error, msg)
}

// propagator is W3C trace context, what TRACEPARENT carries.
var propagator = propagation.TraceContext{}

// TraceParent is the W3C traceparent of ctx's span ("" when none).
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// WithRemoteParent is ctx with the span a W3C traceparent names as its
// parent (ctx as it was when it names none).
func WithRemoteParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}
