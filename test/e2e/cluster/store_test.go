//go:build e2e

package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// testResultsStoreInACluster (TestRunsSideBySide): with the chart's results
// store (config/seaweedfs), a run's records are committed there when it ends;
// they are read from outside the cluster with proctor results, stay after
// the Evaluation is deleted, and a later run is compared with them.
func testResultsStoreInACluster(t *testing.T) {
	ns := namespace(t, "e2e-store")
	const n = 20
	model := `    provider: openai
    model: fake-model
    baseURL: http://fakellm.proctor-system.svc:8080/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
`
	start := time.Now()
	// Its runners go as soon as it is committed (the chart keeps them 1h).
	applyYAML(t, ns, additionsEvaluation("stored", n, model, "  shardSize: 10\n  runner: {keepFor: 0s}\n"))
	mustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "evaluation/stored", "--timeout=5m")
	ev := getEvaluation(t, ns, "stored")
	loc := ev.Status.ResultsLocation
	if want := fmt.Sprintf("%s/%s/stored/", storeURL, ns); !strings.HasPrefix(loc, want) || !strings.HasSuffix(loc, "-"+ev.Status.Run) {
		t.Fatalf("status.resultsLocation = %q, want %sSTARTED-%s", loc, want, ev.Status.Run)
	}
	if got := mustKubectl(t, "get", "configmap", "-n", ns, "stored-results", "-o", `jsonpath={.data.location}`); got != loc {
		t.Errorf("stored-results' location is %q, status says %q", got, loc)
	}
	record("a run committed to the results store", time.Since(start))

	// From the host, through the Service's cluster IP, as a user would with
	// the store's own address.
	ip := strings.TrimSpace(mustKubectl(t, "get", "service", "-n", releaseNamespace, "seaweedfs", "-o", "jsonpath={.spec.clusterIP}"))
	env := append(os.Environ(), "AWS_ENDPOINT_URL_S3=http://"+ip+":8333", "AWS_ACCESS_KEY_ID=proctor",
		"AWS_SECRET_ACCESS_KEY="+storeSecretKey, "AWS_REGION=us-east-1", "HOME="+t.TempDir())
	proctorWith := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, proctorBin, args...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	dir := filepath.Join(t.TempDir(), "stored")
	if out, err := proctorWith("results", loc, "-o", dir); err != nil {
		t.Fatalf("proctor results %s: %v\n%s", loc, err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(data), "\n"); lines != n {
		t.Errorf("the stored run has %d records, want %d:\n%s", lines, n, data)
	}

	// By the Evaluation's name too: stored-results holds no records, but
	// names the location, which the CLI reads with the environment's
	// credentials.
	byName := filepath.Join(t.TempDir(), "by-name")
	if out, err := proctorWith("results", "-n", ns, "stored", "-o", byName); err != nil {
		t.Fatalf("proctor results stored: %v\n%s", err, out)
	}
	if got, err := os.ReadFile(filepath.Join(byName, "results.jsonl")); err != nil || string(got) != string(data) {
		t.Errorf("proctor results stored wrote %d bytes (%v), want the location's %d", len(got), err, len(data))
	}
	if got := mustKubectl(t, "get", "configmap", "-n", ns, "-l", "proctor.dev/component=records", "-o", "name"); strings.TrimSpace(got) != "" {
		t.Errorf("the run made record ConfigMaps, with a results store: %s", got)
	}

	// Committed, the run needs none of its Jobs, their pods (the garbage
	// collector deletes them) or its heads: with keepFor 0s, they go at once.
	eventually(t, 2*time.Minute, 2*time.Second, "the committed run's Jobs, pods and heads to be deleted", func() error {
		run := "proctor.dev/run=" + ev.Status.Run
		left := mustKubectl(t, "get", "jobs,pods", "-n", ns, "-l", run, "-o", "name") +
			mustKubectl(t, "get", "configmaps", "-n", ns, "-l", run+",proctor.dev/component=shard", "-o", "name")
		if strings.TrimSpace(left) != "" {
			return fmt.Errorf("left: %s", strings.Join(strings.Fields(left), ", "))
		}
		return nil
	})

	// The records outlive the Evaluation, and a later run is compared with them.
	mustKubectl(t, "delete", "evaluation", "-n", ns, "stored", "--wait=true", "--timeout=2m")
	if out, err := proctorWith("results", loc, "-o", dir); err != nil {
		t.Fatalf("proctor results %s after the Evaluation was deleted: %v\n%s", loc, err, out)
	}
	applyYAML(t, ns, additionsEvaluation("later", n, model, "  shardSize: 10\n  baseline: {evaluation: stored}\n"))
	mustKubectl(t, "wait", "-n", ns, "--for=condition=Ready", "evaluation/later", "--timeout=5m")
	c := getEvaluation(t, ns, "later").Status.Comparison
	if c == nil || c.Baseline != loc || len(c.Results) != 1 || c.Results[0].Paired != n {
		t.Errorf("later's comparison with the deleted Evaluation's stored run: %+v, want %d samples paired with %s", c, n, loc)
	}

	// proctor view reads an Evaluation through the kubeconfig, and a
	// location of the store with the AWS environment, and compares them.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	view := exec.CommandContext(ctx, proctorBin, "view", "-n", ns, "evaluation/later", loc, "--addr", "127.0.0.1:0")
	view.Env = env
	out, err := view.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var viewErr bytes.Buffer
	view.Stderr = &viewErr
	if err := view.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = view.Process.Signal(os.Interrupt); _ = view.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	m := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+/) `).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("proctor view said %q (%v):\n%s", line, err, viewErr.String())
	}
	var runs []struct {
		Source  string `json:"source"`
		Phase   string `json:"phase"`
		Samples int    `json:"samples"`
	}
	getJSON(t, m[1]+"api/runs", &runs)
	if len(runs) != 2 || !strings.HasPrefix(runs[0].Source, "evaluation/later") || runs[0].Phase != "Succeeded" || runs[0].Samples != n ||
		runs[1].Source != loc || runs[1].Samples != n {
		t.Errorf("proctor view's runs: %+v, want evaluation/later (Succeeded) and %s, %d samples each", runs, loc, n)
	}
	var cmp struct {
		Total int `json:"total"`
		Same  int `json:"same"`
	}
	getJSON(t, m[1]+"api/compare?base=2&cand=1", &cmp)
	if cmp.Total != n || cmp.Same != n {
		t.Errorf("proctor view's comparison: %+v, want %d pairs, none changed", cmp, n)
	}
}

// getJSON decodes what a GET of url answers.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
}
