// Package chart tests the Helm chart charts/proctor with the pinned helm binary
// (`make helm`): `helm lint --strict`, and `helm template` output decoded into
// objects and compared with what the chart must render and with the kustomize
// manifests of config/ it mirrors. TestDocsCommands runs the docs' kubectl and
// helm commands, the chart's install among them, against a real kube-apiserver.
package chart

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

const (
	release   = "proctor"
	namespace = "proctor-system"
	// The image the chart's defaults name: image.repository and the appVersion.
	defaultImage = "ghcr.io/proctor-dev/proctor:v0.1.0"
)

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the test's source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// envTool is the program the environment variable env names, if it names
// one (failing the test if it cannot be found).
func envTool(t *testing.T, env string) (string, bool) {
	t.Helper()
	h := os.Getenv(env)
	if h == "" {
		return "", false
	}
	// go test runs in test/chart: a relative path means the repository's root.
	if strings.ContainsRune(h, filepath.Separator) && !filepath.IsAbs(h) {
		h = filepath.Join(repoRoot(t), h)
	}
	path, err := exec.LookPath(h)
	if err != nil {
		t.Fatalf("$%s: %v", env, err)
	}
	return path, true
}

// helmBinary is $HELM, else bin/helm (the link `make helm` maintains), else the
// newest bin/helm-VERSION. A missing helm fails the tests: skipping would pass
// for a green run.
func helmBinary(t *testing.T) string {
	t.Helper()
	if path, ok := envTool(t, "HELM"); ok {
		return path
	}
	bin := filepath.Join(repoRoot(t), "bin")
	if _, err := os.Stat(filepath.Join(bin, "helm")); err == nil {
		return filepath.Join(bin, "helm")
	}
	matches, _ := filepath.Glob(filepath.Join(bin, "helm-v*"))
	var best string
	var bestV *version.Version
	for _, m := range matches {
		v, err := version.ParseSemantic(strings.TrimPrefix(filepath.Base(m), "helm-"))
		if err == nil && (bestV == nil || v.GreaterThan(bestV)) {
			best, bestV = m, v
		}
	}
	if best == "" {
		t.Fatalf("no helm binary in %s: run `make helm` (builds the pinned Helm once), or set $HELM", bin)
	}
	return best
}

// chartDir is the chart's directory. Its files are read here once, only so
// that go test's cache sees them: helm reads them in another process, which
// the cache does not watch, and an edited chart must not pass from the cache.
func chartDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "charts", "proctor")
	readChart.Do(func() { readChartErr = readAll(dir) })
	if readChartErr != nil {
		t.Fatal(readChartErr)
	}
	return dir
}

var (
	readChart    sync.Once
	readChartErr error
)

// readAll reads every file under dir, only so that go test's cache sees
// them: a tool run in another process reads them too, which the cache does
// not watch.
func readAll(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		_, err = os.ReadFile(path)
		return err
	})
}

// helm runs the helm binary with args and returns its standard output.
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	// Keep Helm off the user's configuration, caches and clusters.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// valuesFile writes values (YAML) to a file for helm's -f.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// objects is a render, keyed by "Kind namespace/name" ("Kind name" when
// cluster-scoped).
type objects map[string]*unstructured.Unstructured

func key(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decode decodes YAML documents (what, for errors) into objects, skipping
// empty ones. Through JSON and unstructured's decoder, so that integers are
// int64 as the unstructured helpers expect, not float64.
func decode(t *testing.T, what string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range docSeparator.Split(string(data), -1) {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("decoding %s: %v\n%s", what, err, doc)
		}
		if s := strings.TrimSpace(string(j)); s == "null" || s == "{}" {
			continue // comments only
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			t.Fatalf("decoding %s: %v\n%s", what, err, doc)
		}
		out = append(out, o)
	}
	return out
}

// render runs `helm template` as release rel in namespace ns with values.
func render(t *testing.T, rel, ns, values string) objects {
	t.Helper()
	out := helm(t, "template", rel, chartDir(t),
		"--namespace", ns, "-f", valuesFile(t, values))
	objs := objects{}
	for _, o := range decode(t, "helm template's output", out) {
		if _, dup := objs[key(o)]; dup {
			t.Fatalf("%s rendered twice", key(o))
		}
		objs[key(o)] = o
	}
	return objs
}

