package controllers

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// TestEnsureUploads: a shard whose records go to the results store is
// granted presigned URLs in windows, reading URLs while records await a
// judge, new URLs before the old expire, and never a Secret it does not own.
// (Presigning makes no request: the store need not be there.)
func TestEnsureUploads(t *testing.T) {
	ctx := context.Background()
	h, ev := storeHarness(t)
	start := metav1.NewTime(time.Date(2026, 11, 27, 1, 2, 3, 0, time.UTC))
	ev.Status.StartTime = &start
	head := cluster.HeadName(ev.Name, "r1", "small", 0)
	key := client.ObjectKey{Namespace: testNS, Name: cluster.UploadsName(head)}
	now := start.Time
	pass := func(progress cluster.ShardProgress) (*pass, bool) {
		t.Helper()
		p := newPass(ev, now)
		p.run = "r1"
		ok, err := h.r.ensureUploads(ctx, p, h.r.Options.ResultsStore, head, progress)
		if err != nil {
			t.Fatal(err)
		}
		return p, ok
	}
	read := func() cluster.Uploads {
		t.Helper()
		var sec corev1.Secret
		if err := h.c.Get(ctx, key, &sec); err != nil {
			t.Fatal(err)
		}
		var u cluster.Uploads
		if err := json.Unmarshal(sec.Data[cluster.KeyUploads], &u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	keyOf := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u.Path
	}
	stagingPath := func(k int) string {
		return "/runs/cluster/" + testNS + "/arith/20261127T010203Z-r1/" + cluster.StagingKey(head, k)
	}

	p, ok := pass(cluster.ShardProgress{})
	u := read()
	if !ok || u.First != 0 || len(u.Put) != cluster.UploadWindow || len(u.Get) != 0 || !u.Expires.Equal(now.Add(uploadURLLifetime)) {
		t.Fatalf("first grant: ok %v, %+v", ok, u)
	}
	if diff := cmp.Diff(stagingPath(3), keyOf(u.Put[3])); diff != "" {
		t.Errorf("URL of chunk 3 (-want +got):\n%s", diff)
	}
	if strings.Contains(string(mustJSON(t, u)), "the-secret-key") {
		t.Error("the uploads hold the store's secret key")
	}
	if p.result.RequeueAfter == 0 || p.result.RequeueAfter > uploadURLLifetime/2 {
		t.Errorf("requeue after %v, want at most %v (to sign new URLs in time)", p.result.RequeueAfter, uploadURLLifetime/2)
	}
	var sec corev1.Secret
	_ = h.c.Get(ctx, key, &sec)
	if !metav1.IsControlledBy(&sec, ev) || sec.Labels[cluster.LabelComponent] != cluster.ComponentUploads {
		t.Errorf("the Secret's owner %v, labels %v", sec.OwnerReferences, sec.Labels)
	}

	// Within the window, nothing is written.
	rv := sec.ResourceVersion
	pass(cluster.ShardProgress{Chunks: 10, Want: 12})
	_ = h.c.Get(ctx, key, &sec)
	if sec.ResourceVersion != rv {
		t.Error("the Secret was rewritten while its window covered what the shard asked for")
	}
	// Past it, a new window starts at the first chunk not sealed.
	pass(cluster.ShardProgress{Chunks: 15, Want: 17})
	if u := read(); u.First != 15 || len(u.Put) != cluster.UploadWindow || keyOf(u.Put[0]) != stagingPath(15) {
		t.Errorf("second window: first %d, %d URLs", u.First, len(u.Put))
	}
	// Records awaiting a judge: the sealed chunks can be read back.
	pass(cluster.ShardProgress{Chunks: 15, Want: 17, Awaiting: 3})
	if u := read(); len(u.Get) < 15 || keyOf(u.Get[14]) != stagingPath(14) {
		t.Errorf("reading URLs: %d, want at least the 15 sealed", len(u.Get))
	}
	// Half the lifetime gone: signed again.
	before := read().Expires
	now = now.Add(uploadURLLifetime/2 + time.Minute)
	pass(cluster.ShardProgress{Chunks: 15, Want: 17, Awaiting: 3})
	if after := read().Expires; !after.After(before) {
		t.Errorf("URLs expiring at %v were not signed again at %v", before, now)
	}
	// After a restart (nothing remembered), the Secret is read, not rewritten.
	h.r.grants = newUploadGrants()
	_ = h.c.Get(ctx, key, &sec)
	rv = sec.ResourceVersion
	pass(cluster.ShardProgress{Chunks: 16, Want: 18, Awaiting: 3})
	_ = h.c.Get(ctx, key, &sec)
	if sec.ResourceVersion != rv {
		t.Error("a restarted manager rewrote a Secret that held what the shard needs")
	}

	// A Secret of that name someone else made is left alone.
	other := cluster.HeadName(ev.Name, "r1", "small", 1)
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: cluster.UploadsName(other)},
		Data: map[string][]byte{cluster.KeyUploads: []byte(`{"put":["http://elsewhere/"]}`)}}
	if err := h.c.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	p = newPass(ev, now)
	p.run = "r1"
	if ok, err := h.r.ensureUploads(ctx, p, h.r.Options.ResultsStore, other, cluster.ShardProgress{}); ok || err != nil {
		t.Errorf("a foreign uploads Secret: ok %v, err %v; want false", ok, err)
	}
	_ = h.c.Get(ctx, client.ObjectKeyFromObject(foreign), foreign)
	if string(foreign.Data[cluster.KeyUploads]) != `{"put":["http://elsewhere/"]}` {
		t.Error("a foreign uploads Secret was overwritten")
	}

	// Once committed, the run's uploads Secrets go.
	p = newPass(ev, now)
	p.run = "r1"
	if err := h.r.deleteSecrets(ctx, p, []string{cluster.UploadsName(head), cluster.UploadsName(other)}); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Get(ctx, key, &sec); err == nil {
		t.Error("the uploads Secret is still there after the commit")
	}
	if err := h.c.Get(ctx, client.ObjectKeyFromObject(foreign), foreign); err != nil {
		t.Errorf("the foreign Secret was deleted: %v", err)
	}
}

