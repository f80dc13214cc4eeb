package runner

import (
	"time"

	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/provider"
)

// The cache stage: a request already answered (the same model, the same
// messages and tools; for an agent, the same sample) is answered from the
// plan's cache instead of being paid for again. An agent's proxied calls are
// not cached: the agent's own run is.

// fromCache returns the request's cache key ("" without a cache) and, when
// the cache holds its answer, the call's result.
func (e *Engine) fromCache(m *modelRun, req *provider.Request) (key string, hit callResult, ok bool) {
	c := e.plan.Cache
	if c == nil || m.forwarded {
		return "", callResult{}, false
	}
	key = e.cacheKey(m, req)
	if entry, found := c.Get(key); found {
		return key, callResult{resp: &entry.Response, latency: time.Duration(entry.LatencyMillis) * time.Millisecond, key: key, cached: true}, true
	}
	return key, callResult{}, false
}

// toCache keeps an answer under key (none: not cached).
func (e *Engine) toCache(m *modelRun, key string, resp *provider.Response, latency time.Duration) {
	if key == "" {
		return
	}
	// Scrub before storing: a cache outlives its keys, and an echoed key
	// must not come back in a later run that no longer knows it.
	stored := *resp
	stored.Text = e.redact(stored.Text)
	stored.ToolCalls = e.redactToolCalls(stored.ToolCalls)
	if err := e.plan.Cache.Put(key, &cache.Entry{Response: stored, LatencyMillis: latency.Milliseconds()}); err != nil {
		e.log.Error(err, "Failed to write a cache entry", "model", m.Name)
	}
}

// cacheKeyData is what a cached response is keyed on. Agents render their inputs
// from the whole sample, so for them the sample is part of the key.
type cacheKeyData struct {
	Version  int                `json:"v"`
	Model    string             `json:"model"`
	System   string             `json:"system,omitempty"`
	Messages []provider.Message `json:"messages"`
	Tools    []provider.Tool    `json:"tools,omitempty"`
	Prompt   string             `json:"prompt,omitempty"`
	SampleID string             `json:"sampleID,omitempty"`
	Sample   map[string]any     `json:"sample,omitempty"`
}

func (e *Engine) cacheKey(m *modelRun, req *provider.Request) string {
	d := cacheKeyData{Version: 1, Model: m.Fingerprint, System: req.System, Messages: req.Messages, Tools: req.Tools}
	if m.Agent {
		d.Prompt, d.SampleID, d.Sample = req.Prompt, req.SampleID, req.Sample
	}
	key, err := cache.Key(d)
	if err != nil {
		e.log.Error(err, "Failed to compute a cache key; calling the model", "model", m.Name)
		return ""
	}
	return key
}
