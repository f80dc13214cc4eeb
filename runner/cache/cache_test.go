package cache

import (
	"os"
	"path/filepath"
	"strings"
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

// TestNewRefusesAnUnwritableDirectory: an existing directory that cannot be
// written (another user's shared cache) is an error up front, not a failed
// write logged after every paid call.
func TestNewRefusesAnUnwritableDirectory(t *testing.T) {
	readOnly := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
		skip string
	}{
		{name: "mode 0555", dir: readOnly, skip: map[bool]string{true: "root writes anyway"}[os.Geteuid() == 0]},
		// Read-only even for root.
		{name: "sysfs", dir: "/sys", skip: map[bool]string{false: "no /sys"}[dirExists("/sys")]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip != "" {
				t.Skip(tt.skip)
			}
			if _, err := New(tt.dir); err == nil || !strings.Contains(err.Error(), "not writable") {
				t.Errorf("New(%s) = %v, want a 'not writable' error", tt.dir, err)
			}
		})
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
