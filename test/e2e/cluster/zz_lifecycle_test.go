//go:build e2e

// The tests of this file run last (go test runs files in name order): they look
// at what every earlier test left, then upgrade and uninstall the chart.
package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecretsNeverLeak: the API key of every Secret the tests made appears in no
// Evaluation, ConfigMap, Job, pod spec, event, pod log or component log.
func TestSecretsNeverLeak(t *testing.T) {
	places := map[string]string{}
	places["objects"] = mustKubectl(t, "get", "evaluations,configmaps,jobs,pods,deployments,roles,serviceaccounts", "-A", "-o", "yaml")
	places["events"] = mustKubectl(t, "get", "events", "-A", "-o", "yaml")
	pods, err := allPods()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		out, err := kubectl("logs", "-n", p[0], p[1], "--all-containers", "--ignore-errors")
		if err != nil {
			t.Logf("logs of %s/%s: %v", p[0], p[1], err)
		}
		places["logs of pod "+p[0]+"/"+p[1]] = out
	}
	if clusterDir != "" {
		logs, _ := filepath.Glob(filepath.Join(clusterDir, "logs", "*.log"))
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				t.Fatal(err)
			}
			places["component log "+filepath.Base(l)] = string(b)
		}
	}
	if n := len(pods); n < 10 {
		t.Fatalf("only %d pods to read logs from: the earlier tests should have left their runner pods", n)
	}
	for where, text := range places {
		if strings.Contains(text, canary) {
			t.Errorf("the API key appears in %s", where)
		}
		if strings.Contains(text, storeSecretKey) {
			t.Errorf("the results store's secret key appears in %s", where)
		}
	}
	// The check itself works: the key is where it belongs.
	if s := mustKubectl(t, "get", "secret", "-n", "e2e-samples", "openai", "-o", "jsonpath={.data.api-key}"); s == "" {
		t.Error("the Secret openai has no api-key")
	}
	t.Logf("Searched %d places for the API key", len(places))
}

// TestRunnerRBAC: a runner's ServiceAccount reads its own Evaluation's
// ConfigMaps and updates its shards' own, nothing else: no create, no other
// ConfigMap, no Secret, no other Evaluation.
func TestRunnerRBAC(t *testing.T) {
	const ns = "e2e-samples"
	sa := "system:serviceaccount:" + ns + ":openai-arithmetic-runner"
	can := func(args ...string) bool {
		out, _ := kubectl(append([]string{"auth", "can-i", "--as", sa, "-n", ns}, args...)...)
		return strings.TrimSpace(out) == "yes"
	}
	if _, err := kubectl("get", "evaluation", "-n", ns, "openai-arithmetic"); err != nil {
		t.Fatalf("this test reads the runner of TestSamples' openai-arithmetic; run it with TestSamples: %v", err)
	}
	run := getEvaluation(t, ns, "openai-arithmetic").Status.Run
	cases := []struct {
		args []string
		want bool
	}{
		{[]string{"get", "evaluations.proctor.dev/openai-arithmetic"}, true},
		{[]string{"get", "configmaps/openai-arithmetic-budget"}, true},
		{[]string{"get", "configmaps/openai-arithmetic-" + run + "-plan"}, true},
		{[]string{"update", "configmaps/openai-arithmetic-" + run + "-plan"}, false},   // planned by the controller
		{[]string{"update", "configmaps/openai-arithmetic-" + run + "-small-0"}, true}, // its shard's head
		// No create: a runner could otherwise make objects under the names of
		// another Evaluation's run.
		{[]string{"create", "configmaps"}, false},
		{[]string{"create", "configmaps/openai-arithmetic-results"}, false},
		{[]string{"update", "configmaps/openai-arithmetic-results"}, false},
		{[]string{"get", "evaluations.proctor.dev/claude-tools"}, false},
		{[]string{"list", "evaluations.proctor.dev"}, false},
		{[]string{"get", "configmaps/claude-tools-budget"}, false},
		{[]string{"get", "configmaps/arithmetic-qa"}, false}, // another Evaluation's dataset
		{[]string{"get", "configmaps/kube-root-ca.crt"}, false},
		{[]string{"list", "configmaps"}, false},
		{[]string{"watch", "configmaps"}, false},
		{[]string{"watch", "configmaps/openai-arithmetic-budget"}, true}, // it follows its budget
		{[]string{"watch", "configmaps/openai-arithmetic-" + run + "-plan"}, false},
		{[]string{"delete", "configmaps/openai-arithmetic-budget"}, false},
		{[]string{"get", "secrets/openai"}, false},
		{[]string{"list", "secrets"}, false},
		{[]string{"create", "pods"}, false},
		{[]string{"get", "configmaps/openai-arithmetic-budget", "-n", "default"}, false},
	}
	for _, tc := range cases {
		if got := can(tc.args...); got != tc.want {
			t.Errorf("kubectl auth can-i %s --as %s: %v, want %v", strings.Join(tc.args, " "), sa, got, tc.want)
		}
	}
}

