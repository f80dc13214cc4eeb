//go:build e2e

package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// testDatasetEditedMidRun (TestRunsSideBySide): the ConfigMap a run reads is replaced while the run
// goes on (other ids, wrong answers, more rows). The run reads the version it
// started with, whole: its samples, each once, all right, and nothing of the
// new version (it once mixed 50 old and 70 new samples, then failed with EOF).
func testDatasetEditedMidRun(t *testing.T) {
	ns := namespace(t, "e2e-dataset-edit")
	const n = 24
	mustKubectl(t, "-n", ns, "create", "configmap", "qa", "--from-literal=data.jsonl="+fakellm.ArithmeticJSONL("old", n))
	applyYAML(t, ns, `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: edited}
spec:
  datasets:
  - name: qa
    source: {configMap: {name: qa, key: data.jsonl}}
  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: http://fakellm.proctor-system.svc:8080/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
    rateLimit: {requestsPerMinute: 60}
  scoring: [{type: exact_match, normalize: [trim]}]
  concurrency: 2
  shardSize: 8
  parallelism: 1
`)
	eventually(t, 2*time.Minute, time.Second, "a few samples done", func() error {
		ev := getEvaluation(t, ns, "edited")
		if ev.Status.Progress == nil || ev.Status.Progress.Completed < 3 {
			return fmt.Errorf("progress %+v", ev.Status.Progress)
		}
		return nil
	})
	// The new version: other ids, every expected answer wrong, more rows.
	var next strings.Builder
	for i := range n + 10 {
		fmt.Fprintf(&next, `{"id":"new-%d","input":"What is %d+1?","expected":"wrong"}`+"\n", i, i)
	}
	if out, err := runInput(time.Minute, mustKubectl(t, "-n", ns, "create", "configmap", "qa",
		"--from-literal=data.jsonl="+next.String(), "--dry-run=client", "-o", "yaml"), kubectlBin, "-n", ns, "replace", "-f", "-"); err != nil {
		t.Fatalf("replacing the ConfigMap: %v: %s", err, out)
	}
	final := watchColumns(t, ns, 3*time.Minute, "edited")
	if got, want := final["edited"], [3]string{"Succeeded", fmt.Sprintf("%d/%d", n, n), "1.0000"}; got != want {
		t.Errorf("PHASE PROGRESS SCORE = %v, want %v (message %q)", got, want, getEvaluation(t, ns, "edited").Status.Message)
	}
	recs, _ := fetchRecords(t, ns, "edited")
	exactlyOnce(t, recs, n)
	for _, r := range recs {
		if !strings.HasPrefix(r.ID, "old-") || r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("record %s: output %q, error %q, scores %v; want only the version the run started with", r.ID, r.Output, r.Error, r.Scores)
		}
	}
}

// TestTemplateErrorFailsAtPlanning: an agent template naming a field agents do
// not get ({{ .Expected }}) passes admission but fails the run at planning,
// naming the field, before any runner Job starts: for inline data (checked by
// the controller) and for url data (checked by the planner pod). It used to fail
// the other model's shards at run time with exit 2.
func TestTemplateErrorFailsAtPlanning(t *testing.T) {
	ns := namespace(t, "e2e-template-error")
	for name, source := range map[string]string{
		"inline": `{inline: [{id: q1, input: "What is 1+1?", expected: "2"}]}`,
		"remote": `{url: "http://fakellm.proctor-system.svc:8080/datasets/arithmetic.jsonl?n=3&prefix=web"}`,
	} {
		applyYAML(t, ns, fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: %s}
spec:
  datasets:
  - name: qa
    source: %s
  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: http://fakellm.proctor-system.svc:8080/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
  - name: bot
    provider: agent
    agent:
      image: busybox:1.35.0
      command: [echo, "{{ .Expected }}"]
  scoring: [{type: exact_match}]
`, name, source))
	}
	for _, name := range []string{"inline", "remote"} {
		eventually(t, 2*time.Minute, time.Second, name+" to fail at planning", func() error {
			ev := getEvaluation(t, ns, name)
			if ev.Status.Phase != "Failed" {
				return fmt.Errorf("phase %q, message %q", ev.Status.Phase, ev.Status.Message)
			}
			return nil
		})
		ev := getEvaluation(t, ns, name)
		if ev.Status.Reason != "PlanningFailed" || !strings.Contains(ev.Status.Message, "spec.models[1].agent") || !strings.Contains(ev.Status.Message, "Expected") {
			t.Errorf("%s: reason %q, message %q; want PlanningFailed naming spec.models[1].agent and .Expected", name, ev.Status.Reason, ev.Status.Message)
		}
	}
	if jobs := mustKubectl(t, "-n", ns, "get", "jobs", "-l", "proctor.dev/component=runner", "-o", "name"); strings.TrimSpace(jobs) != "" {
		t.Errorf("runner Jobs were created for runs that cannot work:\n%s", jobs)
	}
}
