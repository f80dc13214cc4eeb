//go:build e2e

package cluster_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/runner/results"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// fakeServers deploys one pod of fake model servers, one container per port,
// each with args (which may name $(API_KEY), the key of Secret openai),
// behind a Service named name.
//
// Each server requests some CPU: a provider times a call when it arrives,
// and its clock is not starved by the load of the machine our runners share
// with it. Without a request the pod is BestEffort, the last to be scheduled
// on a busy node: a stall of half a second made calls paced 0.5 s apart reach
// its handler together, and its per-second bucket refused one of 361.
func fakeServers(t testing.TB, ns, name string, args ...[]string) {
	t.Helper()
	var containers, ports strings.Builder
	for i, a := range args {
		port := 8081 + i
		quoted, _ := json.Marshal(append([]string{fmt.Sprintf("-addr=:%d", port)}, a...))
		fmt.Fprintf(&containers, `
      - name: llm%d
        image: ghcr.io/proctor-dev/proctor-fakellm:v0.1.0
        imagePullPolicy: IfNotPresent
        command: [/fakellm]
        args: %s
        env: [{name: API_KEY, valueFrom: {secretKeyRef: {name: openai, key: api-key}}}]
        readinessProbe: {tcpSocket: {port: %d}, periodSeconds: 1}
        resources: {requests: {cpu: 100m, memory: 32Mi}}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, runAsNonRoot: true, capabilities: {drop: [ALL]}}`, i, quoted, port)
		fmt.Fprintf(&ports, "\n  - {name: llm%d, port: %d, targetPort: %d}", i, port, port)
	}
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      automountServiceAccountToken: false
      securityContext: {seccompProfile: {type: RuntimeDefault}}
      containers:%[2]s
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s}
spec:
  selector: {app: %[1]s}
  ports:%[3]s
`, name, containers.String(), ports.String()))
	mustKubectl(t, "-n", ns, "rollout", "status", "deployment/"+name, "--timeout=2m")
	waitForServiceRules(t, ns, name)
}

// waitForServiceRules waits until kube-proxy has written the rules of Service
// ns/name on the local cluster's node, this machine (docs/tasks/local-cluster.md:
// they appear about a second after the endpoints are ready). Before that, a
// runner's connections to the ClusterIP leave the node, and here a proxy
// answers every one with 404: each sample would fail. Someone else's cluster
// (no CLUSTER_DIR) is not checked.
func waitForServiceRules(t testing.TB, ns, name string) {
	t.Helper()
	if clusterDir == "" {
		return
	}
	ip := strings.TrimSpace(mustKubectl(t, "-n", ns, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}"))
	eventually(t, time.Minute, 200*time.Millisecond, "kube-proxy's rules for Service "+ns+"/"+name, func() error {
		out, err := run(10*time.Second, "iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "-d "+ip+"/32") {
			return fmt.Errorf("no rule for %s yet", ip)
		}
		return nil
	})
}

// serverGet reads path of the fake server svc:port through the API server's
// service proxy.
func serverGet(t testing.TB, ns, svc string, port int, path string) string {
	t.Helper()
	return mustKubectl(t, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/services/%s:%d/proxy%s", ns, svc, port, path))
}

// stats reads a fake server's own counters through the API server's Service proxy.
func stats(t testing.TB, ns, svc string, port int) map[string]float64 {
	t.Helper()
	out := serverGet(t, ns, svc, port, "/stats")
	var s map[string]float64
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stats of %s:%d: %v: %s", svc, port, err, out)
	}
	return s
}

// testSharedRateLimit: three models, two datasets, two shards of each model
// running at once, each model with its own declared limit. Every model's server
// enforces the same limit and counts the most requests it saw in any window:
// the shards together kept under it, no request was refused, and every answer
// is right.
func testSharedRateLimit(t *testing.T) {
	ns := namespace(t, "e2e-ratelimit")
	const rpm, perDataset = 30, 21 // 42 requests a model: more than one window's worth
	fakeServers(t, ns, "limited",
		[]string{fmt.Sprintf("-rpm=%d", rpm)}, []string{fmt.Sprintf("-rpm=%d", rpm)}, []string{fmt.Sprintf("-rpm=%d", rpm)})

	var a, b strings.Builder
	for i := 1; i <= perDataset; i++ {
		fmt.Fprintf(&a, "      - {id: a%d, input: \"What is %d+%d?\", expected: \"%d\"}\n", i, i, i, 2*i)
		fmt.Fprintf(&b, "      - {id: m%d, input: \"What is %d*3?\", expected: \"%d\"}\n", i, i, 3*i)
	}
	var models strings.Builder
	for i, p := range []string{"openai", "anthropic", "openai"} {
		base := fmt.Sprintf("http://limited.%s.svc:%d", ns, 8081+i)
		if p == "openai" {
			base += "/v1"
		}
		fmt.Fprintf(&models, `  - name: m%d
    provider: %s
    model: fake-%d
    baseURL: %s
    apiKey: {env: API_KEY, secretKeyRef: {name: %s, key: api-key}}
    rateLimit: {requestsPerMinute: %d}
