package testutil

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Jaeger is a real trace store (Jaeger v2, an OpenTelemetry Collector
// with Jaeger's storage and query service, built into bin/ by
// hack/install-module-program.sh) running for a test: OTLP in, Jaeger's
// query API out.
type Jaeger struct {
	// OTLPHTTP and OTLPGRPC are its OTLP receivers' base URLs, as
	// OTEL_EXPORTER_OTLP_ENDPOINT takes them.
	OTLPHTTP, OTLPGRPC string
	// Query is its query service's URL.
	Query string
}

// jaegerConfig receives OTLP into memory and serves it to queries.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%[1]d
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%[2]d
    grpc:
      endpoint: 127.0.0.1:%[3]d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 1000000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %[6]s:%[4]d
      http:
        endpoint: %[6]s:%[5]d
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// StartJaeger starts Jaeger for the rest of the test, its OTLP receivers
// on host (127.0.0.1, or an address pods reach). It fails the test when
// bin/jaeger is missing: a real part that is absent must not pass for a
// green run.
func StartJaeger(tb testing.TB, host string) *Jaeger {
	tb.Helper()
	bin, err := repoBinary("jaeger", "make jaeger (a few minutes, once)")
	if err != nil {
		tb.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		j, out, err := startJaeger(tb, bin, host, filepath.Join(tb.TempDir(), "jaeger.log"))
		if err == nil {
			return j
		}
		if attempt == 3 {
			tb.Fatalf("%v:\n%s", err, out)
		}
		// A port found free may be taken before Jaeger binds it.
		tb.Logf("%v; starting it again", err)
	}
}

func startJaeger(tb testing.TB, bin, host, logFile string) (*Jaeger, []byte, error) {
	p := freePorts(tb, 5)
	cfg := filepath.Join(filepath.Dir(logFile), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, p[0], p[1], p[2], p[3], p[4], host), 0o600); err != nil {
		tb.Fatal(err)
	}
	j := &Jaeger{
		OTLPGRPC: "http://" + host + ":" + strconv.Itoa(p[3]),
		OTLPHTTP: "http://" + host + ":" + strconv.Itoa(p[4]),
		Query:    "http://127.0.0.1:" + strconv.Itoa(p[1]),
	}
	proc := startProcess(tb, logFile, bin, "--config", cfg)
	health := "http://127.0.0.1:" + strconv.Itoa(p[0]) + "/status"
	deadline := time.After(60 * time.Second)
	for {
		if resp, err := http.Get(health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j, nil, nil
			}
		}
		select {
		case <-proc.exited:
			out, _ := os.ReadFile(logFile)
			return nil, out, fmt.Errorf("jaeger exited before it was ready: %w", proc.err)
		case <-deadline:
			out, _ := os.ReadFile(logFile)
			tb.Fatalf("jaeger was not ready in 60 s:\n%s", out)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// JaegerTrace is a trace as Jaeger's query API gives it.
type JaegerTrace struct {
	TraceID string       `json:"traceID"`
	Spans   []JaegerSpan `json:"spans"`
}

// JaegerSpan is one span of a trace.
type JaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

// Parent is the span's parent's id ("" for a root).
func (s JaegerSpan) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Tag is the span's attribute key, as text ("" when it has none).
func (s JaegerSpan) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			if f, ok := t.Value.(float64); ok {
				return strconv.FormatFloat(f, 'f', -1, 64)
			}
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Traces are the traces of service Jaeger holds (at most limit).
func (j *Jaeger) Traces(service string, limit int) ([]JaegerTrace, error) {
	q := url.Values{"service": {service}, "limit": {strconv.Itoa(limit)}, "lookback": {"1h"}}
	resp, err := http.Get(j.Query + "/api/traces?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jaeger's query API: %s", resp.Status)
	}
	var out struct {
		Data []JaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("jaeger's query API: %w", err)
	}
	return out.Data, nil
}
