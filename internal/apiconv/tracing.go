package apiconv

import (
	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/telemetry"
)

// Tracing is spec.tracing as the runner's tracing configuration (the
// process's attributes, log and environment are the caller's to add).
func Tracing(spec *v1alpha1.EvaluationSpec) telemetry.TracingConfig {
	var cfg telemetry.TracingConfig
	if t := spec.Tracing; t != nil {
		cfg.Endpoint, cfg.Protocol, cfg.Content = t.Endpoint, string(t.Protocol), t.CaptureContent
	}
	return cfg
}
