//go:build e2e

package cluster_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// attackScript is issue 9's attack, verbatim: every process's environment
// searched for keys and printed reversed (which redaction used to miss), then
// the same split by dashes (which redaction misses still: it shows what the
// agent could read at all), then the ServiceAccount token.
const attackScript = `for f in /proc/[0-9]*/environ; do tr '\0' '\n' <$f | grep KEY; done | rev
echo ---
for f in /proc/[0-9]*/environ; do tr '\0' '\n' <$f | grep KEY; done | sed 's/./&-/g'
echo ---
cat /var/run/secrets/kubernetes.io/serviceaccount/token 2>&1 || true
echo ---
ls /proc | grep -c '^[0-9]'`

// agentOwnKey is the attacking agent's own key: it may read that one.
const agentOwnKey = "sk_agent_own_5f2a9c7e1b"

// TestAgentsCannotReachOtherKeys: an agent that searches every process's
// environment for keys and reads the ServiceAccount token finds its own key
// and nothing else: not the judge's key (in the runner container), not a
// token. Neither shows in its records, reversed, split or whole.
func TestAgentsCannotReachOtherKeys(t *testing.T) {
	ns := namespace(t, "e2e-agent-attack")
	mustKubectl(t, "-n", ns, "create", "secret", "generic", "agent-key", "--from-literal=api-key="+agentOwnKey)
	script, _ := json.Marshal(attackScript)
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: attack}
spec:
  datasets:
  - name: d
    source:
      inline:
      - {id: a1, input: "2+2", expected: "4"}
      - {id: a2, input: "3+3", expected: "6"}
  models:
  - name: attacker
    provider: agent
    apiKey: {env: AGENT_API_KEY, secretKeyRef: {name: agent-key, key: api-key}}
    agent:
      image: busybox:1.35.0
      command: [sh, -c, %s]
      timeout: 30s
  - {name: judge, provider: openai, model: fake, baseURL: "http://fakellm.proctor-system.svc:8080/v1", apiKey: {env: OPENAI_API_KEY, secretKeyRef: {name: openai, key: api-key}}}
  scoring:
  - {type: judge, judge: {model: judge}}
  retry: {maxAttempts: 1}
