package controllers

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// Metrics, beside controller-runtime's own. Labels are bounded: a phase or an
// outcome, never a name.
var (
	evaluationsByPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "proctor_evaluations",
		Help: "Evaluations known to this manager, by phase.",
	}, []string{"phase"})
	samplesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proctor_samples_total",
		Help: "Samples evaluated, by outcome (succeeded or errored).",
	}, []string{"outcome"})
)

// collectors are Proctor's metrics, registered with controller-runtime's
// (and each documented in docs/reference/metrics.md, which a test checks).
var collectors = []prometheus.Collector{evaluationsByPhase, samplesTotal}

func init() {
	metrics.Registry.MustRegister(collectors...)
}

// phases remembers each Evaluation's phase so the gauge moves by one on a change.
var phases = struct {
	sync.Mutex
	m map[types.NamespacedName]v1alpha1.Phase
}{m: map[types.NamespacedName]v1alpha1.Phase{}}

func setPhaseGauge(key types.NamespacedName, phase v1alpha1.Phase) {
	phases.Lock()
	defer phases.Unlock()
	if old, ok := phases.m[key]; ok {
		if old == phase {
			return
		}
		evaluationsByPhase.WithLabelValues(string(old)).Dec()
	}
	phases.m[key] = phase
	evaluationsByPhase.WithLabelValues(string(phase)).Inc()
}

func forgetPhase(key types.NamespacedName) {
	phases.Lock()
	defer phases.Unlock()
	if old, ok := phases.m[key]; ok {
		evaluationsByPhase.WithLabelValues(string(old)).Dec()
		delete(phases.m, key)
	}
}

// recordSamples counts the samples a status update reports as newly finished.
func recordSamples(old, next *v1alpha1.EvaluationStatus) {
	if old.Run != next.Run || next.Progress == nil {
		return
	}
	var was v1alpha1.Progress
	if old.Progress != nil {
		was = *old.Progress
	}
	if d := next.Progress.Errored - was.Errored; d > 0 {
		samplesTotal.WithLabelValues("errored").Add(float64(d))
	}
	if d := (next.Progress.Completed - next.Progress.Errored) - (was.Completed - was.Errored); d > 0 {
		samplesTotal.WithLabelValues("succeeded").Add(float64(d))
	}
}