func (objs objects) keys() []string {
	keys := make([]string, 0, len(objs))
	for k := range objs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// get returns the object of key k, failing the test if there is none.
func (objs objects) get(t *testing.T, k string) *unstructured.Unstructured {
	t.Helper()
	o, ok := objs[k]
	if !ok {
		t.Fatalf("no %s in the render; it has %v", k, objs.keys())
	}
	return o
}

// summary is what the render cases compare: the object inventory and the
// manager's Deployment in detail.
type summary struct {
	Objects            []string
	Replicas           int64
	ServiceAccountName string
	Image              string
	Args               []string
	Env                map[string]string
	Ports              []string
	// Subjects of every RoleBinding and ClusterRoleBinding.
	Subjects []string
	// CRDAnnotations are nil when no CRD is rendered.
	CRDAnnotations map[string]string
}

func summarize(t *testing.T, objs objects) summary {
	t.Helper()
	s := summary{Objects: objs.keys(), Env: map[string]string{}}
	d := objs.get(t, "Deployment "+namespace+"/proctor-controller-manager")
	s.Replicas, _, _ = unstructured.NestedInt64(d.Object, "spec", "replicas")
	s.ServiceAccountName, _, _ = unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("want one container, got %d", len(containers))
	}
	c := containers[0].(map[string]any)
	s.Image, _, _ = unstructured.NestedString(c, "image")
	s.Args, _, _ = unstructured.NestedStringSlice(c, "args")
	env, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range env {
		e := e.(map[string]any)
		name, _, _ := unstructured.NestedString(e, "name")
		if v, ok, _ := unstructured.NestedString(e, "value"); ok {
			s.Env[name] = v
		} else if f, ok, _ := unstructured.NestedString(e, "valueFrom", "fieldRef", "fieldPath"); ok {
			s.Env[name] = "fieldRef:" + f
		} else if ref, ok, _ := unstructured.NestedStringMap(e, "valueFrom", "secretKeyRef"); ok {
			s.Env[name] = "secret:" + ref["name"] + "/" + ref["key"]
		}
	}
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	for _, p := range ports {
		p := p.(map[string]any)
		name, _, _ := unstructured.NestedString(p, "name")
		port, _, _ := unstructured.NestedInt64(p, "containerPort")
		s.Ports = append(s.Ports, name+":"+strconv.FormatInt(port, 10))
	}
	// The Deployment and the metrics Service must select the manager's pods.
	podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
	selectors := map[string][]string{"Deployment": {"spec", "selector", "matchLabels"}, "Service": {"spec", "selector"}}
	for _, k := range s.Objects {
		o := objs[k]
		if path, ok := selectors[o.GetKind()]; ok {
			sel, _, _ := unstructured.NestedStringMap(o.Object, path...)
			if len(sel) == 0 {
				t.Errorf("%s: no selector", k)
			}
			for l, v := range sel {
				if podLabels[l] != v {
					t.Errorf("%s: selects %s=%s, the manager's pods have %q", k, l, v, podLabels[l])
				}
			}
		}
		switch o.GetKind() {
		case "RoleBinding", "ClusterRoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, sub := range subjects {
				sub := sub.(map[string]any)
				s.Subjects = append(s.Subjects, sub["kind"].(string)+" "+sub["namespace"].(string)+"/"+sub["name"].(string))
			}
		case "CustomResourceDefinition":
			s.CRDAnnotations = o.GetAnnotations()
		}
	}
	sort.Strings(s.Subjects)
	s.Subjects = compact(s.Subjects)
	return s
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// defaults is the summary of a render with the chart's default values.
func defaults() summary {
	return summary{
		Objects: []string{
			"ClusterRole proctor-evaluation-editor-role",
			"ClusterRole proctor-evaluation-viewer-role",
			"ClusterRole proctor-manager-role",
			"ClusterRole proctor-metrics-auth-role",
			"ClusterRole proctor-metrics-reader",
			"ClusterRole proctor-modelendpoint-admin-role",
			"ClusterRole proctor-modelendpoint-viewer-role",
			"ClusterRole proctor-pacer-auth-role",
			"ClusterRoleBinding proctor-manager-rolebinding",
			"ClusterRoleBinding proctor-metrics-auth-rolebinding",
			"ClusterRoleBinding proctor-pacer-auth-rolebinding",
			"CustomResourceDefinition evaluations.proctor.dev",
			"CustomResourceDefinition modelendpoints.proctor.dev",
			"CustomResourceDefinition modelquotas.proctor.dev",
			"Deployment proctor-system/proctor-controller-manager",
			"Role proctor-system/proctor-leader-election-role",
			"RoleBinding proctor-system/proctor-leader-election-rolebinding",
			"Service proctor-system/proctor-controller-manager-metrics-service",
			"Service proctor-system/proctor-pacer",
			"ServiceAccount proctor-system/proctor-controller-manager",
			"ValidatingAdmissionPolicy proctor-large-inline-datasets",
			"ValidatingAdmissionPolicyBinding proctor-large-inline-datasets",
		},
		Replicas:           1,
		ServiceAccountName: "proctor-controller-manager",
		Image:              defaultImage,
		Args: []string{
			"manager",
			"--leader-elect",
			"--health-probe-bind-address=:8081",
			"--metrics-bind-address=:8443",
			"--pacer-bind-address=:8082",
			"--pacer-url=http://proctor-pacer.proctor-system.svc:8082",
			"--storage-budget=67108864",
			"--namespace-storage-budget=2147483648",
			"--cluster-storage-budget=4294967296",
			"--keep-runners-for=1h",
			"--zap-log-level=info",
			"--agent-requests=cpu=50m,memory=128Mi",
			"--agent-limits=cpu=2,memory=2Gi",
			"--init-requests=cpu=10m,memory=32Mi",
			"--init-limits=cpu=500m,memory=128Mi",
			"--runner-requests=cpu=50m,memory=64Mi",
			"--runner-limits=cpu=1,memory=1Gi",
		},
		Env: map[string]string{
			"PROCTOR_RUNNER_IMAGE": defaultImage,
			"POD_NAMESPACE":        "fieldRef:metadata.namespace",
		},
		Ports:    []string{"https:8443", "pacer:8082", "health:8081"},
		Subjects: []string{"ServiceAccount proctor-system/proctor-controller-manager"},
		CRDAnnotations: map[string]string{
			"controller-gen.kubebuilder.io/version": controllerGenVersion,
			"helm.sh/resource-policy":               "keep",
		},
	}
}

