package controllers

import (
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryMetricIsDocumented: each metric Proctor registers has its row in
// docs/reference/metrics.md, and the page names none that is gone.
func TestEveryMetricIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, c := range append(collectors, sharedKeyMetrics) {
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
	for _, m := range regexp.MustCompile("`(proctor_\\w+)`").FindAllSubmatch(doc, -1) {
		// runner/telemetry's test checks the runners'.
		if !ours[string(m[1])] && !regexp.MustCompile(`^proctor_runner_`).Match(m[1]) {
			t.Errorf("docs/reference/metrics.md names %s, which Proctor does not register", m[1])
		}
	}
}
