// Package telemetry is what a runner tells about itself as it runs:
// Prometheus metrics of its calls, samples and throttling. Its labels are
// bounded by the Evaluation's spec (model, dataset and ModelEndpoint
// names, outcomes and kinds), never a sample, a prompt or a key; the
// namespace and Evaluation come from the scrape target (the pod's labels).
package telemetry

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Outcomes of a request, the requests_total's outcome label.
const (
	OutcomeOK          = "ok"
	OutcomeThrottled   = "throttled"    // 429
	OutcomeServerError = "server_error" // 5xx
	OutcomeClientError = "client_error" // another 4xx
	OutcomeTimeout     = "timeout"      // the call's timeout
	OutcomeNetwork     = "network"      // no answer: connection refused, reset, DNS
	OutcomeOther       = "other"        // an answer that could not be read, an agent that failed
)

// Metrics are a runner's metrics, in a registry of their own (with the Go
// runtime's and the process's). A nil *Metrics records nothing.
type Metrics struct {
	Registry *prometheus.Registry

	requests, retries, tokens, cost *prometheus.CounterVec
	duration, firstByte             *prometheus.HistogramVec
	inFlight                        *prometheus.GaugeVec
	samples                         *prometheus.CounterVec
	throttled                       *prometheus.GaugeVec
	throttledSeconds                *prometheus.CounterVec
	batches                         *prometheus.GaugeVec
	batchesEnded                    *prometheus.CounterVec
	samplesInFlight, slotsBroken    *prometheus.GaugeVec

	scrapes scrapeLog

	// held are the models whose calls 429s hold, so that a spell's end is
	// counted once.
	heldMu sync.Mutex
	held   map[string]bool
}

// latencyBuckets span a cached answer's milliseconds to an agent's many
// minutes.
var latencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 150, 300, 900}

// New makes a runner's metrics.
func New() *Metrics {
	m := &Metrics{
		held:     map[string]bool{},
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proctor_runner_requests_total",
			Help: "Requests sent to models, each attempt once, by model, ModelEndpoint and outcome.",
		}, []string{"model", "endpoint", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proctor_runner_retries_total",
			Help: "Requests sent again after a failure or a 429, by model and ModelEndpoint.",
		}, []string{"model", "endpoint"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proctor_runner_tokens_total",
			Help: "Tokens of the answered requests, by model, ModelEndpoint and kind (input, output; cached_input and cache_write_input are part of input).",
		}, []string{"model", "endpoint", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proctor_runner_cost_dollars_total",
			Help: "What the requests cost, in US dollars at the models' pricing, by model and ModelEndpoint (unpriced models add nothing).",
		}, []string{"model", "endpoint"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proctor_runner_request_duration_seconds",
			Help:    "How long requests took, from sending to the whole answer, by model and ModelEndpoint.",
			Buckets: latencyBuckets,
		}, []string{"model", "endpoint"}),
		firstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proctor_runner_time_to_first_byte_seconds",
			Help:    "How long requests waited for their answer's first byte, by model and ModelEndpoint (HTTP providers).",
			Buckets: latencyBuckets,
		}, []string{"model", "endpoint"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proctor_runner_requests_in_flight",
			Help: "Requests sent and not yet answered, by model and ModelEndpoint.",
		}, []string{"model", "endpoint"}),
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proctor_runner_samples_total",
			Help: "Samples finished, by model, dataset, outcome (ok, errored) and error kind.",
		}, []string{"model", "dataset", "outcome", "kind"}),
		throttled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proctor_runner_throttled",
			Help: "1 while a model's server answers 429 and its calls are held, else 0.",
		}, []string{"model"}),
		throttledSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proctor_runner_throttled_seconds_total",
			Help: "Seconds a model's calls were held by 429s, counted when each spell ends.",
		}, []string{"model"}),
		batches: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proctor_runner_batches_in_flight",
			Help: "A batch model's batches submitted to its provider and not yet ended.",
		}, []string{"model"}),
		samplesInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proctor_runner_samples_in_flight",
			Help: "Samples being worked on (their slots busy), by model: at most its concurrency.",
		}, []string{"model"}),
		slotsBroken: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proctor_runner_slots_broken",
			Help: "A model's slots out of use until a hook succeeds in them again (spec.hooks).",
		}, []string{"model"}),
		batchesEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proctor_runner_batches_ended_total",
			Help: "A batch model's batches that ended at its provider (their results read).",
		}, []string{"model"}),
	}
	m.Registry.MustRegister(m.Collectors()...)
	m.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Collectors are Proctor's own metrics (documented in
