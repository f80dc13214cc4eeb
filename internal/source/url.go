package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// URL data (source.url, with an optional sha256) is downloaded once per run:
// by a local run, by the planner Job that counts it, and by each runner pod.
// The controller never reads it.
type URL struct{}

var _ Fetcher = URL{}

func (URL) Field() string                       { return "url" }
func (URL) Uses(s *v1alpha1.DatasetSource) bool { return s.URL != "" }

// Fetch downloads the data into env.DataDir, checking its SHA-256 when one is
// given before anything reads it.
func (URL) Fetch(ctx context.Context, d *v1alpha1.Dataset, path string, env Env) (Fetched, error) {
	rawURL, wantSum := d.Source.URL, d.Source.SHA256
	urlPath := path + ".source.url"
	if err := os.MkdirAll(env.DataDir, 0o755); err != nil {
		return Fetched{}, fmt.Errorf("%s: %w", urlPath, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return Fetched{}, fmt.Errorf("%s: %w", urlPath, err)
	}
	client := env.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return Fetched{}, fmt.Errorf("%s: %w", urlPath, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return Fetched{}, fmt.Errorf("%s: GET %s: %s", urlPath, rawURL, resp.Status)
	}
	f, err := os.CreateTemp(env.DataDir, "dataset-*")
	if err != nil {
		return Fetched{}, fmt.Errorf("%s: %w", urlPath, err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return Fetched{}, fmt.Errorf("%s: GET %s: %w", urlPath, rawURL, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); wantSum != "" && !equalFoldHex(got, wantSum) {
		os.Remove(f.Name())
		return Fetched{}, fmt.Errorf("%s.source.sha256: the data at %s has SHA-256 %s, want %s", path, rawURL, got, wantSum)
	}
	return Fetched{Path: f.Name(), Name: rawURL}, nil
}

func equalFoldHex(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}
