package objects

import (
	"context"
	"errors"
	"io"
)

// ErrExists is a conditional create that found the key taken.
var ErrExists = errors.New("the object exists already")

// ErrNotFound is a key with no object.
var ErrNotFound = errors.New("no such object")

// Bucket is what a results location needs of an object store, under the
// location's prefix: keys are relative to it. internal/objstore's S3 client
// implements it (the runner does not import internal/); unit tests use an
// in-memory one.
type Bucket interface {
	// PutIfAbsent creates key, or returns ErrExists when it exists.
	PutIfAbsent(ctx context.Context, key string, data []byte) error
	// Put creates or replaces key.
	Put(ctx context.Context, key string, data []byte) error
	// Get reads key whole (ErrNotFound when absent).
	Get(ctx context.Context, key string) ([]byte, error)
	// ReaderAt opens key for reads at offsets, and says its size.
	ReaderAt(ctx context.Context, key string) (io.ReaderAt, int64, error)
	// List returns the keys under prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes keys; absent ones are not an error.
	Delete(ctx context.Context, keys ...string) error
}
