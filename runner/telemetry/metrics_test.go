package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/runner/provider"
)

// TestEveryMetricIsDocumented: each runner metric has its row in
// docs/reference/metrics.md, and the page names no runner metric that is
// gone.
func TestEveryMetricIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	runners := func(name string) bool { return strings.HasPrefix(name, "proctor_runner_") }
	testutil.MetricsDocumented(t, doc, runners, New().Collectors()...)
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, OutcomeOK},
		{fmt.Errorf("call: %w", &provider.HTTPError{StatusCode: 429}), OutcomeThrottled},
		{&provider.HTTPError{StatusCode: 503}, OutcomeServerError},
		{&provider.HTTPError{StatusCode: 404}, OutcomeClientError},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), OutcomeTimeout},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, OutcomeNetwork},
		{errors.New("the agent exited with status 2"), OutcomeOther},
	} {
		if got := Outcome(c.err); got != c.want {
			t.Errorf("Outcome(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// TestANilMetricsRecordsNothing: a run without metrics calls them all the
// same.
func TestANilMetricsRecordsNothing(t *testing.T) {
	var m *Metrics
	m.Attempt("m", "", nil, 1, 1, provider.Usage{InputTokens: 1}, 1)
	m.Sending("m", "", 1)
	m.Retry("m", "")
	m.Sample("m", "d", "")
	m.Throttled("m", true, 0)
	m.Batches("m", 1)
	m.BatchEnded("m")
	m.SamplesInFlight("m", 1)
	m.SlotsBroken("m", 1)
}