`, i, p, i, base, p, rpm)
	}
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: limited}
spec:
  datasets:
  - name: add
    source:
      inline:
%s  - name: mul
    source:
      inline:
%s  models:
%s  prompt: {system: "Answer with a number only."}
  scoring: [{type: exact_match, normalize: [trim]}]
  concurrency: 8
  shardSize: 21
  parallelism: 2
`, a.String(), b.String(), models.String()))
	start := time.Now()
	final := watchColumns(t, ns, 6*time.Minute, "limited")
	record("3 models x 2 datasets at 30 RPM each (126 samples)", time.Since(start))
	if got, want := final["limited"], [3]string{"Succeeded", "126/126", "1.0000"}; got != want {
		t.Errorf("PHASE PROGRESS SCORE = %v, want %v", got, want)
	}
	// Two shards a model really ran at once.
	jobs := mustKubectl(t, "get", "jobs", "-n", ns, "-l", "proctor.dev/evaluation=limited,proctor.dev/component=runner",
		"-o", "jsonpath={range .items[*]}{.spec.parallelism}{\" \"}{.spec.completions}{\"\\n\"}{end}")
	if got := strings.Count(jobs, "2 2"); got != 3 {
		t.Errorf("runner Jobs (parallelism completions):\n%s\nwant 3 Jobs with 2 and 2", jobs)
	}
	// The shards' calls together are spaced as the bucket refills, 5% wider
	// (100 ms at 30 rpm: see ratelimit.smallRequestsPad). A call that reached
	// the server more than that late, against the next one on time (a busy
	// node), is refused by a moment and retried: one such near miss a model
	// is allowed. A refusal by more than a quarter of the spacing means calls
	// went together: the shards did not share the bucket's moments.
	spacing := time.Minute / rpm
	for i := 0; i < 3; i++ {
		s := stats(t, ns, "limited", 8081+i)
		refused := refusals(t, ns, "limited", 8081+i, spacing/4)
		if len(refused.lines) > 0 {
			t.Logf("model m%d's server refused:\n%s", i, strings.Join(refused.lines, "\n"))
		}
		if s["requests"] != 2*perDataset+s["rateLimited"] || s["rateLimited"] > 1 || refused.far > 0 || s["maxRequestsInWindow"] > rpm {
			t.Errorf("model m%d's server: %v requests (want %d, and one more for each refusal), %v refused with 429 (want at most 1, by a moment), %d of them by more than %v, at most %v in a minute (limit %d)%s",
				i, s["requests"], 2*perDataset, s["rateLimited"], refused.far, spacing/4, s["maxRequestsInWindow"], rpm, pacerLog(t, ns, "limited"))
		}
	}
	recs, _ := fetchRecords(t, ns, "limited")
	exactlyOnce(t, recs, 126)
	for _, r := range recs {
		if r.Error != "" || r.Scores["exact_match"] != 1 {
			t.Errorf("record %s/%s/%s: output %q, error %q", r.Model, r.Dataset, r.ID, r.Output, r.Error)
		}
	}
}

// refused describes a server's rate-limit refusals.
type refused struct {
	// lines say when each came, after which accepted call, and how early.
	lines []string
	// far counts those more than far early: calls sent together rather than
	// one a moment early.
	far int
}

// refusals reads a fake server's rate-limit decisions (GET /stats/limits) and
// describes each refusal.
func refusals(t testing.TB, ns, svc string, port int, far time.Duration) refused {
	t.Helper()
	out := serverGet(t, ns, svc, port, "/stats/limits")
	var decisions []fakellm.LimitDecision
	if err := json.Unmarshal([]byte(out), &decisions); err != nil {
		t.Fatalf("limit decisions of %s:%d: %v: %s", svc, port, err, out)
	}
	var r refused
	var first, accepted int64
	for i, d := range decisions {
		if i == 0 {
			first = d.At
		}
		if d.OK {
			accepted = d.At
			continue
		}
		early := time.Duration(d.WaitNanos)
		if early > far {
			r.far++
		}
		after := "before any call was accepted"
		if accepted != 0 {
			after = fmt.Sprintf("%v after the call accepted before it", time.Duration(d.At-accepted).Round(time.Millisecond))
		}
		r.lines = append(r.lines, fmt.Sprintf("  +%v: by its %s limit, %s, %v early",
			time.Duration(d.At-first).Round(time.Millisecond), d.Limit, after, early.Round(time.Millisecond)))
	}
	return r
}