// storeHarness is a harness whose manager has a results store at
// s3://runs/cluster (nothing listens there: presigning makes no request),
// and an Evaluation to run.
func storeHarness(t *testing.T) (*harness, *v1alpha1.Evaluation) {
	t.Helper()
	loc, _ := objstore.ParseURL("s3://runs/cluster")
	store, err := objstore.Open(context.Background(), loc, objstore.Options{Endpoint: "http://127.0.0.1:9", AccessKeyID: "id", SecretAccessKey: "the-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{opts: Options{ResultsStore: store}})
	return h, withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).OpenAIModel("small", llmURL).Obj())
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEnsureCacheURLs: a run reusing an earlier run's records in the
// results store gets a Secret of URLs reading them, only for its own
// namespace's locations, and none when it reuses nothing there.
func TestEnsureCacheURLs(t *testing.T) {
	ctx := context.Background()
	h, ev := storeHarness(t)
	earlier := "s3://runs/cluster/" + testNS + "/arith/20261127T000000Z-r0"
	elsewhere := "s3://runs/cluster/other-team/arith/20261127T000000Z-r0"
	sources := []cluster.CacheSource{
		{Model: "small", Dataset: "d", Location: earlier, Objects: []cluster.StoredObject{{Key: "parts/small/d/shard-00000.parquet", First: 0, Last: 4}, {Key: "parts/small/d/shard-00001.parquet", First: 5, Last: 9}}},
		{Model: "small", Dataset: "d", Location: elsewhere, Objects: []cluster.StoredObject{{Key: "parts/small/d/shard-00000.parquet"}}},
		{Model: "small", Dataset: "d", Name: "arith-r0-small-0"},
	}
	b, _ := json.Marshal(sources)
	list := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: cluster.CacheSourcesName(ev.Name, "r1"),
		OwnerReferences: []metav1.OwnerReference{cluster.OwnerReference(ev)}}, Data: map[string]string{cluster.KeySources: string(b)}}
	if err := h.c.Create(ctx, list); err != nil {
		t.Fatal(err)
	}
	p := newPass(ev, time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC))
	p.run = "r1"
	if ok, err := h.r.ensureCacheURLs(ctx, p); !ok || err != nil {
		t.Fatalf("ok %v, err %v", ok, err)
	}
	var sec corev1.Secret
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: cluster.CacheURLsName(ev.Name, "r1")}, &sec); err != nil {
		t.Fatal(err)
	}
	var urls cluster.CacheURLs
	if err := json.Unmarshal(sec.Data[cluster.KeyCacheURLs], &urls); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k, u := range urls.URLs {
		got = append(got, k)
		if uu, _ := url.Parse(u); !strings.HasSuffix(k, strings.TrimPrefix(uu.Path, "/runs/cluster/")) {
			t.Errorf("the URL for %s reads %s", k, uu.Path)
		}
	}
	slices.Sort(got)
	want := []string{earlier + "/parts/small/d/shard-00000.parquet", earlier + "/parts/small/d/shard-00001.parquet"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("URLs granted (-want +got), never another namespace's:\n%s", diff)
	}
	if p.cacheURLs != sec.Name || !slices.Contains(h.r.runnerRules(p)[len(h.r.runnerRules(p))-1].ResourceNames, sec.Name) {
		t.Errorf("the runner may not read %s: %+v", sec.Name, h.r.runnerRules(p))
	}

	// A run reusing nothing in the store gets no Secret.
	p = newPass(ev, p.now)
	p.run = "r2"
	if ok, err := h.r.ensureCacheURLs(ctx, p); !ok || err != nil || p.cacheURLs != "" {
		t.Errorf("without sources: ok %v, err %v, Secret %q", ok, err, p.cacheURLs)
	}
}

