package controllers

import (
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryMetricIsDocumented: each metric Proctor registers has its row in
// docs/metrics.md, and the page names none that is gone.
func TestEveryMetricIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, c := range []prometheus.Collector{evaluationsByPhase, samplesTotal} {
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
	// Every proctor_ collector of this package is in the list above: a new
	// one registered in init without being listed fails here.
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`Name: +"(proctor_\w+)"`).FindAllSubmatch(src, -1) {
		if !ours[string(m[1])] {
			t.Errorf("metrics.go defines %s, which this test does not describe: add its collector to the list", m[1])
		}
	}
	for name := range ours {
		if !regexp.MustCompile("\\| `" + regexp.QuoteMeta(name) + "` \\|").Match(doc) {
			t.Errorf("%s has no row in docs/metrics.md", name)
		}
	}
	for _, m := range regexp.MustCompile("`(proctor_\\w+)`").FindAllSubmatch(doc, -1) {
		if !ours[string(m[1])] {
			t.Errorf("docs/metrics.md names %s, which Proctor does not register", m[1])
		}
	}
}
