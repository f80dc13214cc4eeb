package shard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// watches hands out the watches a client makes, and refuses them while
// refusing is set.
type watches struct {
	mu       sync.Mutex
	made     chan *watch.FakeWatcher
	refusing error
	selector []string
}

func (w *watches) client() client.WithWatch {
	return fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Watch: func(_ context.Context, _ client.WithWatch, _ client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			var lo client.ListOptions
			lo.ApplyOptions(opts)
			w.mu.Lock()
			defer w.mu.Unlock()
			w.selector = append(w.selector, lo.Namespace+" "+lo.FieldSelector.String())
			if w.refusing != nil {
				return nil, w.refusing
			}
			fw := watch.NewFake()
			w.made <- fw
			return fw, nil
		},
	}).Build()
}

func (w *watches) next(t *testing.T) *watch.FakeWatcher {
	t.Helper()
	select {
	case fw := <-w.made:
		return fw
	case <-time.After(5 * time.Second):
		t.Fatal("no watch was made")
		return nil
	}
}

func nudgedWithin(t *testing.T, nudge <-chan struct{}, want bool) {
	t.Helper()
	wait := 50 * time.Millisecond
	if want {
		wait = 5 * time.Second
	}
	select {
	case <-nudge:
		if !want {
			t.Error("nudged, want not")
		}
	case <-time.After(wait):
		if want {
			t.Error("not nudged")
		}
	}
}

// A change nudges the loop, many changes leave one nudge pending, a watch
// the server ends is made again at once, and one that fails is tried again
// after a pause (the error reported), then again after a longer one.
func TestWatchConfigMap(t *testing.T) {
	w := &watches{made: make(chan *watch.FakeWatcher, 4)}
	c := w.client()
	clk := clocktesting.NewFakeClock(time.Now())
	nudge := make(chan struct{}, 1)
	var mu sync.Mutex
	var failures []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchConfigMap(ctx, c, clk, "ns", "e-budget", nudge, func(name string, err error) {
			mu.Lock()
			defer mu.Unlock()
			failures = append(failures, name+": "+err.Error())
		})
	}()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e-budget", Namespace: "ns"}}

	fw := w.next(t)
	fw.Modify(cm)
	nudgedWithin(t, nudge, true)
	fw.Modify(cm)
	fw.Modify(cm) // does not block on the pending nudge

	// The server ends it after a while: made again at once. Once the new
	// watch is made, the old one's events have all been passed on (a change
	// handed over is passed on after the hand-over, so looking for the
	// nudges before this raced with the last one).
	clk.Step(5 * time.Minute)
	fw.Stop()
	fw = w.next(t)
	nudgedWithin(t, nudge, true) // the two changes left one nudge
	nudgedWithin(t, nudge, false)
	fw.Add(cm)
	nudgedWithin(t, nudge, true)

	// An error event: reported, and the watch made again after a second.
	w.mu.Lock()
	w.refusing = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "e-budget", errors.New("no"))
	w.mu.Unlock()
	fw.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Second) // refused: a pause of 2 s next
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	w.mu.Lock()
	w.refusing = nil
	w.mu.Unlock()
	clk.Step(time.Second)
	select {
	case <-w.made:
		t.Fatal("made again after 1 s; want the pause to have grown to 2 s")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Second)
	fw = w.next(t)
	fw.Modify(cm)
	nudgedWithin(t, nudge, true)

	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != 2 {
		t.Errorf("failures %q, want the error event's and the refusal's", failures)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.selector {
		if s != "ns metadata.name=e-budget" {
			t.Errorf("watched %q, want ConfigMap e-budget of ns by name", s)
		}
	}
}
