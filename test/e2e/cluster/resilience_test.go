//go:build e2e

package cluster_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKilledPods deletes a runner pod in the middle of its shard, then the
// manager's pod in the middle of the run: the Evaluation still completes with
// every sample exactly once, and no Job is created twice.
func TestKilledPods(t *testing.T) {
	ns := namespace(t, "e2e-restarts")
	fakeServers(t, ns, "llm", []string{})
	const n = 120
	var samples strings.Builder
	for i := 1; i <= n; i++ {
		// Each answer takes 400 ms: two shards of 60 at 2 at a time take ~12 s each.
		fmt.Fprintf(&samples, "      - {id: s%d, input: \"SLEEP: 400ms\\nWhat is %d+1?\", expected: \"%d\"}\n", i, i, i+1)
	}
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: restarts}
spec:
  datasets:
  - name: slow
    source:
      inline:
%s  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: http://llm.e2e-restarts.svc:8081/v1
    apiKey: {env: OPENAI_API_KEY, secretKeyRef: {name: openai, key: api-key}}
  prompt: {system: "Answer with a number only."}
  scoring: [{type: exact_match, normalize: [trim]}]
  concurrency: 2
  shardSize: 60
  parallelism: 2
`, samples.String()))

	progress := func() int {
		rows, err := columns(ns)
		if err != nil {
			t.Fatal(err)
		}
		if m := progressText.FindStringSubmatch(rows["restarts"][1]); m != nil {
			return atoi(m[1])
		}
		return 0
	}
	eventually(t, 2*time.Minute, 200*time.Millisecond, "10 samples done", func() error {
		if progress() < 10 {
			return errNotYet
		}
		return nil
	})
	pods := strings.Fields(mustKubectl(t, "get", "pods", "-n", ns, "-l", "proctor.dev/component=runner",
		"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) == 0 {
		t.Fatal("no runner pod is running")
	}
	// A running runner serves its metrics on its port "metrics" (9464),
	// here through the API server's proxy to the pod.
	metrics := mustKubectl(t, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:9464/proxy/metrics", ns, pods[0]))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^proctor_runner_requests_total\{endpoint="",model="small",outcome="ok"\} [1-9]`),
		regexp.MustCompile(`(?m)^proctor_runner_samples_total\{dataset="slow",kind="",model="small",outcome="ok"\} [1-9]`),
		regexp.MustCompile(`(?m)^proctor_runner_requests_in_flight\{endpoint="",model="small"\} [0-2]$`),
	} {
		if !want.MatchString(metrics) {
			t.Errorf("runner pod %s's metrics have no line matching %s:\n%s", pods[0], want, metrics)
		}
	}
	mustKubectl(t, "delete", "pod", "-n", ns, pods[0], "--wait=false")
	t.Logf("Deleted runner pod %s at %d/%d", pods[0], progress(), n)

	eventually(t, 2*time.Minute, 200*time.Millisecond, "more samples done", func() error {
		if progress() < 40 {
			return errNotYet
		}
		return nil
	})
	manager := mustKubectl(t, "get", "pods", "-n", releaseNamespace, "-l", "app.kubernetes.io/name=proctor",
		"-o", "jsonpath={.items[0].metadata.name}")
	mustKubectl(t, "delete", "pod", "-n", releaseNamespace, manager, "--wait=false")
	t.Logf("Deleted manager pod %s at %d/%d", manager, progress(), n)

	final := watchColumns(t, ns, 5*time.Minute, "restarts")
	if got, want := final["restarts"], [3]string{"Succeeded", "120/120", "1.0000"}; got != want {
		t.Errorf("PHASE PROGRESS SCORE = %v, want %v", got, want)
	}
	recs, _ := fetchRecords(t, ns, "restarts")
	exactlyOnce(t, recs, n)
	for _, r := range recs {
		if r.Error != "" {
			t.Errorf("sample %s: error %q", r.ID, r.Error)
		}
	}
	jobs := strings.Fields(mustKubectl(t, "get", "jobs", "-n", ns, "-l", "proctor.dev/evaluation=restarts,proctor.dev/component=runner",
		"-o", "jsonpath={.items[*].metadata.name}"))
	if len(jobs) != 1 {
		t.Errorf("runner Jobs %v, want exactly one (one Indexed Job per model)", jobs)
	}
	// The deleted pod was replaced by another for its shard.
	all := strings.Fields(mustKubectl(t, "get", "pods", "-n", ns, "-l", "proctor.dev/component=runner", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(all) != 2 || slices.Contains(all, pods[0]) {
		t.Errorf("runner pods %v: want the 2 shards' pods, %s replaced", all, pods[0])
	}
	// kubectl delete pod is a graceful stop: the runner finishes the samples in
	// flight and saves them, so not one answer is asked for twice.
	if s := stats(t, ns, "llm", 8081); s["requests"] != n {
		t.Errorf("the model server answered %v requests for %d samples: the restarts repeated or lost some", s["requests"], n)
	}
	if _, err := kubectl("-n", releaseNamespace, "rollout", "status", "deployment/"+release+"-controller-manager", "--timeout=1m"); err != nil {
		t.Error(err)
	}
}

// TestInvalidEvaluation: kubectl apply refuses a wrong Evaluation with a message
// naming the field.
func TestInvalidEvaluation(t *testing.T) {
	ns := namespace(t, "e2e-invalid")
	cases := []struct {
		name, spec string
		want       []string
	}{
		{"no models", `datasets: [{name: d, source: {inline: [{input: x}]}}]
  models: []
  scoring: [{type: exact_match}]`, []string{"spec.models"}},
		{"concurrency out of range", `datasets: [{name: d, source: {inline: [{input: x}]}}]
  models: [{name: m, provider: openai, model: x}]
  scoring: [{type: exact_match}]
  concurrency: 0`, []string{"spec.concurrency", "0"}},
		{"unknown provider", `datasets: [{name: d, source: {inline: [{input: x}]}}]
  models: [{name: m, provider: gemini, model: x}]
  scoring: [{type: exact_match}]`, []string{"spec.models[0].provider", "Unsupported value", `"gemini"`}},
		{"judge naming no model", `datasets: [{name: d, source: {inline: [{input: x}]}}]
  models: [{name: m, provider: openai, model: x}]
  scoring: [{type: judge, judge: {model: nobody}}]`, []string{"judge"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			manifest := fmt.Sprintf("apiVersion: proctor.dev/v1alpha1\nkind: Evaluation\nmetadata: {name: bad}\nspec:\n  %s\n", tc.spec)
			_, err := runInput(time.Minute, manifest, kubectlBin, "apply", "-n", ns, "-f", "-")
			if err == nil {
				t.Fatal("kubectl apply accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("kubectl apply said %q; want it to mention %q", err, w)
				}
			}
		})
	}
	if out := mustKubectl(t, "get", "evaluations", "-n", ns, "-o", "name"); out != "" {
		t.Errorf("refused Evaluations exist: %s", out)
	}
}

// TestLargeInlineDatasetsWarn: the chart's admission policy makes kubectl
// apply warn about an Evaluation holding more than 1,000 samples inline, and
// point to a configMap source; it refuses nothing (a server-side dry run here).
func TestLargeInlineDatasetsWarn(t *testing.T) {
	ns := namespace(t, "e2e-warn")
	var samples strings.Builder
	for i := range 1001 {
		fmt.Fprintf(&samples, "      - {id: s%d, input: \"What is %d+1?\", expected: \"%d\"}\n", i, i, i+1)
	}
	manifest := fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: large}
spec:
  datasets:
  - name: d
    source:
      inline:
%s  models: [{name: m, provider: openai, model: x}]
  scoring: [{type: exact_match}]
`, samples.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, "apply", "-n", ns, "--dry-run=server", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply refused it: %v: %s", err, out)
	}
	// The API server says "Warning: Validation failed for ValidatingAdmissionPolicy
	// 'NAME' with binding 'NAME': " before the policy's message.
	if want := "spec.datasets hold 1001 samples inline"; !strings.HasPrefix(string(out), "Warning: ") ||
		!strings.Contains(string(out), want) || !strings.Contains(string(out), "configMap") {
		t.Errorf("kubectl apply said %q; want a warning %q naming a configMap source", out, want)
	}
}
