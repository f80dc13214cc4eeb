package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/compare"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
)

// exitRegression: the run missed its gate (spec.gate).
const exitRegression = 3

func newCompareCommand(s streams) *cobra.Command {
	var namespace, baselineModel, output string
	cmd := &cobra.Command{
		Use:   "compare BASELINE CANDIDATE",
		Short: "Compare two runs' results, sample by sample",
		Long: `Pair the samples of two runs by model, dataset and id, and print, for each metric, the
baseline's and the candidate's means on the samples both ran, the difference with its 95%
confidence interval (a paired bootstrap), and a paired test's p-value (McNemar's exact test for
scores of 0 or 1, else the bootstrap's), with the samples only one of them has.

Each of BASELINE and CANDIDATE is a results directory of proctor run (or its results.jsonl),
or, in the cluster of your kubeconfig, an Evaluation (NAME or evaluation/NAME) or a results
ConfigMap (configmap/NAME), or an object store location (s3://BUCKET/PREFIX, its latest commit).`,
		Example: `  proctor compare results/nightly results/candidate
  proctor compare evaluation/nightly evaluation/candidate -n evals
  proctor compare s3://evals/nightly results/candidate
  proctor compare results/gpt-4.1 results/gpt-5 --baseline-model gpt-4.1 -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return invalid(fmt.Errorf("--output: %q is not table or json", output))
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			base, err := openResults(ctx, args[0], namespace, s.errOut)
			if err != nil {
				return err
			}
			cand, err := openResults(ctx, args[1], namespace, s.errOut)
			if err != nil {
				return err
			}
			rep, err := compareResults(base, cand, baselineModel)
			if err != nil {
				return err
			}
			if output == "json" {
				b, _ := json.MarshalIndent(rep, "", "  ")
				fmt.Fprintln(s.out, string(b))
			} else {
				printComparison(s.out, rep)
			}
			if pairedTotal(rep) == 0 {
				// A comparison of nothing must not pass for one in a script.
				return &exitError{code: exitFailed, err: fmt.Errorf("no sample of %s pairs with one of %s (by model, dataset and id)", cand.label, base.label)}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "the Evaluations' namespace (default: your kubeconfig's)")
	cmd.Flags().StringVar(&baselineModel, "baseline-model", "", "compare every model with this model of the baseline (default: the model of the same name)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// resultsSource is a run's results: its summaries and a way to read its records.
type resultsSource struct {
	label     string
	summaries []results.Summary
	records   func(fn func(*results.Record)) error
	// lines, when set, reads the records as JSON lines, undecoded.
	lines func(fn func([]byte) error) error
	// path is the local results directory or file the records are in, if
	// they are.
	path string
	// summary is the whole summary.json, when there is one; phase and
	// reason are the Evaluation's, for results found by its name.
	summary       *compare.Summary
	phase, reason string
}

// openResults opens a results directory, or an Evaluation's or a ConfigMap's
// results in the cluster.
func openResults(ctx context.Context, arg, namespace string, warn io.Writer) (*resultsSource, error) {
	if objstore.IsURL(arg) {
		store, err := objstore.OpenURL(ctx, arg)
		if err != nil {
			return nil, invalid(err)
		}
		res, err := objects.ReadResults(ctx, store, store.Location().String())
		if err != nil {
			return nil, &exitError{code: exitFailed, err: err}
		}
		summaries, err := res.Summaries()
		if err != nil {
			return nil, &exitError{code: exitFailed, err: err}
		}
		src := &resultsSource{label: res.Where, summaries: summaries, records: func(fn func(*results.Record)) error {
			return res.Records(ctx, fn)
		}}
		if len(res.Manifest.Summary) > 0 {
			var sum compare.Summary
			if err := json.Unmarshal(res.Manifest.Summary, &sum); err == nil {
				src.summary = &sum
			}
		}
		return src, nil
	}
	_, statErr := os.Stat(arg)
	if statErr == nil {
		src := &resultsSource{label: arg, path: arg, records: func(fn func(*results.Record)) error { return compare.ReadDir(arg, fn) },
			lines: func(fn func([]byte) error) error { return compare.EachLine(arg, fn) }}
		if sum, err := compare.ReadSummary(arg); err == nil {
			src.summaries, src.summary = sum.Results, sum
		}
		return src, nil
	}
	var b v1alpha1.Baseline
	kind, name, found := strings.Cut(arg, "/")
	switch {
	case !found:
		b.Evaluation = arg
	case strings.EqualFold(kind, "evaluation") || strings.EqualFold(kind, "evaluations") || strings.EqualFold(kind, "eval"):
		b.Evaluation = name
	case strings.EqualFold(kind, "configmap") || strings.EqualFold(kind, "cm"):
		b.ConfigMap = name
	default:
		return nil, invalid(fmt.Errorf("%s: not a results directory (%w), nor NAME, evaluation/NAME or configmap/NAME", arg, statErr))
	}
	c, ns, err := clusterClient(namespace)
	if err != nil {
		// A mistyped directory must not read as a kubeconfig problem.
		return nil, invalid(fmt.Errorf("%s: no such results directory, and no cluster to look for it in as an Evaluation or ConfigMap: %w", arg, err))
	}
	res, missing, err := kube.FindResults(ctx, c, ns, &b)
	switch {
	case err != nil:
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s: %w", arg, err)}
	case missing != nil:
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s: %s", arg, missing.Message)}
	}
	res.Open = openLocation
	sum, err := res.Summary()
	if err != nil {
		return nil, &exitError{code: exitFailed, err: err}
	}
	src := &resultsSource{label: res.Label, summaries: sum.Results, summary: sum, records: func(fn func(*results.Record)) error {
		return res.Records(ctx, c, func(fe *cluster.ForeignError) { fmt.Fprintf(warn, "proctor: skipped %v\n", fe) }, fn)
	}}
	if ev := res.Evaluation(); ev != nil {
		src.phase, src.reason = string(ev.Status.Phase), ev.Status.Reason
	}
	return src, nil
}

// openLocation opens a results store location a cluster's results name,
// with the credentials of the environment (AWS_*), as `proctor results
// s3://...` does.
func openLocation(ctx context.Context, location string) (objects.Bucket, error) {
	return objstore.OpenURL(ctx, location)
}

// clusterClient is a client of the kubeconfig's cluster, and the namespace to
// use (the flag's, else the kubeconfig's).
func clusterClient(namespace string) (client.Client, string, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(),
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: namespace}})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", invalid(fmt.Errorf("kubeconfig: %w", err))
	}
	if namespace == "" {
		if namespace, _, err = loader.Namespace(); err != nil {
			return nil, "", invalid(fmt.Errorf("kubeconfig: %w", err))
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: newScheme()})
	if err != nil {
		return nil, "", err
	}
	return c, namespace, nil
}