// pacerLog is what an Evaluation's runner pods said about the pacer (a pod
// paces on its own while the pacer does not answer), for a failure's message.
func pacerLog(t testing.TB, ns, evaluation string) string {
	t.Helper()
	out, _ := kubectl("logs", "-n", ns, "-l", "proctor.dev/evaluation="+evaluation, "-c", "runner", "--prefix", "--tail=-1", "--ignore-errors")
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(strings.ToLower(l), "pacer") {
			lines = append(lines, "  "+l)
		}
	}
	if len(lines) == 0 {
		return "\n(its runner pods never paced without the pacer)"
	}
	return "\nits runner pods on the pacer:\n" + strings.Join(lines, "\n")
}

// agentScript is the agent CLI of TestAgentWorkspaces, in busybox sh. Given
// "files" it prints what its workspace holds; given "hang" it starts a sleeper
// and waits far past the timeout; given "sleepers" it counts the sleep processes
// left in the pod, zombies included (those of a killed agent must be gone, and
// reaped: a few seconds are allowed for that).
const agentScript = `case "$1" in
files) for f in $(ls -A | sort); do printf '%s=%s;' "$f" "$(cat "$f")"; done ;;
hang) sleep 3600 & sleep 3600 ;;
sleepers) for try in 1 2 3 4 5; do
	n=0; for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sleep ] && n=$((n+1)); done
	[ $n = 0 ] && break; sleep 1
done; echo "sleepers=$n" ;;
esac`

// TestAgentWorkspaces: an agent image holding a CLI (busybox sh) run once per
// sample: each run sees only its own files, and a run past its timeout is killed
// with its whole process group while the others go on.
func TestAgentWorkspaces(t *testing.T) {
	ns := namespace(t, "e2e-agent")
	script, _ := json.Marshal(agentScript)
	var samples strings.Builder
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&samples, "      - {id: w%d, input: files, secret: s%d, expected: \"note.txt=s%d;task.txt=files;\"}\n", i, i, i)
	}
	// Two Evaluations of one agent: workspaces run three at a time; the timeout
	// pair one at a time, so that "after" starts only once "hang" was killed.
	evaluation := func(name, datasets string, concurrency int) string {
		return fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: %s}
spec:
  datasets:
%s  models:
  - name: cli
    provider: agent
    agent:
      image: busybox:1.35.0
      command: [sh, -c, %s, agent, "{{ .Prompt }}"]
      files:
        note.txt: "{{ .Sample.secret }}"
        task.txt: "{{ .Prompt }}"
      timeout: 8s
  scoring: [{type: exact_match, normalize: [trim]}]
  concurrency: %d
  retry: {maxAttempts: 1}
---
`, name, datasets, script, concurrency)
	}
	applyYAML(t, ns, evaluation("agents", "  - name: workspaces\n    source:\n      inline:\n"+samples.String(), 3)+
		evaluation("agent-timeout", `  - name: timeouts
    source:
      inline:
      - {id: hang, input: hang, secret: x, expected: ""}
      - {id: after, input: sleepers, secret: x, expected: "sleepers=0"}
`, 1))
	final := watchColumns(t, ns, 4*time.Minute, "agents", "agent-timeout")
	if got, want := final["agents"], [3]string{"Succeeded", "6/6", "1.0000"}; got != want {
		t.Errorf("agents: PHASE PROGRESS SCORE = %v, want %v", got, want)
	}
	if got, want := final["agent-timeout"], [3]string{"Succeeded", "2/2", "0.5000"}; got != want {
		t.Errorf("agent-timeout: PHASE PROGRESS SCORE = %v, want %v (a failed sample does not fail the Evaluation)", got, want)
	}
	recs, _ := fetchRecords(t, ns, "agents")
	exactlyOnce(t, recs, 6)
	more, _ := fetchRecords(t, ns, "agent-timeout")
	exactlyOnce(t, more, 2)
	byID := map[string]results.Record{}
	for _, r := range append(recs, more...) {
		byID[r.ID] = r
	}
	for i := 1; i <= 6; i++ {
		r := byID[fmt.Sprintf("w%d", i)]
		if want := fmt.Sprintf("note.txt=s%d;task.txt=files;", i); strings.TrimSpace(r.Output) != want || r.Error != "" {
			t.Errorf("sample w%d saw %q (error %q), want only its own files %q", i, r.Output, r.Error, want)
		}
	}
	if r := byID["hang"]; !strings.Contains(r.Error, "timed out") && !strings.Contains(r.Error, "timeout") {
		t.Errorf("the hanging sample: output %q, error %q; want a timeout error", r.Output, r.Error)
	}
	// The datasets run in order in the one shard: "after" starts once "hang" was
	// killed; no sleep of it may survive.
	if r := byID["after"]; strings.TrimSpace(r.Output) != "sleepers=0" {
		t.Errorf("after the timeout the pod still had sleep processes: %q (error %q)", r.Output, r.Error)
	}
}
