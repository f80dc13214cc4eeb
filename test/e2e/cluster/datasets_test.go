//go:build e2e

package cluster_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

// testEveryDatasetSource: one Evaluation reads every cluster source: inline, a
// ConfigMap, a url with and without sha256 (served in the cluster by the fake
// model server: the planner pod counts them, which used to crash it), and a PVC
// (a statically provisioned hostPath volume: the local cluster has no
// provisioner). Every sample of each is evaluated once, and scores 1.
func testEveryDatasetSource(t *testing.T) {
	ns := namespace(t, "e2e-datasets")
	dir, err := os.MkdirTemp("/var/tmp", "proctor-e2e-pvc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "qa"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "qa", "data.jsonl"), []byte(fakellm.ArithmeticJSONL("pvc", 7)), 0o644); err != nil {
		t.Fatal(err)
	}
	pv := "proctor-e2e-datasets"
	mustKubectl(t, "delete", "pv", pv, "--ignore-not-found", "--wait=true", "--timeout=1m")
	t.Cleanup(func() {
		if out, err := kubectl("delete", "pv", pv, "--ignore-not-found", "--wait=false"); err != nil {
			t.Logf("deleting PersistentVolume %s: %v\n%s", pv, err, out)
		}
	})
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: %[1]s}
spec:
  capacity: {storage: 1Mi}
  accessModes: [ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: %[2]s, type: Directory}
  claimRef: {namespace: %[3]s, name: data}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: %[3]s}
spec:
  accessModes: [ReadOnlyMany]
  storageClassName: ""
  volumeName: %[1]s
  resources: {requests: {storage: 1Mi}}
`, pv, dir, ns))
	mustKubectl(t, "-n", ns, "create", "configmap", "qa", "--from-literal=data.jsonl="+fakellm.ArithmeticJSONL("cm", 5))

	web := "http://fakellm.proctor-system.svc:8080/datasets/arithmetic.jsonl?n=6&prefix=web"
	sum := sha256.Sum256([]byte(fakellm.ArithmeticJSONL("web", 6)))
	start := time.Now()
	applyYAML(t, ns, fmt.Sprintf(`apiVersion: proctor.dev/v1alpha1
kind: Evaluation
metadata: {name: sources}
spec:
  datasets:
  - name: inline
    source:
      inline: [{id: i-0, input: "What is 0+1?", expected: "1"}, {id: i-1, input: "What is 1+1?", expected: "2"}]
  - name: cm
    source: {configMap: {name: qa, key: data.jsonl}}
  - name: web
    source: {url: %[1]q}
    format: jsonl
  - name: checked
    source: {url: %[1]q, sha256: %[2]s}
    format: jsonl
  - name: pvc
    source: {pvc: {claimName: data, path: qa/data.jsonl}}
  models:
  - {name: small, provider: openai, model: fake, baseURL: "http://fakellm.proctor-system.svc:8080/v1", apiKey: {env: OPENAI_API_KEY, secretKeyRef: {name: openai, key: api-key}}}
  scoring: [{type: exact_match}]
  shardSize: 4
  parallelism: 3
`, web, hex.EncodeToString(sum[:])))
	last := watchColumns(t, ns, 4*time.Minute, "sources")
	record("every dataset source (inline, configMap, url, url+sha256, pvc; 26 samples) end to end", time.Since(start))
	ev := getEvaluation(t, ns, "sources")
	if last["sources"][0] != "Succeeded" {
		t.Fatalf("phase %s: %s\n%s", last["sources"][0], ev.Status.Message, printed(t, ns))
	}
	want := map[string]int64{"inline": 2, "cm": 5, "web": 6, "checked": 6, "pvc": 7}
	for _, r := range ev.Status.Results {
		if r.Total != want[r.Dataset] || r.Completed != r.Total || r.Errored != 0 || r.Metrics["exact_match"] != "1.0000" {
			t.Errorf("dataset %s: %+v, want %d samples all correct", r.Dataset, r, want[r.Dataset])
		}
		delete(want, r.Dataset)
	}
	if len(want) != 0 {
		t.Errorf("no results for %v", want)
	}
	recs, _ := fetchRecords(t, ns, "sources")
	exactlyOnce(t, recs, 26)
}