// controllerGenVersion is the version annotation of config/crd/bases' CRD.
var controllerGenVersion = func() string {
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "config", "crd", "bases", "proctor.dev_evaluations.yaml"))
	if err != nil {
		return "unreadable: " + err.Error()
	}
	var crd struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return "unparsable: " + err.Error()
	}
	return crd.Metadata.Annotations["controller-gen.kubebuilder.io/version"]
}()

// without returns list without the items of drop.
func without(list []string, drop ...string) []string {
	var out []string
	for _, v := range list {
		found := false
		for _, d := range drop {
			found = found || v == d
		}
		if !found {
			out = append(out, v)
		}
	}
	return out
}

// replaced is list with old replaced by new, where it stands.
func replaced(list []string, was, now string) []string {
	out := append([]string(nil), list...)
	for i, v := range out {
		if v == was {
			out[i] = now
		}
	}
	return out
}

func with(list []string, add ...string) []string {
	out := append(append([]string(nil), list...), add...)
	sort.Strings(out)
	return out
}

func TestRender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values string
		// want edits the default summary into the expected one.
		want func(*summary)
	}{
		{name: "defaults", want: func(*summary) {}},
		{
			name:   "runner image",
			values: "runner: {image: registry.example/runner:v2}",
			want:   func(s *summary) { s.Env["PROCTOR_RUNNER_IMAGE"] = "registry.example/runner:v2" },
		},
		{
			// The runner follows the manager's image unless it is set.
			name:   "image tag",
			values: "image: {repository: registry.example/proctor, tag: v9.9.9}",
			want: func(s *summary) {
				s.Image = "registry.example/proctor:v9.9.9"
				s.Env["PROCTOR_RUNNER_IMAGE"] = "registry.example/proctor:v9.9.9"
			},
		},
		{
			name:   "watched namespaces",
			values: "watchNamespaces: [a, b]",
			want: func(s *summary) {
				// The ClusterRole stays, with only the rules on cluster-scoped
				// resources (ModelQuotas), which a Role cannot hold.
				s.Objects = with(s.Objects,
					"Role a/proctor-manager-role", "RoleBinding a/proctor-manager-rolebinding",
					"Role b/proctor-manager-role", "RoleBinding b/proctor-manager-rolebinding")
				s.Args = append(s.Args, "--watch-namespaces=a,b")
			},
		},
		{
			name:   "results store",
			values: "resultsStore: {url: s3://evals/runs, endpoint: 'http://seaweedfs.store:8333', region: eu-west-1, pathStyle: true, credentialsSecret: results-s3}",
			want: func(s *summary) {
				s.Args = slices.Insert(s.Args, slices.Index(s.Args, "--zap-log-level=info"),
					"--results-store=s3://evals/runs", "--results-store-endpoint=http://seaweedfs.store:8333",
					"--results-store-region=eu-west-1", "--results-store-path-style")
				s.Env["AWS_ACCESS_KEY_ID"] = "secret:results-s3/AWS_ACCESS_KEY_ID"
				s.Env["AWS_SECRET_ACCESS_KEY"] = "secret:results-s3/AWS_SECRET_ACCESS_KEY"
			},
		},
		{
			name:   "default Kueue queue",
			values: "scheduling: {queueName: evals}",
			want: func(s *summary) {
				s.Args = slices.Insert(s.Args, slices.Index(s.Args, "--zap-log-level=info"), "--default-queue-name=evals")
			},
		},
		{
			name:   "traces",
			values: "monitoring: {tracing: {endpoint: 'http://otel-collector.monitoring:4317', protocol: grpc}}",
			want: func(s *summary) {
				s.Args = slices.Insert(s.Args, slices.Index(s.Args, "--zap-log-level=info"),
					"--runner-traces-endpoint=http://otel-collector.monitoring:4317", "--runner-traces-protocol=grpc")
			},
		},
		{
			// The pod's own AWS identity (IRSA): no Secret.
			name:   "results store without a Secret",
			values: "resultsStore: {url: s3://evals/runs}",
			want: func(s *summary) {
				s.Args = slices.Insert(s.Args, slices.Index(s.Args, "--zap-log-level=info"), "--results-store=s3://evals/runs")
			},
		},
		{
			name:   "no CRD",
			values: "crds: {install: false}",
			want: func(s *summary) {
				s.Objects = without(s.Objects, "CustomResourceDefinition evaluations.proctor.dev", "CustomResourceDefinition modelendpoints.proctor.dev",
					"CustomResourceDefinition modelquotas.proctor.dev")
				s.CRDAnnotations = nil
			},
		},
		{
			name:   "CRD not kept",
			values: "crds: {keep: false}",
			want:   func(s *summary) { delete(s.CRDAnnotations, "helm.sh/resource-policy") },
		},
		{
			name:   "no metrics",
			values: "metrics: {enabled: false}",
			want: func(s *summary) {
				s.Objects = without(s.Objects,
					"ClusterRole proctor-metrics-auth-role",
					"ClusterRole proctor-metrics-reader",
					"ClusterRoleBinding proctor-metrics-auth-rolebinding",
					"Service proctor-system/proctor-controller-manager-metrics-service")
				s.Args = replaced(s.Args, "--metrics-bind-address=:8443", "--metrics-bind-address=0")
				s.Ports = []string{"pacer:8082", "health:8081"}
			},
		},
		{
			name:   "no pacer",
			values: "pacer: {enabled: false}",
			want: func(s *summary) {
				s.Objects = without(s.Objects,
					"ClusterRole proctor-pacer-auth-role",
					"ClusterRoleBinding proctor-pacer-auth-rolebinding",
					"Service proctor-system/proctor-pacer")
				s.Args = without(s.Args, "--pacer-bind-address=:8082", "--pacer-url=http://proctor-pacer.proctor-system.svc:8082")
				s.Ports = []string{"https:8443", "health:8081"}
			},
		},
		{
			name:   "no admission warnings",
			values: "admissionWarnings: {inlineSamples: 0}",
			want: func(s *summary) {
				s.Objects = without(s.Objects,
					"ValidatingAdmissionPolicy proctor-large-inline-datasets",
					"ValidatingAdmissionPolicyBinding proctor-large-inline-datasets")
			},
		},
		{
			name:   "metrics port",
			values: "metrics: {port: 9443}",
			want: func(s *summary) {
				s.Args = replaced(s.Args, "--metrics-bind-address=:8443", "--metrics-bind-address=:9443")
				s.Ports[0] = "https:9443"
			},
		},
		{
			// Two replicas elect a leader even when told not to.
			name:   "two replicas",
			values: "{replicaCount: 2, leaderElection: {enabled: false}}",
			want:   func(s *summary) { s.Replicas = 2 },
		},
		{
			name:   "no leader election",
			values: "leaderElection: {enabled: false}",
			want: func(s *summary) {
				s.Objects = without(s.Objects,
					"Role proctor-system/proctor-leader-election-role",
					"RoleBinding proctor-system/proctor-leader-election-rolebinding")
				s.Args = without(s.Args, "--leader-elect")
			},
		},
		{
			// Merged into the defaults; null removes.
			name:   "runner pods' default resources",
			values: "runner: {defaultResources: {agent: {limits: {memory: 8Gi}}, init: {requests: null, limits: null}}}",
			want: func(s *summary) {
				s.Args = replaced(s.Args, "--agent-limits=cpu=2,memory=2Gi", "--agent-limits=cpu=2,memory=8Gi")
				s.Args = replaced(s.Args, "--init-requests=cpu=10m,memory=32Mi", "--init-requests=")
				s.Args = replaced(s.Args, "--init-limits=cpu=500m,memory=128Mi", "--init-limits=")
			},
		},
		{
			name:   "log level",
			values: "logLevel: debug",
			want:   func(s *summary) { s.Args = replaced(s.Args, "--zap-log-level=info", "--zap-log-level=debug") },
		},
		{
			name:   "existing service account",
			values: "serviceAccount: {create: false, name: existing}",
			want: func(s *summary) {
				s.Objects = without(s.Objects, "ServiceAccount proctor-system/proctor-controller-manager")
				s.ServiceAccountName = "existing"
				s.Subjects = []string{"ServiceAccount proctor-system/existing"}
			},
		},
		{
			name:   "extra arguments and environment",
			values: "{extraArgs: [--zap-devel], extraEnv: [{name: GOMEMLIMIT, value: 200MiB}]}",
			want: func(s *summary) {
				s.Args = append(s.Args, "--zap-devel")
				s.Env["GOMEMLIMIT"] = "200MiB"
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := defaults()
			tc.want(&want)
			got := summarize(t, render(t, release, namespace, tc.values))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("render (-want +got):\n%s", diff)
			}
		})
	}
}

