package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/results/objects"
)

// workingCopy is where a run keeps its copy of location loc: under the
// user's cache directory, one per location.
func workingCopy(cacheBase string, loc objstore.Location) string {
	sum := sha256.Sum256([]byte(loc.String()))
	return filepath.Join(cacheBase, "proctor", "locations", hex.EncodeToString(sum[:8]))
}

// openLocation makes the working copy dir hold the location's latest
// commit, and returns the mirror that keeps them in step.
func openLocation(ctx context.Context, location, dir string) (*objects.Mirror, error) {
	store, err := objstore.OpenURL(ctx, location)
	if err != nil {
		return nil, &InvalidError{fmt.Errorf("-o: %w", err)}
	}
	host, _ := os.Hostname()
	m := objects.NewMirror(store, location, dir, fmt.Sprintf("proctor run on %s (pid %d)", host, os.Getpid()), time.Now)
	if err := m.Hydrate(ctx); err != nil {
		return nil, fmt.Errorf("reading the results location: %w; nothing was run", err)
	}
	return m, nil
}

// locationError explains a failed commit.
func locationError(location string, err error) error {
	var ce *objects.ConflictError
	if errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf("committing the results to %s: %w", location, err)
}

// syncEvery commits what the run records every interval, until stop. A
// commit refused because another run committed first cancels the run (its
// context): two runs cannot write one location. A commit that fails
// otherwise is told the user and tried again at the next tick.
func syncEvery(ctx context.Context, m *objects.Mirror, interval time.Duration, note func(string)) (context.Context, func() error) {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var conflict error
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			err := m.Sync(runCtx)
			var ce *objects.ConflictError
			switch {
			case errors.As(err, &ce):
				conflict = err
				cancel()
				return
			case err != nil && runCtx.Err() == nil:
				note(fmt.Sprintf("Could not commit the results yet (tried again in %v): %v", interval, err))
			}
		}
	}()
	return runCtx, func() error {
		close(done)
		wg.Wait()
		cancel()
		return conflict
	}
}

// commitLast commits the end of a run, trying a few times: what it
// recorded is in the working copy meanwhile, and the next run of the same
// location on this machine commits it.
func commitLast(ctx context.Context, m *objects.Mirror) error {
	var err error
	for attempt := range 4 {
		if err = m.Sync(ctx); err == nil {
			return nil
		}
		var ce *objects.ConflictError
		if errors.As(err, &ce) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(1<<attempt) * time.Second)
	}
	return err
}
