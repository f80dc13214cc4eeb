package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/results"
)

// newResultsCommand fetches an Evaluation's results from a cluster into the same
// files a local run writes.
func newResultsCommand(s streams) *cobra.Command {
	var namespace, output string
	cmd := &cobra.Command{
		Use:   "results NAME [-n NAMESPACE] [-o DIR]",
		Short: "Fetch an Evaluation's results from the cluster into DIR/results.jsonl and DIR/summary.json",
		Long: `Fetch a finished Evaluation's records and summary from its NAME-results ConfigMap (and the
ConfigMaps it lists, when the records did not fit in one) into DIR/results.jsonl, one record per
sample per model in sample order, and DIR/summary.json, exactly as proctor run writes them.
The cluster is the one of your kubeconfig (KUBECONFIG, or ~/.kube/config).`,
		Example: `  proctor results arithmetic -n evals -o out/arithmetic`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchResults(cmd.Context(), s, args[0], namespace, output)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "the Evaluation's namespace (default: your kubeconfig's)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output directory (default results/NAME)")
	return cmd
}

func fetchResults(ctx context.Context, s streams, name, namespace, output string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c, namespace, err := clusterClient(namespace)
	if err != nil {
		return err
	}
	ev := &v1alpha1.Evaluation{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, ev); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if ev.Status.ResultsConfigMap == "" {
		progress := ""
		if ev.Status.Progress != nil {
			progress = ", " + ev.Status.Progress.Text + " samples done"
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("evaluation %s has no results yet (phase %s%s)", name, ev.Status.Phase, progress)}
	}
	var cm corev1.ConfigMap
	if err := cluster.GetConfigMap(ctx, c, ev, ev.Status.ResultsConfigMap, &cm); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if output == "" {
		output = filepath.Join("results", name)
	}
	if err := os.MkdirAll(output, 0o755); err != nil {
		return err
	}
	summary := []byte(cm.Data[cluster.ResultsKeySummary])
	if err := os.WriteFile(filepath.Join(output, results.SummaryFile), summary, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(output, results.ResultsFile))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	foreign := func(fe *cluster.ForeignError) { fmt.Fprintf(s.errOut, "proctor: skipped %v\n", fe) }
	if err := cluster.ResultRecords(ctx, c, ev, &cm, foreign, func(line []byte) error {
		if _, err := w.Write(line); err != nil {
			return err
		}
		return w.WriteByte('\n')
	}); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return err
	}
	var sum struct{ Results []results.Summary }
	if json.Unmarshal(summary, &sum) == nil {
		var metrics []string
		for _, sc := range ev.Spec.Scoring {
			metrics = append(metrics, sc.MetricName())
		}
		printSummary(s.out, sum.Results, metrics)
	}
	fmt.Fprintf(s.errOut, "Results: %s, %s\n", filepath.Join(output, results.ResultsFile), filepath.Join(output, results.SummaryFile))
	return nil
}
