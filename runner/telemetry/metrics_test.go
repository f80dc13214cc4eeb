package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
	ours := map[string]bool{}
	for _, c := range New().Collectors() {
		ch := make(chan *prometheus.Desc, 8)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
			if name == nil {
				t.Fatalf("no name in %s", d)
			}
			ours[name[1]] = true
		}
	}
	for name := range ours {
		if !regexp.MustCompile("\\| `" + regexp.QuoteMeta(name) + "` \\|").Match(doc) {
			t.Errorf("%s has no row in docs/reference/metrics.md", name)
		}
	}
	for _, m := range regexp.MustCompile("`(proctor_runner_\\w+)`").FindAllSubmatch(doc, -1) {
		if !ours[string(m[1])] {
			t.Errorf("docs/reference/metrics.md names %s, which runners do not register", m[1])
		}
	}
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
