package compare

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/stats"
)

func record(model, id string, scores map[string]float64) *results.Record {
	return &results.Record{ID: id, Model: model, Dataset: "d", Scores: scores}
}

// binaryRuns: n samples; the baseline passes the first basePass, the run the
// samples listed in curPass.
func binaryRuns(t *testing.T, model string, n int, basePass int, curPass func(i int) bool) (*Baseline, []*results.Record) {
	t.Helper()
	b := NewBaseline("evaluation/nightly", []string{"exact_match"})
	var cur []*results.Record
	for i := range n {
		id := fmt.Sprintf("q%d", i)
		b.Add(record(model, id, map[string]float64{"exact_match": b2f(i < basePass)}))
		cur = append(cur, record(model, id, map[string]float64{"exact_match": b2f(curPass(i))}))
	}
	return b, cur
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func TestPairing(t *testing.T) {
	b := NewBaseline("configMap/base", []string{"exact_match", "f1"})
	for _, id := range []string{"q1", "q2", "q3", "q4", "q5"} {
		b.Add(record("m", id, map[string]float64{"exact_match": 1, "f1": 0.5}))
	}
	// A later record of a sample replaces the earlier one.
	b.Add(record("m", "q5", map[string]float64{"exact_match": 0, "f1": 0.25}))
	// A sample awaiting its verdicts is not finished.
	b.Add(&results.Record{ID: "q9", Model: "m", Dataset: "d", JudgePending: []string{"judge"}})
	c := New(b, "", []string{"exact_match", "f1"}, []results.Pair{{Model: "m", Dataset: "d"}})
	c.Add(record("m", "q2", map[string]float64{"exact_match": 1, "f1": 0.75}))
	c.Add(record("m", "q2", map[string]float64{"exact_match": 0, "f1": 0})) // stored twice: the first counts
	c.Add(record("m", "q3", map[string]float64{"exact_match": 0, "f1": 0.5}))
	c.Add(&results.Record{ID: "q4", Model: "m", Dataset: "d", Error: "timeout"}) // errored: scores 0
	c.Add(record("m", "q5", map[string]float64{"exact_match": 1, "f1": 0.25}))
	c.Add(record("m", "q6", map[string]float64{"exact_match": 1, "f1": 1})) // not in the baseline
	c.Add(record("other", "q1", map[string]float64{"exact_match": 1}))      // not compared
	rep := c.Report()
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	got := []any{r.Model, r.BaselineModel, r.Dataset, r.Paired, r.Unmatched, r.BaselineUnmatched}
	if diff := cmp.Diff([]any{"m", "m", "d", int64(4), int64(1), int64(1)}, got); diff != "" {
		t.Errorf("pairing (-want +got):\n%s", diff)
	}
	em, f1 := r.Find("exact_match"), r.Find("f1")
	// exact_match: baseline 1,1,1,0 → run 1,0,0,1.
	if em.Test != TestMcNemar || em.Baseline != 0.75 || em.Current != 0.5 || em.Improved != 1 || em.Regressed != 2 {
		t.Errorf("exact_match = %+v", em)
	}
	if want := stats.McNemar(2, 1); em.PValue != want {
		t.Errorf("exact_match p = %v, want McNemar's %v", em.PValue, want)
	}
	// f1: baseline .5,.5,.5,.25 → run .75,.5,0,.25: a paired bootstrap.
	if f1.Test != TestBootstrap || math.Abs(f1.Diff-(-0.25/4)) > 1e-12 {
		t.Errorf("f1 = %+v, want a bootstrap of diff -0.0625", f1)
	}
	if !(f1.Interval.Lo <= f1.Diff && f1.Diff <= f1.Interval.Hi) {
		t.Errorf("f1 interval %v does not hold its diff %v", f1.Interval, f1.Diff)
	}
}

// TestBaselineModel: every model is compared with the baseline's model named.
func TestBaselineModel(t *testing.T) {
	b, cur := binaryRuns(t, "old", 10, 10, func(int) bool { return true })
	c := New(b, "old", []string{"exact_match"}, []results.Pair{{Model: "new", Dataset: "d"}})
	for _, r := range cur {
		r.Model = "new"
		c.Add(r)
	}
	r := c.Report().Results[0]
	if r.BaselineModel != "old" || r.Paired != 10 || r.Find("exact_match").Diff != 0 || r.Find("exact_match").PValue != 1 {
		t.Errorf("result = %+v", r)
	}
}

// TestMcNemarReference: 12 of the baseline's passes failed, 2 of its failures
// passed: exact two-sided p = 2·(C(14,0)+C(14,1)+C(14,2))/2^14 = 212/16384,
// as statsmodels' mcnemar(exact=True) gives.
func TestMcNemarReference(t *testing.T) {
	// Samples 0–59 pass in the baseline; the run fails 0–11 and passes 60–61.
	b, cur := binaryRuns(t, "m", 100, 60, func(i int) bool { return (i >= 12 && i < 60) || i == 60 || i == 61 })
	c := New(b, "", []string{"exact_match"}, []results.Pair{{Model: "m", Dataset: "d"}})
	for _, r := range cur {
		c.Add(r)
	}
	m := c.Report().Results[0].Find("exact_match")
	if math.Abs(m.PValue-212.0/16384) > 1e-12 || m.Regressed != 12 || m.Improved != 2 {
		t.Errorf("McNemar: %+v, want p=%v with 12 regressed, 2 improved", m, 212.0/16384)
	}
	if math.Abs(m.Diff-(-0.10)) > 1e-12 {
		t.Errorf("diff = %v, want -0.10", m.Diff)
	}
}

// num is a rule's bound as written.
func num(s string) *Bound {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(err)
	}
	return &Bound{Value: v, Text: s}
}

