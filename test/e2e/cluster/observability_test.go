//go:build e2e

package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/internal/testutil"
)

// testObservability: a run on the cluster, scraped by a real Prometheus
// with the scrape configuration docs/reference/metrics.md gives, and traced
// into a real Jaeger: Prometheus's totals of the run's requests by outcome
// and its tokens are the fake server's own counters (the pods waited for
// their last scrape), and Jaeger holds one trace per sample whose attempts
// and tokens are the server's too.
func testObservability(t *testing.T) {
	ns := namespace(t, "e2e-observe")
	const n = 40
	if clusterDir == "" {
		t.Skip("the trace store and Prometheus run on the local cluster's node (CLUSTER_DIR unset)")
	}
	// At 120 rpm the pods live about 20 s: Prometheus takes a new pod up as a
	// target seconds after it starts (its discovery sends updates every 5 s),
	// and a pod gone before its first scrape would count nothing.
	fakeServers(t, ns, "llm", []string{"-rpm=120", "-latency=150ms", "-fail-rate=0.1", "-drop-rate=0.03"})

	// Jaeger on this machine, the node, where runner pods reach it.
	node := strings.TrimSpace(mustKubectl(t, "get", "nodes", "-o", `jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}`))
	jaeger := testutil.StartJaeger(t, node)
	prom := testutil.StartPrometheus(t, runnerScrapeConfig(t, ns))

	var samples strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&samples, "      - {id: o%d, input: \"What is %d+%d?\", expected: \"%d\"}\n", i, i, i, 2*i)
	}
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: observed}
spec:
  datasets:
  - name: add
    source:
      inline:
%s  models:
  - name: small
    provider: openai
    model: fake-small
    baseURL: http://llm.%s.svc:8081/v1
    apiKey: {env: API_KEY, secretKeyRef: {name: openai, key: api-key}}
  scoring: [{type: exact_match, normalize: [trim]}]
  retry: {maxAttempts: 8, initialBackoff: 50ms, maxBackoff: 500ms}
  concurrency: 6
  shardSize: 20
  parallelism: 2
  tracing:
    endpoint: %s
