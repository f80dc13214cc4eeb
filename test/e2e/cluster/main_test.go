//go:build e2e

// Package cluster_test runs Proctor on a real cluster as a user would: the Helm
// chart installed with helm, Evaluations applied with kubectl, results read with
// kubectl and `proctor results`. It needs a cluster (hack/cluster-up.sh) whose
// node has the images of hack/build-images.sh; `make e2e` brings both up, runs
// these tests and tears the cluster down.
//
// Environment: KUBECONFIG (required), KUBECTL, HELM, PROCTOR (binaries; default
// bin/ of the repository), ARTIFACTS (where logs go when a test fails; default
// _artifacts/e2e-<time>), CLUSTER_DIR (the local cluster's directory, for its
// component logs).
package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	release          = "proctor"
	releaseNamespace = "proctor-system"
	// canary is the API key in every Secret the tests create: it must never be
	// seen anywhere but in those Secrets.
	canary = "sk-e2e-canary-7c1f9e04b2d35a68"
)

var (
	repo       string
	kubectlBin string
	helmBin    string
	proctorBin string
	artifacts  string
	clusterDir string

	timingsMu sync.Mutex
	timings   []string
)

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repo = filepath.Join(filepath.Dir(file), "..", "..", "..")
	kubectlBin = envOr("KUBECTL", filepath.Join(repo, "bin", "kube-v1.36.3", "kubectl"))
	helmBin = envOr("HELM", filepath.Join(repo, "bin", "helm"))
	proctorBin = envOr("PROCTOR", filepath.Join(repo, "bin", "proctor"))
	artifacts = envOr("ARTIFACTS", filepath.Join(repo, "_artifacts", "e2e-"+time.Now().Format("20060102-150405")))
	clusterDir = os.Getenv("CLUSTER_DIR")
	if os.Getenv("KUBECONFIG") == "" {
		fmt.Fprintln(os.Stderr, "KUBECONFIG is not set: run these tests with `make e2e`, or against a cluster of yours with the images of `make images` on its nodes")
		os.Exit(2)
	}
	if err := setUp(); err != nil {
		fmt.Fprintln(os.Stderr, "setting up:", err)
		collectArtifacts()
		os.Exit(1)
	}
	code := m.Run()
	writeTimings()
	if code != 0 {
		collectArtifacts()
	}
	os.Exit(code)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// The results store of config/seaweedfs, which the chart is installed with.
const (
	storeURL      = "s3://proctor/runs"
	storeEndpoint = "http://seaweedfs." + releaseNamespace + ".svc:8333"
	// storeSecretKey is the store's secret key (config/seaweedfs): only the
	// manager and the store see it.
	storeSecretKey = "local-results-store-secret-7c41e9"
)

// setUp installs the results store, the chart and the fake model server, as
// the docs tell users.
func setUp() error {
	start := time.Now()
	if _, err := kubectl("get", "namespace", releaseNamespace); err != nil {
		if _, err := kubectl("create", "namespace", releaseNamespace); err != nil {
			return err
		}
	}
	if _, err := kubectl("apply", "-k", filepath.Join(repo, "config", "seaweedfs")); err != nil {
		return err
	}
	// 3 minutes: time for the kubelet to start a store that did not open its
	// port within a minute once again (config/seaweedfs's startupProbe).
	if _, err := run(4*time.Minute, kubectlBin, "-n", releaseNamespace, "rollout", "status", "deployment/seaweedfs", "--timeout=3m"); err != nil {
		return fmt.Errorf("%w\n%s", err, diagnose("app.kubernetes.io/name=seaweedfs"))
	}
	record("the results store (config/seaweedfs) ready", time.Since(start))
	start = time.Now()
	out, err := run(3*time.Minute, helmBin, "upgrade", "--install", release, filepath.Join(repo, "charts", "proctor"),
		"--namespace", releaseNamespace, "--create-namespace", "--wait", "--timeout", "2m",
		"--set", "resultsStore.url="+storeURL, "--set", "resultsStore.endpoint="+storeEndpoint,
		"--set", "resultsStore.credentialsSecret=results-s3")
	if err != nil {
		return err
	}
	record("helm install --wait", time.Since(start))
	if !strings.Contains(out, "REVISION: 1\n") {
		// A cluster kept from an earlier run (KEEP_CLUSTER=1): its images were
		// imported again under the same tags, which no upgrade rolls out.
		if _, err := kubectl("-n", releaseNamespace, "rollout", "restart", "deployment", "-l", "app.kubernetes.io/name=proctor"); err != nil {
			return err
		}
		if _, err := kubectl("-n", releaseNamespace, "rollout", "status", "deployment", "-l", "app.kubernetes.io/name=proctor", "--timeout=2m"); err != nil {
			return err
		}
	}
	if _, err := kubectl("apply", "-k", filepath.Join(repo, "config", "fakellm")); err != nil {
		return err
	}
	if _, err := run(3*time.Minute, kubectlBin, "-n", releaseNamespace, "rollout", "status", "deployment/fakellm", "--timeout=2m"); err != nil {
		return fmt.Errorf("%w\n%s", err, diagnose("app.kubernetes.io/name=fakellm"))
	}
	return nil
}

