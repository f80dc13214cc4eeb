package controllers

import (
	"os"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/internal/testutil"
)

// TestEveryMetricIsDocumented: each metric the manager registers has its row
// in docs/reference/metrics.md, and the page names none that is gone (the
// runners' are runner/telemetry's to check).
func TestEveryMetricIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	notRunners := func(name string) bool { return !strings.HasPrefix(name, "proctor_runner_") }
	testutil.MetricsDocumented(t, doc, notRunners, append(collectors, sharedKeyMetrics)...)
}
