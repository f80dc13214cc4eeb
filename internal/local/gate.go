package local

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/results"
)

// baselinePath is where a local run's baseline results are: spec.baseline.path,
// relative to the Evaluation file. It refuses baselines a local run cannot
// read, and a path with no results, before anything runs.
func baselinePath(ev *v1alpha1.Evaluation, file string) (string, error) {
	b := ev.Spec.Baseline
	switch {
	case b == nil:
		return "", nil
	case b.Path == "":
		return "", fmt.Errorf("spec.baseline: a local run compares with a results directory (baseline.path); " +
			"to compare with a cluster's Evaluation, run proctor compare with it")
	}
	p := b.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(file), p)
	}
	check := p
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		check = filepath.Join(p, results.ResultsFile)
	}
	if _, err := os.Stat(check); err != nil {
		return "", fmt.Errorf("spec.baseline.path: %s has no results (a directory proctor run wrote, with its %s): %w", b.Path, results.ResultsFile, err)
	}
	return p, nil
}

// compareAndGate compares the run's records (results.jsonl in dir, just
// assembled) with the baseline's, checks the gate, and rewrites summary.json
// with both.
func compareAndGate(ev *v1alpha1.Evaluation, baseline, dir string, pairs []results.Pair, metrics []string, summaries []results.Summary) (*compare.Summary, error) {
	sum := &compare.Summary{Results: summaries}
	if baseline != "" {
		base := compare.NewBaseline(ev.Spec.Baseline.Path, metrics)
		if err := compare.ReadDir(baseline, base.Add); err != nil {
			return nil, fmt.Errorf("reading the baseline: %w", err)
		}
		c := compare.New(base, ev.Spec.Baseline.Model, metrics, pairs)
		if err := compare.ReadDir(dir, c.Add); err != nil {
			return nil, fmt.Errorf("reading the results back: %w", err)
		}
		rep := c.Report()
		sum.Comparison = &rep
	}
	if ev.Spec.Gate != nil {
		v := compare.Check(apiconv.Gate(ev.Spec.Gate), summaries, sum.Comparison)
		sum.Gate = &v
	}
	if err := results.WriteSummary(dir, sum); err != nil {
		return nil, err
	}
	return sum, nil
}