// diagnose describes the pods matching selector in the release namespace and
// lists its events: CI prints only the output of a failed run, not the
// artifacts, so a failed set-up must say itself why a pod never became ready.
func diagnose(selector string) string {
	var b strings.Builder
	// CI shows the beginning and the end of the output: the pods' events
	// (probes that failed, and why) first, their own logs last.
	for _, args := range [][]string{
		{"-n", releaseNamespace, "get", "events", "--sort-by=.lastTimestamp"},
		{"-n", releaseNamespace, "get", "pods", "-o", "wide"},
		{"-n", releaseNamespace, "describe", "pods", "-l", selector},
		{"get", "nodes", "-o", "wide"},
		{"describe", "nodes"},
	} {
		diagnoseKubectl(&b, args...)
	}
	for _, component := range []string{"kubelet", "containerd"} {
		if clusterDir == "" {
			break
		}
		log, err := os.ReadFile(filepath.Join(clusterDir, "logs", component+".log"))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
		lines = lines[max(0, len(lines)-60):]
		fmt.Fprintf(&b, "$ tail -60 %s.log\n%s\n", component, strings.Join(lines, "\n"))
	}
	logs := diagnoseKubectl(&b, "-n", releaseNamespace, "logs", "-l", selector, "--all-containers", "--tail=60", "--prefix")
	// Last, the lines of those logs that say something went wrong: a
	// banner after them (weed mini's) pushed them out of CI's excerpt.
	var worrying []string
	for _, line := range strings.Split(logs, "\n") {
		if worryingLine.MatchString(line) {
			worrying = append(worrying, line)
		}
	}
	fmt.Fprintf(&b, "$ # the lines of those logs that say fail, error or warn (the last 20)\n%s\n", strings.Join(worrying[max(0, len(worrying)-20):], "\n"))
	return b.String()
}

// worryingLine matches a log line that says something failed: words, or a
// klog/glog warning, error or fatal line (W1130 12:00:00...).
var worryingLine = regexp.MustCompile(`(?i)fail|error|warn|panic|\] [WEF]\d{4} `)

// diagnoseKubectl writes a kubectl command and what it printed to b, and
// returns that.
func diagnoseKubectl(b *strings.Builder, args ...string) string {
	out, err := kubectl(args...)
	fmt.Fprintf(b, "$ kubectl %s\n%s\n", strings.Join(args, " "), out)
	if err != nil {
		fmt.Fprintln(b, err)
	}
	return out
}

// run runs a command and returns its standard output; the error carries its
// standard error.
func run(timeout time.Duration, name string, args ...string) (string, error) {
	return runInput(timeout, "", name, args...)
}

// runInput is run with stdin as the command's standard input.
func runInput(timeout time.Duration, stdin, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// kubectl runs kubectl for up to a minute, or for longer than its own
// --timeout says (rollout status --timeout=2m).
func kubectl(args ...string) (string, error) {
	limit := time.Minute
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--timeout="); ok {
			if d, err := time.ParseDuration(v); err == nil {
				limit = max(limit, d+30*time.Second)
			}
		}
	}
	return run(limit, kubectlBin, args...)
}

func mustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := kubectl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// applyYAML applies manifests given as text.
// kubectlWatch starts kubectl with args (a watch, -w), ended after timeout,
// and returns its output and stop, which ends it and waits for it.
func kubectlWatch(t testing.TB, timeout time.Duration, args ...string) (io.Reader, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, kubectlBin, args...)
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return out, func() {
		cancel()
		_ = cmd.Wait()
	}
}