// TestHelmUpgradeAndUninstall: helm upgrade with changed values (log level, the
// namespaces to watch) rolls the manager, which then runs Evaluations in the
// watched namespace only; helm uninstall removes everything the chart made, and
// deleting the kept CRD and the namespaces leaves nothing of Proctor.
func TestHelmUpgradeAndUninstall(t *testing.T) {
	chart := filepath.Join(repo, "charts", "proctor")
	// The chart's Roles go into the watched namespaces, which must exist first.
	ns := namespace(t, "e2e-upgrade")
	other := namespace(t, "e2e-unwatched")
	if _, err := run(3*time.Minute, helmBin, "upgrade", release, chart, "-n", releaseNamespace, "--reuse-values",
		"--set", "logLevel=debug", "--set", "watchNamespaces={"+ns+"}", "--wait", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	deploy := release + "-controller-manager"
	args := mustKubectl(t, "get", "deployment", "-n", releaseNamespace, deploy, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	for _, want := range []string{"--zap-log-level=debug", "--watch-namespaces=" + ns} {
		if !strings.Contains(args, want) {
			t.Errorf("after helm upgrade the manager's args are %s; want %s", args, want)
		}
	}
	mustKubectl(t, "-n", releaseNamespace, "rollout", "status", "deployment/"+deploy, "--timeout=2m")
	if rev := mustKubectl(t, "get", "deployment", "-n", releaseNamespace, deploy, "-o", "jsonpath={.metadata.annotations.deployment\\.kubernetes\\.io/revision}"); rev == "1" {
		t.Error("helm upgrade did not roll the manager's pods")
	}
	// Its permissions are now a Role in the watched namespace; its ClusterRole
	// keeps only the rules on ModelQuotas, which are cluster-scoped.
	resources := mustKubectl(t, "get", "clusterrole", release+"-manager-role", "-o", "jsonpath={.rules[*].resources[*]}")
	for _, r := range strings.Fields(resources) {
		if !strings.HasPrefix(r, "modelquotas") {
			t.Errorf("with watchNamespaces the manager's ClusterRole still grants %s cluster-wide (all: %s)", r, resources)
		}
	}
	if out := mustKubectl(t, "get", "roles", "-n", ns, "-l", "app.kubernetes.io/instance="+release, "-o", "name"); !strings.Contains(out, "manager") {
		t.Errorf("with watchNamespaces the manager has no Role in %s: %q", ns, out)
	}

	// The upgraded manager runs Evaluations in the watched namespace, and leaves
	// the others alone.
	eval := `apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: after-upgrade}
spec:
  datasets: [{name: d, source: {inline: [{id: a, input: "What is 6*7?", expected: "42"}]}}]
  models:
  - {name: m, provider: openai, model: fake, baseURL: "http://fakellm.proctor-system.svc:8080/v1", apiKey: {env: K, secretKeyRef: {name: openai, key: api-key}}}
  scoring: [{type: exact_match, normalize: [trim]}]
`
	applyYAML(t, ns, eval)
	applyYAML(t, other, eval)
	if got := watchColumns(t, ns, 2*time.Minute, "after-upgrade")["after-upgrade"]; got != [3]string{"Succeeded", "1/1", "1.0000"} {
		t.Errorf("after the upgrade: %v", got)
	}
	if ev := getEvaluation(t, other, "after-upgrade"); ev.Status.Phase != "" {
		t.Errorf("an Evaluation in the unwatched namespace %s was run: phase %q", other, ev.Status.Phase)
	}

	start := time.Now()
	if _, err := run(3*time.Minute, helmBin, "uninstall", release, "-n", releaseNamespace, "--wait", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	record("helm uninstall --wait", time.Since(start))
	selector := "app.kubernetes.io/instance=" + release
	left := func() string {
		out, _ := kubectl("get", "deployments,services,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,pods",
			"-A", "-l", selector, "-o", "name")
		return strings.TrimSpace(out)
	}
	eventually(t, time.Minute, time.Second, "the chart's objects gone", func() error {
		if l := left(); l != "" {
			return fmt.Errorf("left: %s", l)
		}
		return nil
	})
	// The CRDs stay (crds.keep, so an uninstall does not delete every Evaluation).
	crds := []string{"evaluations.proctor.dev", "modelendpoints.proctor.dev", "modelquotas.proctor.dev"}
	for _, crd := range crds {
		if _, err := kubectl("get", "crd", crd); err != nil {
			t.Errorf("the CRD %s was deleted by helm uninstall; the chart keeps it: %v", crd, err)
		}
	}

	// Deleting them, the fake server and the test namespaces leaves nothing
	// behind (a ModelEndpoint's budget goes with it).
	mustKubectl(t, "delete", "-k", filepath.Join(repo, "config", "fakellm"), "--wait=true", "--timeout=2m")
	mustKubectl(t, "delete", "-k", filepath.Join(repo, "config", "seaweedfs"), "--wait=true", "--timeout=2m")
	mustKubectl(t, append([]string{"delete", "crd"}, append(crds, "--wait=true", "--timeout=2m")...)...)
	// One command, so that the namespaces go together rather than one after another.
	namespaces := append([]string{"e2e-samples", "e2e-ratelimit", "e2e-agent", "e2e-restarts", "e2e-invalid", "e2e-upgrade", "e2e-unwatched",
		"e2e-endpoint", "e2e-quota-a", "e2e-quota-b"}, failureNamespaces...)
	if _, err := run(4*time.Minute, kubectlBin, append([]string{"delete", "namespace", "--ignore-not-found", "--wait=true", "--timeout=3m"}, namespaces...)...); err != nil {
		t.Error(err)
	}
	// What the Evaluations owned in the namespaces that stay goes with them, as
	// the garbage collector gets to it.
	eventually(t, 2*time.Minute, time.Second, "no object of Proctor left", func() error {
		out, err := kubectl("get", "jobs,pods,configmaps,roles,rolebindings,serviceaccounts", "-A", "-l", "app.kubernetes.io/managed-by=proctor", "-o", "name")
		if err == nil && strings.TrimSpace(out) != "" {
			err = fmt.Errorf("objects of Proctor left:\n%s", out)
		}
		return err
	})
	if out := mustKubectl(t, "get", "all", "-n", releaseNamespace, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("left in %s:\n%s", releaseNamespace, out)
	}
}
