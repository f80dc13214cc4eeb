package cli

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/objstore"
	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/runner/results/objects"
)

// newResultsCommand fetches an Evaluation's results from a cluster into the same
// files a local run writes.
func newResultsCommand(s streams) *cobra.Command {
	var namespace, output string
	var overwrite bool
	cmd := &cobra.Command{
		Use:   "results NAME|s3://BUCKET/PREFIX [-n NAMESPACE] [-o DIR]",
		Short: "Fetch an Evaluation's results from the cluster or an object store into DIR/results.jsonl and DIR/summary.json",
		Long: `Fetch a finished Evaluation's records and summary from its NAME-results ConfigMap (and the
ConfigMaps it lists, when the records did not fit in one) into DIR/results.jsonl, one record per
sample per model in sample order, and DIR/summary.json, exactly as proctor run writes them.
The cluster is the one of your kubeconfig (KUBECONFIG, or ~/.kube/config).

With s3://BUCKET/PREFIX, the results are read from the latest commit of that location in an
S3-compatible object store (written by proctor run -o s3://..., or by the controller when the
cluster has a results store), reached as the standard AWS environment says (AWS_ENDPOINT_URL_S3,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION).`,
		Example: `  proctor results arithmetic -n evals -o out/arithmetic
  proctor results s3://evals/runs/arithmetic -o out/arithmetic`,
		Args: cobra.ExactArgs(1),
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
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Location is the s3:// location fetched, for one.
	Location string `json:"location,omitempty"`
}

func (f fetchedSource) String() string {
	if f.Location != "" {
		return "location " + f.Location
	}
	return "Evaluation " + f.Namespace + "/" + f.Name
}

// checkFetchDir refuses to replace results in dir that are not those of the
// Evaluation namespace/name fetched earlier.
func checkFetchDir(dir string, src fetchedSource) error {
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
		if was == src {
			return nil
		}
		return fmt.Errorf("%s holds the results of %s: use another output directory (-o), or --overwrite to replace them", dir, was)
	}
	return fmt.Errorf("%s already has results not fetched from %s: use another output directory (-o), or --overwrite to replace them", dir, src)
}

func fetchResults(ctx context.Context, s streams, name, namespace, output string, overwrite bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if objstore.IsURL(name) {
		return fetchLocation(ctx, s, name, output, overwrite)
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
		if err := checkFetchDir(output, fetchedSource{Namespace: namespace, Name: name}); err != nil {
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
	if err := kube.ResultRecords(ctx, c, ev, &cm, openLocation, foreign, func(line []byte) error {
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

// fetchLocation exports the latest commit of an s3:// location into output.
func fetchLocation(ctx context.Context, s streams, location, output string, overwrite bool) error {
	store, err := objstore.OpenURL(ctx, location)
	if err != nil {
		return invalid(err)
	}
	src := fetchedSource{Location: store.Location().String()}
	if output == "" {
		output = filepath.Join("results", path.Base("/"+cmp.Or(store.Location().Prefix, store.Location().Bucket)))
	}
	if !overwrite {
		if err := checkFetchDir(output, src); err != nil {
			return invalid(err)
		}
	}
	res, err := objects.ReadResults(ctx, store, src.Location)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	if err := res.Export(ctx, output); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	b, _ := json.Marshal(src)
	if err := os.WriteFile(filepath.Join(output, fetchedFrom), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(s.errOut, "Results: %s, %s (generation %d of %s)\n", filepath.Join(output, results.ResultsFile),
		filepath.Join(output, results.SummaryFile), res.Manifest.Generation, src.Location)
	return nil
}