`, samples.String(), ns, jaeger.OTLPHTTP))
	start := time.Now()
	final := watchColumns(t, ns, 6*time.Minute, "observed")
	record("a run scraped by Prometheus and traced into Jaeger (40 samples)", time.Since(start))
	if got := final["observed"]; got[0] != "Succeeded" || got[1] != "40/40" {
		t.Fatalf("PHASE PROGRESS = %v, want Succeeded 40/40", got)
	}
	s := stats(t, ns, "llm", 8081)
	t.Logf("the server: %v", s)
	if s["rateLimited"] == 0 || s["failed"]+s["dropped"] == 0 {
		t.Fatalf("the server refused %v and failed %v requests: want some of each, or the test proves little", s["rateLimited"], s["failed"]+s["dropped"])
	}

	// Each pod's series ends with its last scrape: the run's total is the
	// sum of each series' last value.
	sel := fmt.Sprintf(`{namespace=%q,evaluation="observed"}`, ns)
	want := map[string]float64{
		"ok": s["succeeded"], "throttled": s["rateLimited"], "server_error": s["failed"], "network": s["dropped"],
	}
	eventually(t, time.Minute, time.Second, "Prometheus's totals of the run equal to the server's counters", func() error {
		byOutcome, err := prom.Query(`sum by (outcome) (max_over_time(proctor_runner_requests_total` + sel + `[30m]))`)
		if err != nil {
			return err
		}
		got := map[string]float64{}
		for k, v := range byOutcome {
			got[strings.TrimPrefix(k, "outcome=")] = v
		}
		for outcome, w := range want {
			if got[outcome] != w {
				return fmt.Errorf("requests by outcome: Prometheus %v, the server %v%s", got, want, scrapesByPod(t, prom, ns, sel))
			}
		}
		tokens, err := prom.Query(`sum by (kind) (max_over_time(proctor_runner_tokens_total` + sel + `[30m]))`)
		if err != nil {
			return err
		}
		if tokens["kind=input"] != s["inputTokens"] || tokens["kind=output"] != s["outputTokens"] {
			return fmt.Errorf("tokens: Prometheus %v, the server %v in and %v out", tokens, s["inputTokens"], s["outputTokens"])
		}
		return nil
	})

	// One trace per sample, its attempts the server's requests.
	var traces []testutil.JaegerTrace
	eventually(t, time.Minute, time.Second, "a trace per sample in Jaeger", func() error {
		var err error
		traces, err = jaeger.Traces("proctor", 10*n)
		if err == nil && len(traces) != n {
			err = fmt.Errorf("%d traces, want %d", len(traces), n)
		}
		return err
	})
	var attempts, refused, in float64
	for _, tr := range traces {
		roots := 0
		for _, sp := range tr.Spans {
			if sp.Parent() == "" {
				roots++
			}
			if sp.OperationName != "chat fake-small" {
				continue
			}
			attempts++
			switch sp.Tag("error.type") {
			case "429":
				refused++
			case "":
				v, _ := strconv.ParseFloat(sp.Tag("gen_ai.usage.input_tokens"), 64)
				in += v
			}
		}
		if roots != 1 {
			t.Errorf("trace %s has %d roots, want the sample's span alone", tr.TraceID, roots)
		}
	}
	if attempts != s["requests"] || refused != s["rateLimited"] || in != s["inputTokens"] {
		t.Errorf("Jaeger's attempt spans: %v requests, %v refused, %v input tokens; the server %v, %v, %v",
			attempts, refused, in, s["requests"], s["rateLimited"], s["inputTokens"])
	}
}

// scrapesByPod says, for a failure, how often Prometheus read each runner
// pod and what each read last, and when each pod's runner ran: a pod never
// read, or read only before its last counts, shows there.
func scrapesByPod(t *testing.T, prom *testutil.Prometheus, ns, sel string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`sum by (pod) (count_over_time(up` + sel + `[30m]))`,
		`sum by (pod) (sum_over_time(up` + sel + `[30m]))`,
		`sum by (pod) (max_over_time(proctor_runner_requests_total` + sel + `[30m]))`,
	} {
		v, err := prom.Query(q)
		fmt.Fprintf(&b, "\n%s: %v %v", q, v, err)
	}
	out, err := kubectl("-n", ns, "get", "pods", "-l", "proctor.dev/component=runner", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {range .status.containerStatuses[?(@.name=="runner")]}{.state.terminated.startedAt} {.state.terminated.finishedAt}{end}{"\n"}{end}`)
	fmt.Fprintf(&b, "\nrunner pods (name, IP, started, finished):\n%s%v", out, err)
	return b.String()
}

// runnerScrapeConfig is a prometheus.yml scraping the runner pods of ns,
// with the job docs/reference/metrics.md gives (from outside the cluster:
// through the kubeconfig, every second).
func runnerScrapeConfig(t *testing.T, ns string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "reference", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(- job_name: proctor-runners\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/reference/metrics.md gives no proctor-runners job")
	}
	var jobs []map[string]any
	if err := yaml.Unmarshal(m[1], &jobs); err != nil {
		t.Fatalf("the docs' proctor-runners job: %v", err)
	}
	job := jobs[0]
	job["scrape_interval"] = "1s"
	sd, _ := job["kubernetes_sd_configs"].([]any)
	if len(sd) != 1 {
		t.Fatalf("the docs' job has kubernetes_sd_configs %v", job["kubernetes_sd_configs"])
	}
	pods := sd[0].(map[string]any)
	kubeconfig, err := filepath.Abs(os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	pods["kubeconfig_file"] = kubeconfig
	pods["namespaces"] = map[string]any{"names": []string{ns}}
	out, err := yaml.Marshal(map[string]any{"global": map[string]any{"scrape_interval": "1s"}, "scrape_configs": jobs})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
