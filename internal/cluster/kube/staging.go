package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/results"
)

// flushToStore is flush for a shard whose records go to the results store:
// every flush seals what is pending into the next staging chunk, so that
// records reach etcd only while they cannot be sealed (no presigned URL
// is free, or the store is down): the head holds them meanwhile, as it
// does with chunk slots, and the controller reads them there. The head is
// written whatever the store does: it is the shard's heartbeat.
func (s *Store) flushToStore(ctx context.Context, final bool) error {
	need := 0
	var sealErr error
	if len(s.pending) > 0 {
		need, sealErr = s.seal(ctx)
	}
	s.progress.Want = s.progress.Chunks + max(need, cluster.SpareSlots)
	gz, err := gzipRecordLines(s.pending)
	if err != nil {
		return err
	}
	if len(gz) > cluster.MaxHeadBytes {
		return errors.Join(ErrNoSlot, sealErr, s.askForSlots(ctx))
	}
	if final {
		s.progress.State = cluster.StateSucceeded
	}
	if err := s.writeHead(ctx, gz); err != nil {
		return errors.Join(err, sealErr)
	}
	if final {
		return nil // what was not sealed is in the head
	}
	return sealErr
}

// fillStaging writes staging chunk k through its presigned URL. It reports
// false when the controller has not granted that URL yet, or the store
// refuses it (expired) and no newer one is there.
func (s *Store) fillStaging(ctx context.Context, k int, gz []byte) (bool, error) {
	for attempt := 0; attempt < 2; attempt++ {
		u := s.putURL(k)
		if u == "" || attempt > 0 {
			if err := s.readUploads(ctx); err != nil {
				return false, err
			}
			if u = s.putURL(k); u == "" {
				return false, nil
			}
		}
		err := objstore.PutURL(ctx, s.hc, u, gz)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, objstore.ErrRefused):
			s.uploads = nil
			continue
		}
		return false, fmt.Errorf("sealing records into staging chunk %d: %w", k, err)
	}
	return false, nil
}

// putURL is the URL that writes chunk k, if one is granted and holds for a
// while yet.
func (s *Store) putURL(k int) string {
	u := s.uploads
	if u == nil || s.now().Add(time.Minute).After(u.Expires) || k < u.First || k >= u.First+len(u.Put) {
		return ""
	}
	return u.Put[k-u.First]
}

// readUploads reads the shard's uploads Secret; none yet (or not readable
// yet: its Role may lag) leaves uploads nil. One the Evaluation does not
// control is refused: its URLs could send the records anywhere.
func (s *Store) readUploads(ctx context.Context) error {
	s.uploads = nil
	var sec corev1.Secret
	name := cluster.UploadsName(s.head)
	err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &sec)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading uploads Secret %s: %w", name, err)
	}
	if err := cluster.Owned("Secret", &sec, s.ev); err != nil {
		return err
	}
	var u cluster.Uploads
	if err := json.Unmarshal(sec.Data[cluster.KeyUploads], &u); err != nil {
		return fmt.Errorf("uploads Secret %s: %w", name, err)
	}
	s.uploads = &u
	return nil
}

// readChunk reads sealed chunk k back: a chunk slot, or a staging chunk
// through the URL the controller grants for reading it (it does while the
// head says records await judging; a pod that starts before that waits).
func (s *Store) readChunk(ctx context.Context, k int) ([]results.Line, error) {
	if !s.inStore {
		var cm corev1.ConfigMap
		if err := GetConfigMap(ctx, s.c, s.ev, cluster.ChunkName(s.head, k), &cm); err != nil {
			return nil, err
		}
		return cluster.ReadRecords(&cm)
	}
	for {
		if u := s.uploads; u != nil && k < len(u.Get) && s.now().Add(time.Minute).Before(u.Expires) {
			gz, err := objstore.GetURL(ctx, s.hc, u.Get[k])
			if err == nil {
				return cluster.ParseChunk(gz)
			}
			if !errors.Is(err, objstore.ErrRefused) {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the controller to grant reading the staging chunks: %w", ctx.Err())
		case <-time.After(time.Second):
		}
		if err := s.readUploads(ctx); err != nil {
			return nil, err
		}
	}
}
