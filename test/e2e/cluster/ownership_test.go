//go:build e2e

package cluster_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/cluster"
)

// agentEvaluation is an Evaluation of a busybox "agent" that prints answer for
// each of n samples: runner pods run, no model server is needed.
func agentEvaluation(name, answer string, n int, suspend bool) string {
	var samples strings.Builder
	for i := range n {
		fmt.Fprintf(&samples, "      - {id: s%d, input: q, expected: \"%s\"}\n", i, answer)
	}
	return fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: %s}
spec:
  suspend: %v
  datasets:
  - name: d
    source:
      inline:
%s  models:
  - name: small
    provider: agent
    agent:
      image: busybox:1.35.0
      command: [echo, "%s"]
  scoring: [{type: exact_match, normalize: [trim]}]
`, name, suspend, samples.String(), answer)
}

// testForgedResultsFail replays issue 9's forgery on the real cluster, verbatim
// where the attacker is one Evaluation's runner ServiceAccount: it can no longer
// create ConfigMaps at all; and records that an account with more rights plants
// under another Evaluation's labels and run are ignored (and reported), never
// counted, adopted or deleted.
func testForgedResultsFail(t *testing.T) {
	ns := namespace(t, "e2e-forge")
	applyYAML(t, ns, agentEvaluation("attacker", "1", 1, false))
	watchColumns(t, ns, 3*time.Minute, "attacker")
	sa := "system:serviceaccount:" + ns + ":attacker-runner"

	// As the attacker's runner: pre-create a victim's shard head, done, and a
	// records chunk labelled as the victim's.
	for _, args := range [][]string{
		{"create", "configmap", "victim-0123abcd-small-0", "--from-literal=done=0-9"},
		{"create", "configmap", "victim-0123abcd-small-0-0", "--from-literal=records=FORGED"},
	} {
		out, err := kubectl(append([]string{"-n", ns, "--as", sa}, args...)...)
		if err == nil || !strings.Contains(out+err.Error(), "forbidden") {
			t.Errorf("kubectl %s as the runner: %v %s; want forbidden", strings.Join(args, " "), err, out)
		}
	}
	if out, _ := kubectl("auth", "can-i", "create", "configmaps", "-n", ns, "--as", sa); strings.TrimSpace(out) != "no" {
		t.Errorf("kubectl auth can-i create configmaps --as %s: %q, want no", sa, out)
	}

	// Someone with more rights plants a records chunk with the victim's labels
	// and its run (readable in status), under the name of a slot it would use.
	applyYAML(t, ns, agentEvaluation("victim", "real", 10, true))
	var run string
	eventually(t, time.Minute, time.Second, "the victim's run to be planned", func() error {
		ev := getEvaluation(t, ns, "victim")
		if run = ev.Status.Run; run == "" || ev.Status.Phase != "Suspended" {
			return fmt.Errorf("phase %s run %q", ev.Status.Phase, run)
		}
		return nil
	})
	forged := cluster.ChunkName(cluster.HeadName("victim", run, "small", 0), 5)
	dir := t.TempDir()
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	for i := range 10 {
		fmt.Fprintf(w, `{"i":%d,"r":{"id":"s%d","model":"small","dataset":"d","output":"FORGED","scores":{"exact_match":1}}}`+"\n", i, i)
	}
	w.Close()
	if err := os.WriteFile(filepath.Join(dir, "records.jsonl.gz"), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, "-n", ns, "create", "configmap", forged, "--from-file="+filepath.Join(dir, "records.jsonl.gz"))
	mustKubectl(t, "-n", ns, "label", "configmap", forged, "proctor.dev/component=records", "proctor.dev/evaluation=victim",
		"proctor.dev/run="+run, "proctor.dev/model=small", "proctor.dev/dataset=d", "app.kubernetes.io/managed-by=proctor")
	mustKubectl(t, "-n", ns, "patch", "evaluation", "victim", "--type=merge", "-p", `{"spec":{"suspend":false}}`)

	final := watchColumns(t, ns, 3*time.Minute, "victim")
	if got, want := final["victim"], [3]string{"Succeeded", "10/10", "1.0000"}; got != want {
		t.Errorf("victim: PHASE PROGRESS SCORE = %v, want %v", got, want)
	}
	recs, _ := fetchRecords(t, ns, "victim")
	exactlyOnce(t, recs, 10)
	for _, r := range recs {
		if strings.TrimSpace(r.Output) != "real" || r.Attempts == 0 {
			t.Errorf("record %s: output %q after %d attempts; want the agent's own answer", r.ID, r.Output, r.Attempts)
		}
	}
	if got := reasons(t, ns, "Evaluation", "victim"); !slices.Contains(got, "ForeignObjectIgnored") {
		t.Errorf("victim's events %v, want ForeignObjectIgnored", got)
	}
	// Left as it was: deleting the victim does not delete it.
	mustKubectl(t, "-n", ns, "delete", "evaluation", "victim", "--wait=true")
	eventually(t, time.Minute, time.Second, "the victim's own ConfigMaps to be collected", func() error {
		out := mustKubectl(t, "-n", ns, "get", "configmaps", "-l", "proctor.dev/evaluation=victim", "-o", "name")
		if strings.TrimSpace(out) != "configmap/"+forged {
			return fmt.Errorf("left: %s", out)
		}
		return nil
	})
	mustKubectl(t, "-n", ns, "delete", "configmap", forged) // it carries Proctor's labels: TestHelmUpgradeAndUninstall looks for them
}

// testNameConflict replays issue 9's takeover: a user's own ConfigMap named
// NAME-results, made before the Evaluation NAME, is not overwritten, adopted or
// deleted with the Evaluation; the Evaluation says so and runs nothing.
func testNameConflict(t *testing.T) {
	ns := namespace(t, "e2e-conflict")
	mustKubectl(t, "-n", ns, "create", "configmap", "report-results", "--from-literal=notes.md=my own notes")
	applyYAML(t, ns, agentEvaluation("report", "1", 2, false))
	eventually(t, time.Minute, time.Second, "the conflict to show", func() error {
		out := mustKubectl(t, "-n", ns, "get", "evaluation", "report", "--no-headers")
		if !strings.Contains(out, "Pending") || !strings.Contains(out, "NameConflict") {
			return fmt.Errorf("kubectl get evaluation: %s", out)
		}
		return nil
	})
	ev := getEvaluation(t, ns, "report")
	if !strings.Contains(ev.Status.Message, "ConfigMap "+ns+"/report-results is not Evaluation report's") {
		t.Errorf("message %q", ev.Status.Message)
	}
	if out := mustKubectl(t, "-n", ns, "get", "jobs", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("Jobs started despite the conflict: %s", out)
	}
	mustKubectl(t, "-n", ns, "delete", "evaluation", "report", "--wait=true")
	time.Sleep(5 * time.Second) // room for the garbage collector to act, were it to
	out := mustKubectl(t, "-n", ns, "get", "configmap", "report-results", "-o", "jsonpath={.data.notes\\.md}|{.metadata.ownerReferences}|{.metadata.labels}")
	if out != "my own notes||" {
		t.Errorf("the user's ConfigMap after the Evaluation's deletion: %q, want it untouched", out)
	}
}