// TestOpenStore: an Evaluation's own results store is opened from its
// Secret, once per version of it; without the Secret, or its keys, the run
// waits, and the cluster's store is never used in its place.
func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	h, ev := storeHarness(t) // the cluster has a store too
	ev.Spec.ResultsStore = &v1alpha1.ResultsStore{URL: "s3://team-evals/nightly", Endpoint: "http://127.0.0.1:9", CredentialsSecret: "team-s3"}
	open := func() *pass {
		t.Helper()
		p := newPass(ev, time.Now())
		if err := h.r.openStore(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := open(); p.store != nil || !strings.Contains(p.storeMissing, "Secret team-s3 (spec.resultsStore.credentialsSecret) not found") {
		t.Errorf("without its Secret: store %v, missing %q", p.store, p.storeMissing)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "team-s3"}, Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("id")}}
	if err := h.c.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if p := open(); p.store != nil || !strings.Contains(p.storeMissing, "needs the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") {
		t.Errorf("without its secret key: store %v, missing %q", p.store, p.storeMissing)
	}
	sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte("team-secret")
	if err := h.c.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	p := open()
	if p.store == nil || p.storeMissing != "" || p.store.Location().String() != "s3://team-evals/nightly" {
		t.Fatalf("with its Secret: store %v, missing %q", p.store, p.storeMissing)
	}
	if again := open(); again.store != p.store {
		t.Error("the store was opened again for the same Secret")
	}
	if got, err := h.r.runStore(ctx, p); err != nil || got != p.store {
		t.Errorf("runStore: %v, %v", got, err)
	}
}