// valueSets are the values of the lint and naming tests: the defaults and every
// switch flipped.
var valueSets = map[string]string{
	"defaults":       "",
	"namespaced":     "watchNamespaces: [a, b]",
	"minimal":        "crds: {install: false}\nmetrics: {enabled: false}\nleaderElection: {enabled: false}\nserviceAccount: {create: false}",
	"everything set": everythingSet,
}

const everythingSet = `
image: {repository: registry.example/proctor, tag: v1.2.3, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
runner: {image: registry.example/runner:v1}
replicaCount: 3
logLevel: "2"
watchNamespaces: [team-a]
serviceAccount: {annotations: {example.com/role: proctor}}
podAnnotations: {example.com/scrape: "false"}
podLabels: {team: evals}
priorityClassName: high
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]}}}
crds: {keep: false}
monitoring:
  podMonitor: {enabled: true, interval: 5s, labels: {release: kube-prometheus}}
  serviceMonitor: {enabled: true, labels: {release: kube-prometheus}}
  dashboard: {enabled: true, annotations: {grafana_folder: Proctor}}
`

func TestLint(t *testing.T) {
	t.Parallel()
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			helm(t, "lint", "--strict", chartDir(t),
				"--namespace", namespace, "-f", valuesFile(t, values))
		})
	}
}

