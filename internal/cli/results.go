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
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/runner/results"
)

// newResultsCommand fetches an Evaluation's results from a cluster into the same
// files a local run writes.
func newResultsCommand(s streams) *cobra.Command {
	var namespace, output string
	var overwrite bool
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
			return fetchResults(cmd.Context(), s, args[0], namespace, output, overwrite)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "the Evaluation's namespace (default: your kubeconfig's)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output directory (default results/NAME)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace results in DIR that are not this Evaluation's (a local run's, another Evaluation's)")
	return cmd
}

// fetchedFrom is the file in a directory proctor results wrote saying which
// Evaluation its results are: fetching the same one again refreshes them,
// anything else is refused unless told to.
const fetchedFrom = ".proctor-results.json"

type fetchedSource struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// checkFetchDir refuses to replace results in dir that are not those of the
// Evaluation namespace/name fetched earlier.
func checkFetchDir(dir, namespace, name string) error {
	if _, err := os.Stat(filepath.Join(dir, results.CheckpointDir)); err == nil {
		return fmt.Errorf("%s holds a local run's results (its %s/): use another output directory (-o), or --overwrite to replace them", dir, results.CheckpointDir)
	}
	exists := false
	for _, f := range []string{results.ResultsFile, results.SummaryFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			exists = true
		}
	}
	if !exists {
		return nil
	}
	var was fetchedSource
	if b, err := os.ReadFile(filepath.Join(dir, fetchedFrom)); err == nil && json.Unmarshal(b, &was) == nil {
		if was == (fetchedSource{Namespace: namespace, Name: name}) {
			return nil
		}
		return fmt.Errorf("%s holds the results of Evaluation %s/%s: use another output directory (-o), or --overwrite to replace them", dir, was.Namespace, was.Name)
	}
	return fmt.Errorf("%s already has results not fetched from Evaluation %s/%s: use another output directory (-o), or --overwrite to replace them", dir, namespace, name)
}

func fetchResults(ctx context.Context, s streams, name, namespace, output string, overwrite bool) error {
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
	if err := kube.GetConfigMap(ctx, c, ev, ev.Status.ResultsConfigMap, &cm); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if output == "" {
		output = filepath.Join("results", name)
	}
	if !overwrite {
		if err := checkFetchDir(output, namespace, name); err != nil {
			return invalid(err)
		}
	}
	if err := os.MkdirAll(output, 0o755); err != nil {
		return err
	}
	// Both files are written aside and renamed into place: a failure part way
	// leaves what was there.
	f, err := os.CreateTemp(output, ".results-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	w := bufio.NewWriter(f)
	foreign := func(fe *cluster.ForeignError) { fmt.Fprintf(s.errOut, "proctor: skipped %v\n", fe) }
	if err := kube.ResultRecords(ctx, c, ev, &cm, foreign, func(line []byte) error {
		if _, err := w.Write(line); err != nil {
			return err
		}
		return w.WriteByte('\n')
	}); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(w.Flush(), f.Chmod(0o644), f.Close()); err != nil {
		return err
	}
	src, _ := json.Marshal(fetchedSource{Namespace: namespace, Name: name})
	if err := os.WriteFile(filepath.Join(output, fetchedFrom), append(src, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(output, results.ResultsFile)); err != nil {
		return err
	}
	summary := []byte(cm.Data[cluster.ResultsKeySummary])
	if err := results.WriteFileAtomic(filepath.Join(output, results.SummaryFile), summary); err != nil {
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