// TestFirstGrantIsMadeWithoutReadingTwice: a shard's first uploads Secret,
// read as not there, is created without reading it again; one made since
// the read (its own, from an earlier grant) is written with the new URLs.
func TestFirstGrantIsMadeWithoutReadingTwice(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		madeSince bool
		wantReads int
	}{
		{name: "not there", wantReads: 1},
		{name: "made since it was read", madeSince: true, wantReads: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ev := storeHarness(t)
			head := cluster.HeadName(ev.Name, "r1", "small", 0)
			key := client.ObjectKey{Namespace: testNS, Name: cluster.UploadsName(head)}
			reads := 0
			var h *harness
			loc, _ := objstore.ParseURL("s3://runs/cluster")
			store, err := objstore.Open(ctx, loc, objstore.Options{Endpoint: "http://127.0.0.1:9", AccessKeyID: "id", SecretAccessKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			h = newHarness(t, harnessOpts{objs: []client.Object{ev}, opts: Options{ResultsStore: store}, funcs: interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Secret); !ok || k != key {
						return c.Get(ctx, k, obj, opts...)
					}
					reads++
					if reads == 1 && tc.madeSince {
						// Read as not there; then made, as an earlier grant.
						err := c.Get(ctx, k, obj, opts...)
						old := &corev1.Secret{ObjectMeta: objectMeta(testNS, key.Name, cluster.Labels(ev.Name, "r1", cluster.ComponentUploads)),
							Data: map[string][]byte{cluster.KeyUploads: []byte(`{"put":["http://old/"]}`)}}
						if err := controllerutil.SetControllerReference(ev, old, c.Scheme()); err != nil {
							t.Fatal(err)
						}
						if err := c.Create(ctx, old); err != nil {
							t.Fatal(err)
						}
						return err
					}
					return c.Get(ctx, k, obj, opts...)
				},
			}})
			p := newPass(ev, t0)
			p.run = "r1"
			if ok, err := h.r.ensureUploads(ctx, p, store, head, cluster.ShardProgress{}); !ok || err != nil {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			if reads != tc.wantReads {
				t.Errorf("the Secret read %d times, want %d", reads, tc.wantReads)
			}
			var sec corev1.Secret
			if err := h.c.Get(ctx, key, &sec); err != nil {
				t.Fatal(err)
			}
			var u cluster.Uploads
			if err := json.Unmarshal(sec.Data[cluster.KeyUploads], &u); err != nil || len(u.Put) != cluster.UploadWindow {
				t.Errorf("the Secret holds %d URLs (%v), want a window of %d", len(u.Put), err, cluster.UploadWindow)
			}
		})
	}
}

// A run's first pass makes its shards' uploads Secrets without reading
// them first (it made their heads: there is nothing to read); one there all
// the same, left by a pass that failed after making it, is written over.
func TestFirstPassMakesUploadsWithoutReading(t *testing.T) {
	loc, _ := objstore.ParseURL("s3://runs/cluster")
	store, err := objstore.Open(context.Background(), loc, objstore.Options{Endpoint: "http://127.0.0.1:9", AccessKeyID: "id", SecretAccessKey: "the-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	ev := withUID(testutil.MakeEvaluation("arith", testNS).InlineDataset("d", 10).OpenAIModel("small", llmURL).ShardSize(5).Obj())
	run := cluster.RunID(ev)
	left := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: cluster.UploadsName(cluster.HeadName("arith", run, "small", 0)),
		Labels: cluster.Labels("arith", run, cluster.ComponentUploads), OwnerReferences: ownedBy("arith")}}
	var secretGets int
	h := newHarness(t, harnessOpts{objs: []client.Object{ev, left}, opts: Options{ResultsStore: store}, funcs: interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok && strings.Contains(key.Name, "uploads") {
				secretGets++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}})
	h.mustReconcile(ev)
	// The one left there was read once, to be written over; no other.
	if secretGets != 1 {
		t.Errorf("the first pass read %d uploads Secrets, want only the one left there", secretGets)
	}
	if len(h.jobs()) != 1 {
		t.Fatalf("the first pass made %d Jobs, want 1", len(h.jobs()))
	}
	for i := range 2 {
		var sec corev1.Secret
		if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: cluster.UploadsName(cluster.HeadName("arith", run, "small", i))}, &sec); err != nil {
			t.Fatal(err)
		}
		var u cluster.Uploads
		if err := json.Unmarshal(sec.Data[cluster.KeyUploads], &u); err != nil || len(u.Put) != cluster.UploadWindow {
			t.Errorf("shard %d's uploads: %d URLs (%v), want %d", i, len(u.Put), err, cluster.UploadWindow)
		}
	}
}
