package compile_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/runner/provider"
	"github.com/proctor-dev/proctor/runner/provider/agent"
)

// startExecutor serves an agent executor whose container environment is vars,
// as an agent pod's sidecar does, and returns its socket.
func startExecutor(t *testing.T, vars map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "px")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	x, err := agent.NewExecutor(agent.ExecutorOptions{WorkspaceRoot: filepath.Join(dir, "ws"), Log: logr.Discard(),
		LookupEnv: func(name string) (string, bool) { v, ok := vars[name]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "agent.sock")
	l, err := agent.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := x.Serve(ctx, l); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return socket
}

const remoteAgent = inlineDataset + `models:
- name: coder
  provider: agent
  apiKey: {env: CODER_KEY, secretKeyRef: {name: coder, key: k}}
  agent:
    command: [sh, -c, 'env | sort']
    env:
    - {name: MODE, value: fast}
    - {name: GH_TOKEN, valueFrom: {secretKeyRef: {name: gh, key: token}}}
- {name: judge, provider: openai, model: m, baseURL: "http://127.0.0.1:9/v1", apiKey: {env: J, secretKeyRef: {name: j, key: k}}}
scoring:
- {type: judge, judge: {model: judge}}
`

// runnerEnv is a runner pod's environment: the judge's key, nothing of the
// agent's. It records what Build looked up.
type runnerEnv struct {
	mu     sync.Mutex
	asked  []string
	values map[string]string
}

func (e *runnerEnv) lookup(name string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked = append(e.asked, name)
	v, ok := e.values[name]
	return v, ok
}

// TestAgentThroughExecutor: in a runner pod whose agent runs in its own
// container, the agent's key and valueFrom variables come from that container;
// the runner neither reads nor holds them, and the agent sees the same
// variables as before.
func TestAgentThroughExecutor(t *testing.T) {
	socket := startExecutor(t, map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": "/agent/home", "CODER_KEY": "sk-coder-0123456789\n", "GH_TOKEN": "ghp_abcdefgh",
		"UNDECLARED": "must not leak",
	})
	runner := &runnerEnv{values: map[string]string{"PROCTOR_API_KEY_JUDGE": "sk-judge-0123456789"}}
	env := newEnv(t, nil)
	env.Cluster, env.AgentExecutor, env.LookupEnv = true, socket, runner.lookup
	env.Models = []string{"coder", "judge"}
	plan := mustBuild(t, remoteAgent, env)

	if diff := cmp.Diff([]string{"sk-judge-0123456789"}, plan.Secrets); diff != "" {
		t.Errorf("the runner's secrets (-want +got):\n%s", diff)
	}
	for _, name := range runner.asked {
		if name == "CODER_KEY" || name == "GH_TOKEN" || strings.HasSuffix(name, "_CODER") {
			t.Errorf("the runner looked up %s, which only the agent's container holds", name)
		}
	}
	resp, err := plan.Model("coder").Provider.Complete(t.Context(), &provider.Request{Prompt: "hi", SampleID: "q1"})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := map[string]string{}
	for line := range strings.SplitSeq(resp.Text, "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	for _, k := range []string{"PROCTOR_WORKSPACE", "PWD", "SHLVL", "_"} {
		delete(got, k)
	}
	want := map[string]string{
		"PATH":              os.Getenv("PATH"),
		"HOME":              "/agent/home",
		"CODER_KEY":         provider.Redacted, // given (trimmed), and removed from the answer by the executor
		"MODE":              "fast",
		"GH_TOKEN":          provider.Redacted,
		"PROCTOR_SAMPLE_ID": "q1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent environment (-want +got):\n%s", diff)
	}
}

// TestAgentThroughExecutorChecksItsEnvironment: what the agent's container
// lacks fails Build with the field to fix, as a runner's own missing key does.
func TestAgentThroughExecutorChecksItsEnvironment(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"key missing", map[string]string{"GH_TOKEN": "x"}, "spec.models[0].apiKey.secretKeyRef: the key of Secret coder is empty or missing"},
		{"key empty", map[string]string{"CODER_KEY": "\n", "GH_TOKEN": "x"}, "spec.models[0].apiKey.secretKeyRef: the key of Secret coder is empty or missing"},
		{"key with a space", map[string]string{"CODER_KEY": "sk coder", "GH_TOKEN": "x"}, "spec.models[0].apiKey.secretKeyRef: the key of Secret coder holds a space"},
		{"valueFrom missing", map[string]string{"CODER_KEY": "sk-coder"}, "spec.models[0].agent.env[1]: GH_TOKEN has no value in the agent's container"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t, map[string]string{"PROCTOR_API_KEY_JUDGE": "sk-judge"})
			env.Cluster, env.AgentExecutor = true, startExecutor(t, tt.vars)
			_, err := build(t, remoteAgent, env)
			wantError(t, err, tt.want)
		})
	}
}
