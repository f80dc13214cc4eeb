package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/shard"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestSharesMoveAsTheBudgetsChange: a namespace joins a ModelQuota whose
// whole limit another namespace's Evaluation is using. Its share comes only
// after the running shards acknowledge their lowered ones, through the
// quota's division and then each endpoint's; runner pods that read their
// budgets every 2 s made that take 4.7 s on the local cluster. Here they read
// them only once an hour, so nothing but their watches can move the shares:
// the new Evaluation's first call must still come within 2 s of its runner
// pod's start, and the running one's calls slow to its part.
func TestSharesMoveAsTheBudgetsChange(t *testing.T) {
	const rpm = 600
	nsA, nsB := newNamespace(t), newNamespace(t)
	_, arr, url := countingServer(t, fakellm.Config{Latency: 20 * time.Millisecond, RequestsPerMinute: rpm})
	startManagerWith(t, nsA+","+nsB, func(o *controllers.Options) {
		*o = controllers.Options{ShardRetries: 3, PacerURL: o.PacerURL}
	})
	var mu sync.Mutex
	started := map[string]time.Time{}
	for _, ns := range []string{nsA, nsB} {
		k := startKubeletWith(t, ns, func(o *shard.Options) {
			o.FlushEvery, o.FenceAfter = 0, 0
			o.BudgetEvery, o.FirstGrantEvery = time.Hour, time.Hour
		})
		k.mu.Lock()
		k.onStart = func(model string, _, _ int) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := started[model]; !ok {
				started[model] = time.Now()
			}
		}
		k.mu.Unlock()
	}
	quota := &v1alpha1.ModelQuota{ObjectMeta: metav1.ObjectMeta{Name: "account-" + nsA},
		Spec: v1alpha1.ModelQuotaSpec{Limits: v1alpha1.EndpointLimits{RequestsPerMinute: rpm}}}
	create(t, quota)
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), quota) })
	for _, ns := range []string{nsA, nsB} {
		ep := testutil.MakeEndpoint("shared", ns, url).Obj()
		ep.Spec.QuotaRef = &v1alpha1.QuotaReference{Name: quota.Name}
		create(t, ep)
	}
	background := endpointEvaluation("background", nsA, "shared", 1, 5000, 2)
	background.Spec.Models[0].Name = "background"
	create(t, background)
	eventually(t, time.Minute, "the background Evaluation calling", func() (bool, string) {
		return len(arr.of("fake-background")) > 20, ""
	})
	joined := endpointEvaluation("joined", nsB, "shared", 1, 100, 1)
	joined.Spec.Models[0].Name = "joined"
	create(t, joined)
	eventually(t, 30*time.Second, "the joined Evaluation's first call", func() (bool, string) {
		return len(arr.of("fake-joined")) > 0, ""
	})
	mu.Lock()
	lag := arr.of("fake-joined")[0].Sub(started["joined"])
	mu.Unlock()
	t.Logf("the joined Evaluation's first call %v after its runner pod started", lag.Round(time.Millisecond))
	if lag > 2*time.Second {
		t.Errorf("the first call came %v after the runner pod started, want within 2 s", lag)
	}
	// Each namespace's part is half the account's: over a few seconds of both
	// running, the background one sends about half of it.
	time.Sleep(2 * time.Second)
	from := time.Now()
	time.Sleep(5 * time.Second)
	n := 0
	for _, at := range arr.of("fake-background") {
		if at.After(from) {
			n++
		}
	}
	perMinute := float64(n) / time.Since(from).Minutes()
	t.Logf("the background Evaluation sent %.0f rpm while both ran", perMinute)
	if perMinute > 0.6*rpm {
		t.Errorf("the background Evaluation sent %.0f rpm while both ran, want about half of %d", perMinute, rpm)
	}
}