// TestNamesCarryFullname: every object but the CRD (whose name the API fixes)
// is named after the release, so releases never take each other's objects.
func TestNamesCarryFullname(t *testing.T) {
	t.Parallel()
	for name, values := range valueSets {
		for _, tc := range []struct{ release, values, prefix string }{
			{"evals", values, "evals-proctor-"},
			{"my-proctor", values, "my-proctor-"},
			{"evals", values + "\nfullnameOverride: custom", "custom-"},
		} {
			t.Run(name+"/"+tc.release+"/"+tc.prefix, func(t *testing.T) {
				t.Parallel()
				objs := render(t, tc.release, namespace, tc.values)
				for _, k := range objs.keys() {
					o := objs[k]
					if o.GetKind() == "CustomResourceDefinition" {
						continue
					}
					if !strings.HasPrefix(o.GetName(), tc.prefix) {
						t.Errorf("%s: name lacks the prefix %q", k, tc.prefix)
					}
					if got := o.GetLabels()["app.kubernetes.io/instance"]; got != tc.release {
						t.Errorf("%s: label app.kubernetes.io/instance = %q, want %q", k, got, tc.release)
					}
				}
			})
		}
	}
}

// TestTwoReleases: two releases in one namespace (watching the same namespaces
// or all of them) share no object but the CRD, which the second one skips.
func TestTwoReleases(t *testing.T) {
	t.Parallel()
	for _, values := range []string{"", "watchNamespaces: [a, b]"} {
		one := render(t, "one", namespace, values)
		two := render(t, "two", namespace, values+"\ncrds: {install: false}")
		var clashes []string
		for k := range two {
			if _, ok := one[k]; ok {
				clashes = append(clashes, k)
			}
		}
		sort.Strings(clashes)
		if diff := cmp.Diff([]string(nil), clashes); diff != "" {
			t.Errorf("values %q: objects both releases render (-want +got):\n%s", values, diff)
		}
		// Without crds.install=false, the CRDs are the one clash.
		for k := range render(t, "two", namespace, values) {
			if _, ok := one[k]; ok && !strings.HasPrefix(k, "CustomResourceDefinition ") {
				t.Errorf("values %q: both releases render %s", values, k)
			}
		}
	}
}

