package source

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// File is a local path (source.file), relative to the Evaluation file: local
// runs only; the API server refuses it, and the controller fails a run stored
// with one.
type File struct{}

var (
	_ Fetcher     = File{}
	_ Referencing = File{}
)

func (File) Field() string                       { return "file" }
func (File) Uses(s *v1alpha1.DatasetSource) bool { return s.File != "" }

func (File) Fetch(_ context.Context, d *v1alpha1.Dataset, path string, env Env) (Fetched, error) {
	file := d.Source.File
	if !filepath.IsAbs(file) {
		file = filepath.Join(env.BaseDir, file)
	}
	f, err := os.Open(file)
	if err != nil {
		return Fetched{}, fmt.Errorf("%s.source.file: %w", path, err)
	}
	f.Close()
	return Fetched{Path: file, Name: d.Source.File}, nil
}

func (File) Lookup(_ context.Context, _ cluster.Get, _ string, _ *v1alpha1.Dataset, path string) (Found, error) {
	return Found{Invalid: fmt.Sprintf("%s.file: a local file cannot be read in a cluster; use configMap, url or pvc", path)}, nil
}
