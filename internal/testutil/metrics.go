package testutil

import (
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsDocumented checks a metrics reference page (doc) against
// collectors: each of their metrics has a row of its own (| `NAME` |), and
// every proctor_ metric the page names that owns claims is one of them.
func MetricsDocumented(t *testing.T, doc []byte, owns func(name string) bool, collectors ...prometheus.Collector) {
	t.Helper()
	registered := map[string]bool{}
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
			if name == nil {
				t.Fatalf("no name in %s", d)
			}
			registered[name[1]] = true
		}
	}
	for name := range registered {
		if !regexp.MustCompile("\\| `" + regexp.QuoteMeta(name) + "` \\|").Match(doc) {
			t.Errorf("%s has no row in the metrics reference", name)
		}
	}
	for _, m := range regexp.MustCompile("`(proctor_\\w+)`").FindAllSubmatch(doc, -1) {
		if name := string(m[1]); owns(name) && !registered[name] {
			t.Errorf("the metrics reference names %s, which is not registered", name)
		}
	}
}
