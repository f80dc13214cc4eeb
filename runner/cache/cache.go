// Package cache stores model responses on disk, keyed by a hash of everything that
// determines them, so a rerun with the cache on makes no call for what it has seen.
package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/proctor-dev/proctor/runner/provider"
)

// Cache is a directory of responses, one file per key. Writes are atomic (a
// temporary file renamed into place), so concurrent runs sharing a cache directory
// and crashes mid-write never leave a torn entry.
type Cache struct {
	dir string
}

// Entry is one cached response.
type Entry struct {
	Response      provider.Response `json:"response"`
	LatencyMillis int64             `json:"latencyMillis"`
}

// New opens (creating) a cache directory, which must be writable: a cache that
// cannot store answers would let a run pay for every call again next time
// while the user believes they are cached.
func New(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("cache directory %s is not writable: %w", dir, err)
	}
	f.Close()
	_ = os.Remove(f.Name())
	return &Cache{dir: dir}, nil
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// Key hashes the JSON encoding of v, which must be deterministic (structs and maps
// encode deterministically with encoding/json).
func Key(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func (c *Cache) path(key string) string {
	return filepath.Join(c.dir, key[:2], key+".json")
}

// Get returns the entry for key, if any. A corrupt entry counts as a miss.
func (c *Cache) Get(key string) (*Entry, bool) {
	if len(key) < 3 {
		return nil, false
	}
	b, err := os.ReadFile(c.path(key))
	if err != nil {
		return nil, false
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, false
	}
	return &e, true
}

// Put stores an entry under key.
func (c *Cache) Put(key string, e *Entry) error {
	if len(key) < 3 {
		return fmt.Errorf("cache key %q is too short", key)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	p := c.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), p); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return nil
}

// Len counts the entries (for tests and reports).
func (c *Cache) Len() (int, error) {
	n := 0
	err := filepath.WalkDir(c.dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(d.Name()) == ".json" {
			n++
		}
		return err
	})
	return n, err
}
