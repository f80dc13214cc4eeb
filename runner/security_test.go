package runner

// Attacks on the engine by what it does not trust: model outputs, agent
// output, dataset content (docs/security.md). Each test fails if its attack
// works.

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/score"
)

// An agent that holds a key prints it encoded: reversed, base64, hex, in a
// tool call's arguments. None of it reaches the record or the cache; the
// scorers still see the whole answer.
func TestEncodedSecretsAreScrubbed(t *testing.T) {
	const secret = "sk-test-1234567890abcdef"
	outputs := map[string]string{
		"q0": "reversed: fedcba0987654321-tset-ks",
		"q1": "base64: " + base64.StdEncoding.EncodeToString([]byte(secret)),
		"q2": "inside a stream: " + base64.StdEncoding.EncodeToString([]byte("KEY="+secret+"\n")),
		"q3": "hex: " + hex.EncodeToString([]byte(secret)),
		"q4": "url: " + "sk-test-1234567890abcdef%0A",
	}
	p := &fakeProvider{fn: func(ctx context.Context, req *provider.Request, n int64) (*provider.Response, error) {
		if req.Prompt == "q5" {
			return &provider.Response{ToolCalls: []provider.ToolCall{
				{ID: "call_1", Name: "send", Arguments: json.RawMessage(`{"to":"evil","body":"` + secret + `"}`)},
				{ID: "call_2", Name: "noop", Arguments: json.RawMessage(`{}`)},
				{ID: "call_3", Name: "send", Arguments: json.RawMessage(`{"n":` + "1234567890123" + `}`)},
			}}, nil
		}
		return &provider.Response{Text: outputs[req.Prompt]}, nil
	}}
	store := &memCache{m: map[string]*cache.Entry{}}
	plan := testPlan(t).Model("m", p, 1).Dataset("d", 6).Scorer(score.Config{Type: score.TypeContains, Name: "raw"}, "").Obj()
	plan.Secrets = []string{secret, "1234567890123"}
	plan.Cache = store
	sink := newMemSink()
	run(t, plan, sink, Options{})
	for i := range 6 {
		r := sink.get("m", "d", i)
		b, _ := json.Marshal(r)
		if !strings.Contains(string(b), provider.Redacted) {
			t.Errorf("record %d does not say what was redacted: %s", i, b)
		}
		for _, leak := range []string{secret, "fedcba0987654321", "c2stdGVzdC0xMjM0NTY3ODkwYWJjZGVm", "736b2d746573742d", "1234567890123"} {
			if strings.Contains(string(b), leak) {
				t.Errorf("record %d leaks %q: %s", i, leak, b)
			}
		}
	}
	want := []provider.ToolCall{
		{ID: "call_1", Name: "send", Arguments: json.RawMessage(`{"to":"evil","body":"[REDACTED]"}`)},
		{ID: "call_2", Name: "noop", Arguments: json.RawMessage(`{}`)},
		// The secret was a number, not inside a string: the record stays JSON.
		{ID: "call_3", Name: "send", Arguments: json.RawMessage(`{"redacted":true}`)},
	}
	if diff := cmp.Diff(want, sink.get("m", "d", 5).ToolCalls); diff != "" {
		t.Errorf("tool calls in the record (-want +got):\n%s", diff)
	}
	for k, e := range store.m {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), secret) || strings.Contains(string(b), "fedcba0987654321") {
			t.Errorf("cache entry %s leaks the secret: %s", k, b)
		}
	}
}

// memCache is a Cache in memory.
type memCache struct{ m map[string]*cache.Entry }

func (c *memCache) Get(key string) (*cache.Entry, bool) { e, ok := c.m[key]; return e, ok }
func (c *memCache) Put(key string, e *cache.Entry) error {
	c.m[key] = e
	return nil
}
