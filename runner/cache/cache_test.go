package cache

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
)

func TestKeyIsDeterministicAndSensitive(t *testing.T) {
	type req struct {
		Model    string
		Messages []provider.Message
		Params   map[string]any
	}
	a := req{Model: "m", Messages: []provider.Message{{Role: "user", Content: "hi"}}, Params: map[string]any{"t": 0, "s": 7}}
	b := req{Model: "m", Messages: []provider.Message{{Role: "user", Content: "hi"}}, Params: map[string]any{"s": 7, "t": 0}}
	c := req{Model: "m", Messages: []provider.Message{{Role: "user", Content: "hi!"}}, Params: map[string]any{"t": 0, "s": 7}}
	ka, _ := Key(a)
	kb, _ := Key(b)
	kc, _ := Key(c)
	if ka != kb {
		t.Errorf("equal requests hash differently: %s vs %s", ka, kb)
	}
	if ka == kc {
		t.Errorf("different requests hash alike")
	}
	if len(ka) != 64 {
		t.Errorf("key %q is not a hex sha256", ka)
	}
}

func TestPutGet(t *testing.T) {
	c, err := New(filepath.Join(t.TempDir(), "c"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := Key("x")
	if _, ok := c.Get(key); ok {
		t.Fatal("hit on an empty cache")
	}
	want := &Entry{Response: provider.Response{Text: "4", Usage: provider.Usage{InputTokens: 3, OutputTokens: 1}}, LatencyMillis: 12}
	if err := c.Put(key, want); err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get(key)
	if !ok {
		t.Fatal("miss after Put")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	if n, _ := c.Len(); n != 1 {
		t.Errorf("Len = %d, want 1", n)
	}
}

func TestCorruptEntryIsAMiss(t *testing.T) {
	c, _ := New(t.TempDir())
	key, _ := Key("y")
	if err := os.MkdirAll(filepath.Dir(c.path(key)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.path(key), []byte(`{"response":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(key); ok {
		t.Error("a torn entry was returned")
	}
}

func TestConcurrentWritersLeaveWholeEntries(t *testing.T) {
	c, _ := New(t.TempDir())
	key, _ := Key("z")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Put(key, &Entry{Response: provider.Response{Text: string(rune('a' + i))}})
		}()
	}
	wg.Wait()
	if _, ok := c.Get(key); !ok {
		t.Fatal("entry unreadable after concurrent writes")
	}
	entries, _ := os.ReadDir(filepath.Dir(c.path(key)))
	if len(entries) != 1 {
		t.Errorf("%d files left in the shard directory, want 1 (no temporaries)", len(entries))
	}
}
