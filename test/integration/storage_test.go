package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/controllers"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// TestStorageBudget: a run's records are bounded in the cluster; past the
// budget, outputs are not stored but scores are, the records say so, and so do
// the Evaluation's conditions and events.
func TestStorageBudget(t *testing.T) {
	ns := newNamespace(t)
	_, url := fakeLLM(t, fakellm.Config{Responder: func(req fakellm.Request) fakellm.Reply {
		prompt := req.Messages[len(req.Messages)-1].Content
		var b strings.Builder
		seed := sha256.Sum256([]byte(prompt))
		for b.Len() < 30<<10 {
			seed = sha256.Sum256(seed[:])
			b.WriteString(hex.EncodeToString(seed[:]))
		}
		return fakellm.Reply{Text: b.String()}
	}})
	const budget = 400 << 10
	startManagerWith(t, ns, func(o *controllers.Options) { o.StorageBudget = budget })
	startKubelet(t, ns)
	const n = 40
	create(t, testutil.MakeEvaluation("bounded", ns).InlineDataset("d", n).OpenAIModel("m", url).
		Scorer(v1alpha1.ScorerContains).ShardSize(20).Parallelism(2).Concurrency(4).Obj())
	ev := waitPhase(t, ns, "bounded", v1alpha1.PhaseSucceeded, 90*time.Second)
	c := meta.FindStatusCondition(ev.Status.Conditions, v1alpha1.ConditionOutputsTruncated)
	if c == nil || c.Status != "True" || c.Reason != v1alpha1.ReasonStorageBudgetReached || c.ObservedGeneration != ev.Generation {
		t.Errorf("OutputsTruncated condition %+v", c)
	}
	recs := checkRecords(t, ns, "bounded", []string{"m"}, sampleIDs("d", n))
	stored, dropped := 0, 0
	for _, r := range recs {
		if r.Scores == nil || r.Error != "" {
			t.Errorf("record %s: scores %v error %q", r.ID, r.Scores, r.Error)
		}
		switch {
		case r.Output == "" && r.OutputTruncated && r.OutputBytes >= 30<<10:
			dropped++
		case len(r.Output) >= 30<<10 && !r.OutputTruncated:
			stored += len(r.Output)
		default:
			t.Errorf("record %s: output %d bytes, truncated %v, outputBytes %d", r.ID, len(r.Output), r.OutputTruncated, r.OutputBytes)
		}
	}
	if dropped == 0 || stored > budget {
		t.Errorf("%d outputs dropped, %d bytes of outputs stored: want the budget (%d) to bound them", dropped, stored, budget)
	}
	t.Logf("%d of %d outputs stored (%d bytes), %d dropped", n-dropped, n, stored, dropped)
}