// readObjects decodes the YAML documents of a file in the repository.
func readObjects(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, rel, data)
}

func rules(t *testing.T, o *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	data, err := yaml.Marshal(o.Object["rules"])
	if err != nil {
		t.Fatal(err)
	}
	var r []rbacv1.PolicyRule
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		t.Fatalf("%s: rules: %v", key(o), err)
	}
	return r
}

// TestRulesMatchConfig: the chart grants what config/rbac grants, the
// generated manager rules and the hand-copied roles alike.
func TestRulesMatchConfig(t *testing.T) {
	t.Parallel()
	all := render(t, release, namespace, "")
	namespaced := render(t, release, namespace, "watchNamespaces: [a, b]")
	roleYAML := readObjects(t, "config/rbac/role.yaml")
	if len(roleYAML) != 1 {
		t.Fatalf("config/rbac/role.yaml: want the one ClusterRole manager-role, found %d objects", len(roleYAML))
	}
	managerRules := rules(t, roleYAML[0])
	// Rules on cluster-scoped resources go to a ClusterRole when namespaces are
	// listed; the rest to each namespace's Role.
	var namespacedRules, clusterRules []rbacv1.PolicyRule
	for _, r := range managerRules {
		isCluster := func(res string) bool { return strings.HasPrefix(res, "modelquotas") }
		if c := slices.DeleteFunc(slices.Clone(r.Resources), func(res string) bool { return !isCluster(res) }); len(c) > 0 {
			cr := *r.DeepCopy()
			cr.Resources = c
			clusterRules = append(clusterRules, cr)
		}
		if n := slices.DeleteFunc(slices.Clone(r.Resources), isCluster); len(n) > 0 {
			nr := *r.DeepCopy()
			nr.Resources = n
			namespacedRules = append(namespacedRules, nr)
		}
	}

	for _, tc := range []struct {
		config string // a file of config/rbac
		chart  *unstructured.Unstructured
		want   []rbacv1.PolicyRule // nil: the config file's rules
	}{
		{config: "role.yaml", chart: all.get(t, "ClusterRole proctor-manager-role")},
		// With namespaces listed, each Role holds the namespaced rules and the
		// ClusterRole those on ModelQuotas (cluster-scoped).
		{config: "role.yaml", chart: namespaced.get(t, "Role a/proctor-manager-role"), want: namespacedRules},
		{config: "role.yaml", chart: namespaced.get(t, "Role b/proctor-manager-role"), want: namespacedRules},
		{config: "role.yaml", chart: namespaced.get(t, "ClusterRole proctor-manager-role"), want: clusterRules},
		{config: "leader_election_role.yaml", chart: all.get(t, "Role proctor-system/proctor-leader-election-role")},
		{config: "metrics_auth_role.yaml", chart: all.get(t, "ClusterRole proctor-metrics-auth-role")},
		{config: "metrics_reader_role.yaml", chart: all.get(t, "ClusterRole proctor-metrics-reader")},
		{config: "pacer_auth_role.yaml", chart: all.get(t, "ClusterRole proctor-pacer-auth-role")},
		{config: "evaluation_editor_role.yaml", chart: all.get(t, "ClusterRole proctor-evaluation-editor-role")},
		{config: "evaluation_viewer_role.yaml", chart: all.get(t, "ClusterRole proctor-evaluation-viewer-role")},
		{config: "modelendpoint_admin_role.yaml", chart: all.get(t, "ClusterRole proctor-modelendpoint-admin-role")},
		{config: "modelendpoint_viewer_role.yaml", chart: all.get(t, "ClusterRole proctor-modelendpoint-viewer-role")},
	} {
		objs := readObjects(t, filepath.Join("config", "rbac", tc.config))
		if len(objs) != 1 {
			t.Fatalf("config/rbac/%s: want one object, found %d", tc.config, len(objs))
		}
		want := tc.want
		if want == nil {
			want = rules(t, objs[0])
		}
		if diff := cmp.Diff(want, rules(t, tc.chart)); diff != "" {
			t.Errorf("%s against config/rbac/%s (-want +got):\n%s", key(tc.chart), tc.config, diff)
		}
		// The aggregation labels decide who gets the roles.
		for k, v := range objs[0].GetLabels() {
			if strings.HasPrefix(k, "rbac.authorization.k8s.io/") && tc.chart.GetLabels()[k] != v {
				t.Errorf("%s: label %s = %q, config/rbac/%s has %q", key(tc.chart), k, tc.chart.GetLabels()[k], tc.config, v)
			}
		}
	}
}