// compareResults pairs the candidate's records with the baseline's, on the
// candidate's models, datasets and metrics (from its summary, else its
// records).
func compareResults(base, cand *resultsSource, baselineModel string) (*compare.Report, error) {
	var pairs []results.Pair
	metrics := map[string]bool{}
	for _, s := range cand.summaries {
		pairs = append(pairs, results.Pair{Model: s.Model, Dataset: s.Dataset})
		for m := range s.Metrics {
			metrics[m] = true
		}
	}
	if len(pairs) == 0 {
		// No summary: the pairs and metrics of the records, in their order.
		if err := cand.records(func(r *results.Record) {
			p := results.Pair{Model: r.Model, Dataset: r.Dataset}
			if !slices.ContainsFunc(pairs, func(q results.Pair) bool { return q.Model == p.Model && q.Dataset == p.Dataset }) {
				pairs = append(pairs, p)
			}
			for m := range r.Scores {
				metrics[m] = true
			}
		}); err != nil {
			return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s: %w", cand.label, err)}
		}
	}
	if len(pairs) == 0 {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s has no results to compare", cand.label)}
	}
	names := slices.Sorted(maps.Keys(metrics))
	b := compare.NewBaseline(base.label, names)
	if err := base.records(b.Add); err != nil {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s: %w", base.label, err)}
	}
	if models := b.Models(); len(models) == 0 {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s has no results to compare with", base.label)}
	} else if baselineModel != "" && !slices.Contains(models, baselineModel) {
		return nil, invalid(fmt.Errorf("--baseline-model: %s has no model %q (its models: %s)", base.label, baselineModel, strings.Join(models, ", ")))
	}
	c := compare.New(b, baselineModel, names, pairs)
	if err := cand.records(c.Add); err != nil {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("%s: %w", cand.label, err)}
	}
	rep := c.Report()
	return &rep, nil
}

// printComparison prints one row per model, dataset and metric.
func printComparison(w io.Writer, rep *compare.Report) {
	fmt.Fprintf(w, "Compared with %s, sample by sample:\n", terminalSafe(rep.Baseline))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tDATASET\tMETRIC\tBASELINE\tCURRENT\tDIFF\t95% CI\tP\tTEST\tPAIRED\tONLY HERE/THERE")
	for _, r := range rep.Results {
		model := terminalSafe(r.Model)
		if r.BaselineModel != r.Model {
			model += " vs " + terminalSafe(r.BaselineModel)
		}
		unmatched := fmt.Sprintf("%d/%d", r.Unmatched, r.BaselineUnmatched)
		if len(r.Metrics) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t%d\t%s\n", model, terminalSafe(r.Dataset), r.Paired, unmatched)
		}
		for _, m := range r.Metrics {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.4f\t%.4f\t%+.4f\t[%+.4f, %+.4f]\t%.4g\t%s\t%d\t%s\n", model, terminalSafe(r.Dataset), terminalSafe(m.Metric),
				m.Baseline, m.Current, m.Diff, m.Interval.Lo, m.Interval.Hi, m.PValue, m.Test, r.Paired, unmatched)
		}
	}
	tw.Flush()
	for _, r := range rep.Results {
		for _, n := range r.Notes() {
			fmt.Fprintf(w, "Note: %s\n", terminalSafe(n))
		}
	}
}

// pairedTotal is how many samples paired with the baseline, over all results.
func pairedTotal(rep *compare.Report) (n int64) {
	for _, r := range rep.Results {
		n += r.Paired
	}
	return n
}

// printVerdict says whether the run met its gate, and which rules it missed.
func printVerdict(w io.Writer, v *compare.Verdict) {
	if v.Passed {
		fmt.Fprintln(w, "Gate: passed")
		return
	}
	if v.Incomplete != "" {
		fmt.Fprintf(w, "Gate: no verdict: the run is incomplete (%s)\n", v.Incomplete)
		return
	}
	fmt.Fprintf(w, "Gate: FAILED (%d rule violation(s)):\n", len(v.Violations))
	for _, line := range v.Violations {
		fmt.Fprintf(w, "  - %s\n", terminalSafe(line))
	}
}
