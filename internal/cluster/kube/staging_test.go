package kube

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/internal/cluster"
)

// stagingServer stands in for presigned URLs of an object store (unit
// tests only: the real store is test/objstore's and the integration
// tests'): it keeps what is PUT by path, refuses a path while told to (an
// expired URL), and fails every request while down.
type stagingServer struct {
	mu      sync.Mutex
	objects map[string][]byte
	refuse  map[string]bool
	down    bool
}

func (s *stagingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.down:
		w.WriteHeader(http.StatusServiceUnavailable)
	case s.refuse[r.URL.Path]:
		w.WriteHeader(http.StatusForbidden)
	case r.Method == http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		s.objects[r.URL.Path] = b
	case r.Method == http.MethodGet && s.objects[r.URL.Path] != nil:
		_, _ = w.Write(s.objects[r.URL.Path])
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func TestStoreSealsIntoTheResultsStore(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(t)
	ev := testEvaluation()
	sh := cluster.Shard{Model: "small", Dataset: "d", Start: 0, End: 6}
	srv := &stagingServer{objects: map[string][]byte{}, refuse: map[string]bool{}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	head := cluster.NewHead(ev, cluster.HashSpec(&ev.Spec), "r1", sh, true)
	if err := c.Create(ctx, head); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	grant := func(first, n int, expires time.Time) {
		t.Helper()
		u := cluster.Uploads{Expires: expires, First: first}
		for k := first; k < first+n; k++ {
			u.Put = append(u.Put, hs.URL+"/"+cluster.StagingKey(head.Name, k))
		}
		for k := range first + n {
			u.Get = append(u.Get, hs.URL+"/"+cluster.StagingKey(head.Name, k))
		}
		b, _ := json.Marshal(&u)
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ev.Namespace, Name: cluster.UploadsName(head.Name),
			OwnerReferences: []metav1.OwnerReference{cluster.OwnerReference(ev)}}, Data: map[string][]byte{cluster.KeyUploads: b}}
		if err := c.Update(ctx, sec); err != nil {
			if err := c.Create(ctx, sec); err != nil {
				t.Fatal(err)
			}
		}
	}
	open := func() *Store {
		t.Helper()
		s, err := OpenStore(ctx, c, ev, "r1", sh, "pod")
		if err != nil {
			t.Fatal(err)
		}
		s.now = func() time.Time { return now }
		return s
	}
	headHolds := func() (cluster.ShardProgress, int) {
		t.Helper()
		h, _ := listShardCMs(t, c)
		p, _ := cluster.ParseProgress(h.Annotations)
		lines, err := cluster.ReadRecords(h)
		if err != nil {
			t.Fatal(err)
		}
		return p, len(lines)
	}

	// No URL granted yet: the records wait in the head.
	s := open()
	if err := s.Put("", "", 0, record(0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx, false); err != nil {
		t.Fatal(err)
	}
	if p, n := headHolds(); p.Chunks != 0 || n != 1 || p.Want < cluster.SpareSlots {
		t.Fatalf("without URLs: chunks %d, want %d, %d records in the head", p.Chunks, p.Want, n)
	}
	// Granted: each flush seals what is pending, and the head holds none.
	grant(0, 2, now.Add(time.Hour))
	_ = s.Put("", "", 1, record(1, 1))
	if err := s.Flush(ctx, false); err != nil {
		t.Fatal(err)
	}
	if p, n := headHolds(); p.Chunks != 1 || n != 0 {
		t.Fatalf("granted: chunks %d, %d records in the head", p.Chunks, n)
	}
	if got, err := cluster.ParseChunk(srv.objects["/"+cluster.StagingKey(head.Name, 0)]); err != nil || len(got) != 2 {
		t.Fatalf("staging chunk 0 holds %d records (%v), want 2", len(got), err)
	}
	// An expired URL is refused: the Secret is read again for a new one.
	srv.refuse["/"+cluster.StagingKey(head.Name, 1)] = true
	_ = s.Put("", "", 2, record(2, 1))
	if err := s.Flush(ctx, false); err != nil {
		t.Fatal(err)
	}
	if p, n := headHolds(); p.Chunks != 1 || n != 1 {
		t.Fatalf("refused: chunks %d, %d records in the head", p.Chunks, n)
	}
	delete(srv.refuse, "/"+cluster.StagingKey(head.Name, 1))
	if err := s.Flush(ctx, false); err != nil {
		t.Fatal(err)
	}
	if p, n := headHolds(); p.Chunks != 2 || n != 0 {
		t.Fatalf("after a new URL: chunks %d, %d records in the head", p.Chunks, n)
	}
	// The store down: the head is written all the same (it is the heartbeat),
	// holding the records; the flush says what failed.
	grant(2, 4, now.Add(time.Hour))
	srv.down = true
	_ = s.Put("", "", 3, record(3, 1))
	if err := s.Flush(ctx, false); err == nil {
		t.Error("a flush with the store down reported nothing")
	}
	if p, n := headHolds(); p.Chunks != 2 || n != 1 || p.Done != 4 {
		t.Fatalf("store down: chunks %d, done %d, %d records in the head", p.Chunks, p.Done, n)
	}
	// A pod killed now resumes from the head, and its last flush leaves
	// the rest there if the store is still down.
	s = open()
	for i := 4; i < 6; i++ {
		_ = s.Put("", "", i, record(i, 1))
	}
	if err := s.Flush(ctx, true); err != nil {
		t.Fatalf("a final flush with the store down: %v", err)
	}
	if p, n := headHolds(); p.State != cluster.StateSucceeded || n != 3 || p.Done != 6 {
		t.Fatalf("final, store down: %s, done %d, %d records in the head", p.State, p.Done, n)
	}
	// Every sample is in the staging chunks or the head, once read in order.
	srv.down = false
	seen := map[int]bool{}
	for k := range 2 {
		lines, _ := cluster.ParseChunk(srv.objects["/"+cluster.StagingKey(head.Name, k)])
		for _, l := range lines {
			seen[l.Index] = true
		}
	}
	h, _ := listShardCMs(t, c)
	lines, _ := cluster.ReadRecords(h)
	for _, l := range lines {
		seen[l.Index] = true
	}
	if len(seen) != 6 {
		t.Errorf("samples kept: %v, want all 6", seen)
	}
}