// docs/reference/metrics.md, which a test checks).
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.retries, m.tokens, m.cost, m.duration, m.firstByte, m.inFlight, m.samples,
		m.throttled, m.throttledSeconds, m.batches, m.batchesEnded, m.samplesInFlight, m.slotsBroken}
}

// Handler serves the metrics in Prometheus's formats.
func (m *Metrics) Handler() http.Handler {
	return m.scrapes.observed(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
}

// Outcome names an attempt's outcome from its error.
func Outcome(err error) string {
	var he *provider.HTTPError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &he) && he.StatusCode == http.StatusTooManyRequests:
		return OutcomeThrottled
	case errors.As(err, &he) && he.StatusCode >= 500:
		return OutcomeServerError
	case errors.As(err, &he) && he.StatusCode >= 400:
		return OutcomeClientError
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return OutcomeTimeout
		}
		return OutcomeNetwork
	}
	return OutcomeOther
}

// Attempt counts a request sent to model (through endpoint, "" for none):
// its outcome, how long it took and waited for its first byte (0: not
// known), what it used and cost.
func (m *Metrics) Attempt(model, endpoint string, err error, took, firstByte time.Duration, u provider.Usage, dollars float64) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(model, endpoint, Outcome(err)).Inc()
	m.duration.WithLabelValues(model, endpoint).Observe(took.Seconds())
	if firstByte > 0 {
		m.firstByte.WithLabelValues(model, endpoint).Observe(firstByte.Seconds())
	}
	if err == nil {
		m.tokens.WithLabelValues(model, endpoint, "input").Add(float64(u.InputTokens))
		m.tokens.WithLabelValues(model, endpoint, "output").Add(float64(u.OutputTokens))
		if u.CachedInputTokens > 0 {
			m.tokens.WithLabelValues(model, endpoint, "cached_input").Add(float64(u.CachedInputTokens))
		}
		if u.CacheWriteInputTokens > 0 {
			m.tokens.WithLabelValues(model, endpoint, "cache_write_input").Add(float64(u.CacheWriteInputTokens))
		}
	}
	if dollars > 0 {
		m.cost.WithLabelValues(model, endpoint).Add(dollars)
	}
}

// Sending counts a request of model going out (+1) or answered (-1).
func (m *Metrics) Sending(model, endpoint string, delta float64) {
	if m == nil {
		return
	}
	m.inFlight.WithLabelValues(model, endpoint).Add(delta)
}

// SamplesInFlight counts a model's sample started (+1) or finished (-1).
func (m *Metrics) SamplesInFlight(model string, delta float64) {
	if m == nil {
		return
	}
	m.samplesInFlight.WithLabelValues(model).Add(delta)
}

// SlotsBroken counts a model's slot taken out of use (+1) or repaired (-1).
func (m *Metrics) SlotsBroken(model string, delta float64) {
	if m == nil {
		return
	}
	m.slotsBroken.WithLabelValues(model).Add(delta)
}

// Retry counts a request sent again.
func (m *Metrics) Retry(model, endpoint string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(model, endpoint).Inc()
}

// Sample counts a finished sample; kind is its error's kind, "" for one
// without an error.
func (m *Metrics) Sample(model, dataset, kind string) {
	if m == nil {
		return
	}
	outcome := "ok"
	if kind != "" {
		outcome = "errored"
	}
	m.samples.WithLabelValues(model, dataset, outcome, kind).Inc()
}

// Throttled says a model's calls are held by 429s (on), or no longer are,
// after held (a spell's end counted once, however many calls see it).
func (m *Metrics) Throttled(model string, on bool, held time.Duration) {
	if m == nil {
		return
	}
	m.heldMu.Lock()
	defer m.heldMu.Unlock()
	if on {
		m.held[model] = true
		m.throttled.WithLabelValues(model).Set(1)
		return
	}
	if !m.held[model] {
		return
	}
	delete(m.held, model)
	m.throttled.WithLabelValues(model).Set(0)
	m.throttledSeconds.WithLabelValues(model).Add(held.Seconds())
}

// Batches says how many of a batch model's batches are in flight.
func (m *Metrics) Batches(model string, inFlight int) {
	if m == nil {
		return
	}
	m.batches.WithLabelValues(model).Set(float64(inFlight))
}

// BatchEnded counts a batch model's batch that ended.
func (m *Metrics) BatchEnded(model string) {
	if m == nil {
		return
	}
	m.batchesEnded.WithLabelValues(model).Inc()
}
