package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/ratelimit"
)

// TestGoneEndpointsAreCountedForStaleAfter: a quota's part of an endpoint that
// no longer names it (deleted, or pointed elsewhere) stays counted while its
// runner pods may still be spending it, and no longer.
func TestGoneEndpointsAreCountedForStaleAfter(t *testing.T) {
	r := &ModelQuotaReconciler{Options: Options{StaleAfter: 30 * time.Second}, gone: map[types.NamespacedName]map[string]time.Time{}}
	key := types.NamespacedName{Name: "account"}
	users := []cluster.QuotaUser{{Key: "a/key", Active: true}, {Key: "b/key", Active: true}}
	division, _ := cluster.DivideQuota(nil, "account", ratelimit.Limits{RequestsPerMinute: 600}, users, nil)
	start := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

	// b's endpoint is gone: it is kept, with no part, for StaleAfter.
	listed := users[:1]
	if diff := cmp.Diff([]cluster.QuotaUser{{Key: "b/key"}}, r.goneUsers(key, division, "account", listed, start)); diff != "" {
		t.Errorf("just gone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]cluster.QuotaUser{{Key: "b/key"}}, r.goneUsers(key, division, "account", listed, start.Add(29*time.Second))); diff != "" {
		t.Errorf("29s later (-want +got):\n%s", diff)
	}
	if got := r.goneUsers(key, division, "account", listed, start.Add(30*time.Second)); len(got) != 0 {
		t.Errorf("after StaleAfter: %v, want none", got)
	}
	// Back again: counted as listed, and the clock starts over when it goes.
	if got := r.goneUsers(key, division, "account", users, start.Add(40*time.Second)); len(got) != 0 {
		t.Errorf("listed again: %v, want none", got)
	}
	if diff := cmp.Diff([]cluster.QuotaUser{{Key: "b/key"}}, r.goneUsers(key, division, "account", listed, start.Add(50*time.Second))); diff != "" {
		t.Errorf("gone again (-want +got):\n%s", diff)
	}
}