// TestAdmissionPolicyMatchesConfig: the chart's admission policy is
// config/policy's, with its threshold from admissionWarnings.inlineSamples,
// and its binding names it, only warns, and with watchNamespaces binds it in
// those namespaces only (two releases watching their own namespaces each warn
// once, in theirs).
func TestAdmissionPolicyMatchesConfig(t *testing.T) {
	t.Parallel()
	var configSpec []byte
	for _, o := range readObjects(t, "config/policy/large_inline_datasets.yaml") {
		if o.GetKind() == "ValidatingAdmissionPolicy" {
			var err error
			if configSpec, err = json.Marshal(o.Object["spec"]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if configSpec == nil {
		t.Fatal("config/policy/large_inline_datasets.yaml has no ValidatingAdmissionPolicy")
	}
	for _, tc := range []struct {
		values     string
		threshold  string
		namespaces []any // the binding's; nil: every namespace
	}{
		{"", "1000", nil},
		{"admissionWarnings: {inlineSamples: 250}", "250", nil},
		{"watchNamespaces: [a, b]", "1000", []any{"a", "b"}},
	} {
		objs := render(t, release, namespace, tc.values)
		policy := objs.get(t, "ValidatingAdmissionPolicy proctor-large-inline-datasets")
		// config/policy's threshold is the chart's default.
		wantSpec := bytes.ReplaceAll(configSpec, []byte("1000"), []byte(tc.threshold))
		var wantObj any
		if err := json.Unmarshal(wantSpec, &wantObj); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantObj, policy.Object["spec"]); diff != "" {
			t.Errorf("values %q: %s differs from config/policy (-config +chart):\n%s", tc.values, key(policy), diff)
		}
		binding := objs.get(t, "ValidatingAdmissionPolicyBinding proctor-large-inline-datasets")
		name, _, _ := unstructured.NestedString(binding.Object, "spec", "policyName")
		actions, _, _ := unstructured.NestedStringSlice(binding.Object, "spec", "validationActions")
		if name != policy.GetName() || !slices.Equal(actions, []string{"Warn"}) {
			t.Errorf("%s: policyName %q and validationActions %v, want %q and [Warn]", key(binding), name, actions, policy.GetName())
		}
		var want any
		if tc.namespaces != nil {
			// The API server labels every namespace with its name.
			want = map[string]any{"namespaceSelector": map[string]any{"matchExpressions": []any{
				map[string]any{"key": "kubernetes.io/metadata.name", "operator": "In", "values": tc.namespaces},
			}}}
		}
		if diff := cmp.Diff(want, binding.Object["spec"].(map[string]any)["matchResources"]); diff != "" {
			t.Errorf("values %q: %s's matchResources (-want +got):\n%s", tc.values, key(binding), diff)
		}
	}
}

// crdFiles are the CRDs controller-gen writes to config/crd/bases.
func crdFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases (%v)", err)
	}
	return files
}