func applyYAML(t testing.TB, ns, manifests string) {
	t.Helper()
	if _, err := runInput(time.Minute, manifests, kubectlBin, "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// eventually calls f every interval until it returns nil, failing the test with
// f's last error after timeout.
func eventually(t testing.TB, timeout, interval time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %s: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}

// namespace creates a namespace for one test, with the Secrets the samples use.
// It is kept until TestHelmUpgradeAndUninstall: the tests of secrets and RBAC
// look at what every test left.
func namespace(t testing.TB, name string) string {
	t.Helper()
	// Left by an earlier run on a kept cluster (KEEP_CLUSTER=1): start afresh.
	mustKubectl(t, "delete", "namespace", name, "--ignore-not-found", "--wait=true", "--timeout=3m")
	mustKubectl(t, "create", "namespace", name)
	for _, s := range []string{"openai", "anthropic"} {
		mustKubectl(t, "-n", name, "create", "secret", "generic", s, "--from-literal=api-key="+canary)
	}
	// The Secrets are mounted by name into runner pods; wait for the namespace's
	// default ServiceAccount as pods need it.
	eventually(t, 30*time.Second, 200*time.Millisecond, "the default ServiceAccount", func() error {
		_, err := kubectl("-n", name, "get", "serviceaccount", "default")
		return err
	})
	return name
}

// record keeps a measured duration for the report (ARTIFACTS/timings.txt and the log).
func record(what string, d time.Duration) {
	timingsMu.Lock()
	defer timingsMu.Unlock()
	timings = append(timings, fmt.Sprintf("%-50s %8.2fs", what, d.Seconds()))
}

func writeTimings() {
	if len(timings) == 0 {
		return
	}
	text := "Measured on this run:\n" + strings.Join(timings, "\n") + "\n"
	fmt.Print(text)
	if err := os.MkdirAll(artifacts, 0o755); err == nil {
		saveArtifact("timings.txt", []byte(text))
	}
}

// saveArtifact writes a file into the artifacts directory; a failure is only
// printed, as the other artifacts are still worth saving.
func saveArtifact(name string, data []byte) {
	if err := os.WriteFile(filepath.Join(artifacts, name), data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// collectArtifacts saves what explains a failure: every object, every event,
// every pod's logs, and the cluster components' logs.
func collectArtifacts() {
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	save := func(name string, args ...string) {
		out, err := kubectl(args...)
		if err != nil {
			out += "\n" + err.Error()
		}
		saveArtifact(name, []byte(out))
	}
	save("objects.yaml", "get", "evaluations,jobs,pods,configmaps,services,deployments,roles,rolebindings,serviceaccounts", "-A", "-o", "yaml")
	save("evaluations.txt", "get", "evaluations", "-A", "-o", "wide")
	save("events.txt", "get", "events", "-A", "--sort-by=.lastTimestamp")
	save("nodes.yaml", "get", "nodes", "-o", "yaml")
	pods, _ := allPods()
	for _, p := range pods {
		save("pod-"+p[0]+"-"+p[1]+".log", "logs", "-n", p[0], p[1], "--all-containers", "--prefix", "--ignore-errors")
	}
	if clusterDir != "" {
		logs, _ := filepath.Glob(filepath.Join(clusterDir, "logs", "*.log"))
		for _, l := range logs {
			if b, err := os.ReadFile(l); err == nil {
				saveArtifact("component-"+filepath.Base(l), b)
			}
		}
	}
	fmt.Fprintln(os.Stderr, "Artifacts of the failure are in", artifacts)
}

// allPods lists every pod of the cluster as (namespace, name).
func allPods() ([][2]string, error) {
	out, err := kubectl("get", "pods", "-A", "-o", `jsonpath={range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}`)
	var pods [][2]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			pods = append(pods, [2]string{f[0], f[1]})
		}
	}
	return pods, err
}

// columns returns `kubectl get evaluations` as rows of NAME, PHASE, PROGRESS,
// SCORE (the printer columns a user sees), by name.
func columns(ns string) (map[string][3]string, error) {
	out, err := kubectl("get", "evaluations", "-n", ns, "--no-headers",
		"-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,PROGRESS:.status.progress.text,SCORE:.status.score")
	if err != nil {
		return nil, err
	}
	rows := map[string][3]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		rows[f[0]] = [3]string{f[1], f[2], f[3]}
	}
	return rows, nil
}

// printed returns the default `kubectl get evaluations` table (the CRD's printer
// columns), to check the user-facing headers.
func printed(t *testing.T, ns string) string {
	t.Helper()
	return mustKubectl(t, "get", "evaluations", "-n", ns)
}

var errNotYet = errors.New("not yet")