// gate is a gate of rules at the default significance, 0.05.
func gate(rules ...Rule) Gate { return Gate{Rules: rules, Significance: 0.05} }

func TestGate(t *testing.T) {
	// The baseline passes 60 of 100; a regressed run fails 12 of those and
	// passes 2 more (0.50, p=0.013); a noisy run loses 2 and gains 1 (0.59, p=1).
	regressed := func(i int) bool { return (i >= 12 && i < 60) || i == 60 || i == 61 }
	noisy := func(i int) bool { return (i >= 2 && i < 60) || i == 60 }
	summary := func(mean float64, completed int64) []results.Summary {
		return []results.Summary{{Model: "m", Dataset: "d", Completed: completed, Metrics: map[string]float64{"exact_match": mean}}}
	}
	report := func(pass func(int) bool) *Report {
		b, cur := binaryRuns(t, "m", 100, 60, pass)
		c := New(b, "", []string{"exact_match"}, []results.Pair{{Model: "m", Dataset: "d"}})
		for _, r := range cur {
			c.Add(r)
		}
		rep := c.Report()
		return &rep
	}
	cases := []struct {
		name      string
		gate      Gate
		summaries []results.Summary
		rep       *Report
		want      []string // substrings of the violations, in order; none: passed
	}{
		{"min met", gate(Rule{Metric: "exact_match", Min: num("0.5")}), summary(0.5, 100), nil, nil},
		{"min missed", gate(Rule{Metric: "exact_match", Min: num("0.8")}), summary(0.5, 100), nil,
			[]string{"model m on dataset d: exact_match is 0.5000, below the minimum 0.8"}},
		{"min of another model", gate(Rule{Metric: "exact_match", Model: "x", Min: num("0.8")}), summary(0.5, 100), nil, nil},
		{"nothing finished", gate(Rule{Metric: "exact_match", Min: num("0")}), summary(0, 0), nil,
			[]string{"has no finished sample"}},
		{"significant drop", gate(Rule{Metric: "exact_match", MaxDrop: num("0.02")}), summary(0.5, 100), report(regressed),
			[]string{"exact_match fell 0.1000 from the baseline, more than maxDrop 0.02, significantly (p < 0.05): 0.6000 → 0.5000"}},
		{"drop within maxDrop", gate(Rule{Metric: "exact_match", MaxDrop: num("0.1")}), summary(0.5, 100), report(regressed), nil},
		{"drop not significant at 0.01", Gate{Significance: 0.01, Rules: []Rule{{Metric: "exact_match", MaxDrop: num("0")}}}, summary(0.5, 100), report(regressed), nil},
		{"noise", gate(Rule{Metric: "exact_match", MaxDrop: num("0")}), summary(0.59, 100), report(noisy), nil},
		{"incomplete: no verdict", gate(Rule{Metric: "exact_match", Min: num("0.5")}),
			[]results.Summary{{Model: "m", Dataset: "d", Total: 40, Completed: 16, Metrics: map[string]float64{"exact_match": 1}}}, nil,
			[]string{"the run is incomplete (16 of 40 samples finished): an incomplete run passes no gate"}},
		{"no comparison", gate(Rule{Metric: "exact_match", MaxDrop: num("0")}), summary(0.59, 100), nil,
			[]string{"has no sample paired with the baseline"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Check(&tc.gate, tc.summaries, tc.rep)
			if v.Passed != (len(tc.want) == 0) || len(v.Violations) != len(tc.want) {
				t.Fatalf("verdict %+v, want violations %q", v, tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(v.Violations[i], w) {
					t.Errorf("violation %q does not say %q", v.Violations[i], w)
				}
			}
		})
	}
}

// TestViolationsFitStatus: however many rules fail and however long the names,
// a verdict fits the status's bounds.
func TestViolationsFitStatus(t *testing.T) {
	long := strings.Repeat("é", 600) // names are bounded by the API; a metric's text is not
	var ss []results.Summary
	for i := range 40 {
		ss = append(ss, results.Summary{Model: fmt.Sprintf("m%d", i), Dataset: long, Completed: 1, Metrics: map[string]float64{"exact_match": 0}})
	}
	g := gate(Rule{Metric: "exact_match", Min: num("1")})
	v := Check(&g, ss, nil)
	if len(v.Violations) != MaxViolations || !strings.HasPrefix(v.Violations[MaxViolations-1], "and 9 more") {
		t.Fatalf("%d violations, the last %q", len(v.Violations), v.Violations[len(v.Violations)-1])
	}
	for _, line := range v.Violations {
		if len(line) > MaxViolationBytes || !utf8.ValidString(line) {
			t.Errorf("a violation of %d bytes (valid UTF-8: %v)", len(line), utf8.ValidString(line))
		}
	}
}