// TestCRDsMatchConfig: the chart's CRDs are config/crd/bases' (only metadata
// differs), so a stale chart fails here even without `make verify`.
func TestCRDsMatchConfig(t *testing.T) {
	t.Parallel()
	objs := render(t, release, namespace, "")
	files := crdFiles(t)
	crdGK := schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
	var rendered int
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() == crdGK {
			rendered++
		}
	}
	if rendered != len(files) {
		t.Errorf("the chart renders %d CRDs, config/crd/bases has %d", rendered, len(files))
	}
	for _, f := range files {
		rel, _ := filepath.Rel(repoRoot(t), f)
		for _, want := range readObjects(t, rel) {
			got := objs.get(t, "CustomResourceDefinition "+want.GetName())
			for _, field := range []string{"apiVersion", "kind", "spec"} {
				if diff := cmp.Diff(want.Object[field], got.Object[field]); diff != "" {
					t.Errorf("%s: %s differs from %s; run `make manifests` (-config +chart):\n%s", key(got), field, rel, diff)
				}
			}
			for k, v := range want.GetAnnotations() {
				if got.GetAnnotations()[k] != v {
					t.Errorf("%s: annotation %s = %q, %s has %q", key(got), k, got.GetAnnotations()[k], rel, v)
				}
			}
		}
	}
}

// TestStrictDecode: every rendered object decodes into its Go type with no
// unknown field, so a misspelt or misplaced field fails here, not at install.
func TestStrictDecode(t *testing.T) {
	t.Parallel()
	types := map[string]func() any{
		"apps/v1 Deployment": func() any { return &appsv1.Deployment{} },
		"v1 Service":         func() any { return &corev1.Service{} },
		"v1 ServiceAccount":  func() any { return &corev1.ServiceAccount{} },
		"rbac.authorization.k8s.io/v1 ClusterRole":         func() any { return &rbacv1.ClusterRole{} },
		"rbac.authorization.k8s.io/v1 ClusterRoleBinding":  func() any { return &rbacv1.ClusterRoleBinding{} },
		"rbac.authorization.k8s.io/v1 Role":                func() any { return &rbacv1.Role{} },
		"rbac.authorization.k8s.io/v1 RoleBinding":         func() any { return &rbacv1.RoleBinding{} },
		"apiextensions.k8s.io/v1 CustomResourceDefinition": func() any { return &apiextensionsv1.CustomResourceDefinition{} },
		"v1 ConfigMap": func() any { return &corev1.ConfigMap{} },
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy":        func() any { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding": func() any { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
		"monitoring.coreos.com/v1 PodMonitor":                              func() any { return &monitoringv1.PodMonitor{} },
		"monitoring.coreos.com/v1 ServiceMonitor":                          func() any { return &monitoringv1.ServiceMonitor{} },
	}
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for k, o := range render(t, release, namespace, values) {
				newObj, ok := types[o.GetAPIVersion()+" "+o.GetKind()]
				if !ok {
					t.Errorf("%s: unexpected %s %s", k, o.GetAPIVersion(), o.GetKind())
					continue
				}
				j, err := o.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				if err := yaml.UnmarshalStrict(j, newObj()); err != nil {
					t.Errorf("%s: %v", k, err)
				}
			}
		})
	}
}

// TestDashboard: the Grafana dashboard the chart ships is JSON Grafana
// reads (panels with targets), and every metric its queries name is one
// that Proctor (docs/reference/metrics.md) or controller-runtime serves.
func TestDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards", "proctor.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			for _, m := range regexp.MustCompile(`\b(proctor_\w+|controller_runtime_\w+)`).FindAllString(q.Expr, -1) {
				name := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(m, "")
				if !bytes.Contains(doc, []byte("`"+name+"`")) {
					t.Errorf("panel %q queries %s, which docs/reference/metrics.md does not list", p.Title, m)
				}
			}
		}
	}
	if dash.UID == "" || queries < 10 {
		t.Errorf("uid %q, %d queries", dash.UID, queries)
	}
	// The chart's ConfigMap holds it as it is.
	objs := render(t, release, namespace, "monitoring: {dashboard: {enabled: true}}")
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-dashboard") {
			data, _, _ := unstructured.NestedString(o.Object, "data", "proctor.json")
			if data != strings.TrimSuffix(string(b), "\n") || o.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("the dashboard's ConfigMap: labels %v, data %d bytes (the file: %d)", o.GetLabels(), len(data), len(b))
			}
			return
		}
	}
	t.Error("no dashboard ConfigMap")
}
