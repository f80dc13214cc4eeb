//go:build e2e

package cluster_test

import (
	"sync"
	"testing"
)

// The tests below run side by side, each in namespaces, with fake servers and
// keys of its own. Those of TestSharedKeys spend most of their time waiting
// for their rate limits, and those of TestRunsSideBySide on pods starting, so
// together they take about the longest one's time rather than the sum: the
// cluster's CPU is mostly idle while they wait. Left out, and run alone: the
// tests that delete the manager or a node's pods (TestBatchModeInACluster,
// TestKilledPods, the services' faults), and the lifecycle tests
// (zz_lifecycle_test.go), which look at what every other test left.

// TestSharedKeys: rate limits shared by shards, Evaluations, namespaces and
// agents, each against its own server enforcing its limit.
// TwoNamespacesShareOneQuota times its runner pods' first calls from their
// start, so the others start once it has made them: their pods starting at the
// same moment would slow its pods' start, which is not what it measures.
func TestSharedKeys(t *testing.T) {
	firstCalls := make(chan struct{})
	var once sync.Once
	timed := func() { once.Do(func() { close(firstCalls) }) }
	quota := false
	t.Run("TwoNamespacesShareOneQuota", func(t *testing.T) {
		quota = true // before t.Parallel, which t.Run waits for
		t.Parallel()
		defer timed() // if it fails first
		testTwoNamespacesShareOneQuota(t, timed)
	})
	if !quota {
		timed() // not selected (E2E_RUN): nothing to wait for
	}
	after := func(run func(*testing.T)) func(*testing.T) {
		return func(t *testing.T) {
			<-firstCalls
			run(t)
		}
	}
	sideBySide(t, map[string]func(*testing.T){
		"SharedRateLimit":                  after(testSharedRateLimit),
		"TwoTeamsShareOneKey":              after(testTwoTeamsShareOneKey),
		"TwoEvaluationsShareOneEndpoint":   after(testTwoEvaluationsShareOneEndpoint),
		"AgentCallsThroughASharedEndpoint": after(testAgentCallsThroughASharedEndpoint),
	})
}

// TestRunsSideBySide: data sources (one edited mid-run), gates, ownership,
// re-scoring, budgets, judges in batches, and a run seen by Prometheus and Jaeger.
func TestRunsSideBySide(t *testing.T) {
	sideBySide(t, map[string]func(*testing.T){
		"EveryDatasetSource":            testEveryDatasetSource,
		"GateInACluster":                testGateInACluster,
		"ForgedResultsFail":             testForgedResultsFail,
		"NameConflict":                  testNameConflict,
		"ScoringEditRescoresInACluster": testScoringEditRescoresInACluster,
		"BudgetInACluster":              testBudgetInACluster,
		"JudgeInBatchesInACluster":      testJudgeInBatchesInACluster,
		"DatasetEditedMidRun":           testDatasetEditedMidRun,
		"ResultsStoreInACluster":        testResultsStoreInACluster,
		"Observability":                 testObservability,
		"QuotaFreesUp":                  testQuotaFreesUp,
	})
}

// sideBySide runs tests as parallel subtests, and returns when all ended.
func sideBySide(t *testing.T, tests map[string]func(*testing.T)) {
	for name, run := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t)
		})
	}
}