`, script))
	final := watchColumns(t, ns, 4*time.Minute, "attack")
	if got := final["attack"]; got[0] != "Succeeded" || got[1] != "2/2" {
		t.Fatalf("attack: PHASE PROGRESS SCORE = %v, want Succeeded 2/2; message %q", got, getEvaluation(t, ns, "attack").Status.Message)
	}

	// The pod as it ran: the token mounted into the runner only.
	var pods corev1.PodList
	if err := json.Unmarshal([]byte(mustKubectl(t, "get", "pods", "-n", ns, "-l", "proctor.dev/evaluation=attack,proctor.dev/component=runner", "-o", "json")), &pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatal("no runner pod left to look at")
	}
	for _, c := range append(slices.Clone(pods.Items[0].Spec.InitContainers), pods.Items[0].Spec.Containers...) {
		token := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(m.MountPath, "/var/run/secrets") })
		if token != (c.Name == "runner") {
			t.Errorf("container %s has the ServiceAccount token mounted: %v", c.Name, token)
		}
	}

	recs, _ := fetchRecords(t, ns, "attack")
	exactlyOnce(t, recs, 2)
	cm := mustKubectl(t, "get", "configmap", "-n", ns, "attack-results", "-o", "yaml")
	reversed := []byte(canary)
	slices.Reverse(reversed)
	for _, r := range recs {
		if r.Error != "" {
			t.Errorf("sample %s: error %q", r.ID, r.Error)
			continue
		}
		parts := strings.Split(r.Output, "---")
		if len(parts) != 4 {
			t.Fatalf("sample %s: the attack printed %q", r.ID, r.Output)
		}
		t.Logf("sample %s: the agent found %q and %q; the token: %q; %s processes", r.ID,
			strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), strings.TrimSpace(parts[2]), strings.TrimSpace(parts[3]))
		joined := strings.ReplaceAll(r.Output, "-", "")
		for what, s := range map[string]string{"the judge's key": canary, "the judge's key reversed": string(reversed)} {
			if strings.Contains(r.Output, s) || strings.Contains(joined, strings.ReplaceAll(s, "-", "")) {
				t.Errorf("sample %s: the agent read %s: %q", r.ID, what, r.Output)
			}
		}
		// The attack works: it finds the agent's own key (redacted whole, not
		// when split), under the name the model gave it.
		if !strings.Contains(joined, "AGENT_API_KEY="+agentOwnKey) || strings.Contains(r.Output, agentOwnKey) {
			t.Errorf("sample %s: the agent's own key, split %v, whole %v; want it found, and seen only split: %q",
				r.ID, strings.Contains(joined, agentOwnKey), strings.Contains(r.Output, agentOwnKey), r.Output)
		}
		if strings.Contains(r.Output, "PROCTOR_API_KEY") || strings.Contains(joined, "PROCTOR_API_KEY") {
			t.Errorf("sample %s: the agent saw the runner's variables: %q", r.ID, r.Output)
		}
		if token := strings.TrimSpace(parts[2]); !strings.Contains(token, "No such file") || strings.Contains(token, "eyJ") {
			t.Errorf("sample %s: reading the token gave %q; want no such file", r.ID, token)
		}
	}
	for _, place := range []string{cm, printed(t, ns)} {
		if strings.Contains(place, canary) || strings.Contains(place, string(reversed)) || strings.Contains(place, "eyJhbGciOi") {
			t.Errorf("the results hold the judge's key or a token:\n%s", place)
		}
	}
}

// TestRestrictedNamespaces: the agent sample and an API-model sample, as they
// are, run to the end in a namespace that enforces Pod Security "restricted",
// and in one whose ResourceQuota demands requests and limits of every pod.
func TestRestrictedNamespaces(t *testing.T) {
	samples := map[string]string{
		"agent-capitals":    "proctor_v1alpha1_evaluation_agent.yaml",
		"openai-arithmetic": "proctor_v1alpha1_evaluation_openai.yaml",
	}
	for _, tc := range []struct {
		ns      string
		prepare func(t *testing.T, ns string)
	}{
		{ns: "e2e-restricted", prepare: func(t *testing.T, ns string) {
			mustKubectl(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
				"pod-security.kubernetes.io/enforce-version=latest", "pod-security.kubernetes.io/warn=restricted")
		}},
		{ns: "e2e-quota", prepare: func(t *testing.T, ns string) {
			applyYAML(t, ns, `apiVersion: v1
kind: ResourceQuota
metadata: {name: requires-limits}
spec:
  hard: {requests.cpu: "4", requests.memory: 8Gi, limits.cpu: "32", limits.memory: 64Gi}
`)
		}},
	} {
		t.Run(tc.ns, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t, tc.ns)
			tc.prepare(t, ns)
			var names []string
			for name, file := range samples {
				mustKubectl(t, "apply", "-n", ns, "-f", filepath.Join(repo, "config", "samples", file))
				names = append(names, name)
			}
			final := watchColumns(t, ns, 5*time.Minute, names...)
			for _, name := range names {
				want := sampleOutcome[name]
				if got := final[name]; got != [3]string{"Succeeded", want.progress, want.score} {
					ev := getEvaluation(t, ns, name)
					t.Errorf("%s: PHASE PROGRESS SCORE = %v, want [Succeeded %s %s]; reason %q message %q",
						name, got, want.progress, want.score, ev.Status.Reason, ev.Status.Message)
				}
				recs, _ := fetchRecords(t, ns, name)
				exactlyOnce(t, recs, want.records)
				for _, r := range recs {
					if r.Error != "" {
						t.Errorf("%s sample %s: error %q", name, r.ID, r.Error)
					}
				}
			}
			// No pod was refused on the way.
			for _, name := range names {
				if r := reasons(t, ns, "Evaluation", name); slices.Contains(r, "FailedCreate") {
					t.Errorf("%s: events %v", name, r)
				}
			}
		})
	}
}
