package runner

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/cache"
	"github.com/proctor-dev/proctor/runner/provider"
)

func TestCacheStage(t *testing.T) {
	c, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{}, func(p *Plan) {
		p.Cache = c
		p.Secrets = []string{"sk-secret-123"}
	})
	req := &provider.Request{Prompt: "q", Messages: []provider.Message{{Role: provider.RoleUser, Content: "q"}}}

	key, _, ok := e.fromCache(m, req)
	if ok || key == "" {
		t.Fatalf("an empty cache: key %q, hit %v; want a key and no hit", key, ok)
	}
	e.toCache(m, key, &provider.Response{Text: "the key is sk-secret-123", Usage: provider.Usage{InputTokens: 3}}, 1500*time.Millisecond)
	again, hit, ok := e.fromCache(m, req)
	if !ok || again != key {
		t.Fatalf("after toCache: key %q (want %q), hit %v", again, key, ok)
	}
	want := callResult{resp: &provider.Response{Text: "the key is [REDACTED]", Usage: provider.Usage{InputTokens: 3}},
		latency: 1500 * time.Millisecond, key: key, cached: true}
	if diff := cmp.Diff(want, hit, cmp.AllowUnexported(callResult{})); diff != "" {
		t.Errorf("the cached answer (-want +got):\n%s", diff)
	}

	other := &provider.Request{Prompt: "q2", Messages: []provider.Message{{Role: provider.RoleUser, Content: "q2"}}}
	if k, _, ok := e.fromCache(m, other); ok || k == key {
		t.Errorf("another request: key %q, hit %v; want its own key and no hit", k, ok)
	}
	// An agent's proxied calls are not cached: the agent's run is.
	m.forwarded = true
	if k, _, ok := e.fromCache(m, req); ok || k != "" {
		t.Errorf("a forwarded call: key %q, hit %v; want neither", k, ok)
	}
	e.toCache(m, "", &provider.Response{Text: "x"}, 0) // no key: nothing kept, no panic
	if n, err := c.Len(); err != nil || n != 1 {
		t.Errorf("the cache holds %d entries (%v), want 1", n, err)
	}
}

func TestCacheStageWithoutACache(t *testing.T) {
	e, m := stageEngine(t, &fakeProvider{fn: echo}, Options{}, nil)
	if k, _, ok := e.fromCache(m, &provider.Request{Prompt: "q"}); ok || k != "" {
		t.Errorf("without a cache: key %q, hit %v; want neither", k, ok)
	}
}
