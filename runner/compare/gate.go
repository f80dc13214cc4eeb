package compare

import (
	"fmt"
	"unicode/utf8"

	"github.com/proctor-dev/proctor/runner/results"
)

// Gate is a run's gate (spec.gate): rules on its metrics, and the level of
// the paired tests behind maxDrop. It is the API's, in plain types: the
// runner has no Kubernetes (internal/apiconv converts).
type Gate struct {
	Rules []Rule
	// Significance is the tests' level: a drop fails maxDrop only if its
	// p-value is below it.
	Significance float64
}

// Rule bounds one metric, for one model and one dataset or ("") all.
type Rule struct {
	Metric, Model, Dataset string
	// Min is the lowest mean; MaxDrop the largest significant fall from the
	// baseline. Nil when the rule has none.
	Min, MaxDrop *Bound
}

// Bound is a rule's number, and its text as the user wrote it (which
// violations quote).
type Bound struct {
	Value float64
	Text  string
}

// Verdict is how a run fared against its gate.
type Verdict struct {
	Passed     bool     `json:"passed"`
	Violations []string `json:"violations,omitempty"`
	// Incomplete, when set, says why there is no verdict: the run did not
	// finish every sample (interrupted, out of budget), and a gate judges
	// whole runs only.
	Incomplete string `json:"incomplete,omitempty"`
}

// MaxViolations bounds the violations a verdict lists, and MaxViolationBytes
// each one's length (status has room for so many, so long); the last one says
// how many more there were.
const (
	MaxViolations     = 32
	MaxViolationBytes = 1000
)

// Check checks the gate's rules on every model and dataset they select: min
// on the summaries (errored samples scoring 0), maxDrop on the comparison with
// the baseline (rep; nil when there is none). A rule that cannot be checked
// (nothing finished, nothing paired with the baseline) fails: a gate that
// cannot see a result does not pass it, and a run that did not finish every
// sample has no verdict (Incomplete), which does not pass either.
func Check(g *Gate, summaries []results.Summary, rep *Report) Verdict {
	v := Verdict{Passed: true}
	if g == nil {
		return v
	}
	var done, total int64
	for _, s := range summaries {
		done += s.Completed
		total += s.Total
	}
	if done < total {
		v.Passed = false
		v.Incomplete = fmt.Sprintf("%d of %d samples finished", done, total)
		v.Violations = []string{fmt.Sprintf("the run is incomplete (%s): an incomplete run passes no gate", v.Incomplete)}
		return v
	}
	alpha := g.Significance
	var all []string
	for _, rule := range g.Rules {
		for _, s := range summaries {
			if (rule.Model != "" && rule.Model != s.Model) || (rule.Dataset != "" && rule.Dataset != s.Dataset) {
				continue
			}
			where := fmt.Sprintf("model %s on dataset %s", s.Model, s.Dataset)
			if rule.Min != nil {
				mean, ok := s.Metrics[rule.Metric]
				switch {
				case s.Completed == 0 || !ok:
					all = append(all, fmt.Sprintf("%s: %s has no finished sample to check min %s on", where, rule.Metric, rule.Min.Text))
				case mean < rule.Min.Value:
					all = append(all, fmt.Sprintf("%s: %s is %.4f, below the minimum %s", where, rule.Metric, mean, rule.Min.Text))
				}
			}
			if rule.MaxDrop != nil {
				maxDrop := rule.MaxDrop.Value
				var m *Metric
				if rep != nil {
					if r := rep.Find(s.Model, s.Dataset); r != nil {
						m = r.Find(rule.Metric)
					}
				}
				switch {
				case m == nil:
					all = append(all, fmt.Sprintf("%s: %s has no sample paired with the baseline to check maxDrop %s on", where, rule.Metric, rule.MaxDrop.Text))
				case -m.Diff > maxDrop && m.PValue < alpha:
					all = append(all, fmt.Sprintf("%s: %s fell %.4f from the baseline, more than maxDrop %s, significantly (p < %g): %s",
						where, rule.Metric, -m.Diff, rule.MaxDrop.Text, alpha, m.Describe()))
				}
			}
		}
	}
	if len(all) > 0 {
		v.Passed = false
		if len(all) > MaxViolations {
			all = append(all[:MaxViolations-1], fmt.Sprintf("and %d more", len(all)-MaxViolations+1))
		}
		for i, line := range all {
			all[i] = cut(line, MaxViolationBytes)
		}
		v.Violations = all
	}
	return v
}

// Clip shortens s to at most n bytes, on a character boundary, marking the
// cut (status fields have a length bound).
func Clip(s string, n int) string { return cut(s, n) }

// cut shortens s to at most n bytes, on a character boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n - len("...")
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "..."
}
