package chart

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/testutil"
)

// kubeVersion is the Kubernetes release whose binaries hack/install-kube.sh
// builds into bin/kube-VERSION (the Makefile's KUBE_VERSION).
const kubeVersion = "v1.36.3"

// docsName is what the docs' NAME stands for here: the Evaluation of
// docs/examples/openai-cluster.yaml, which the README's quickstart applies.
const docsName = "openai"

// A docs command is run in one of these phases, in this order, as a reader
// following the pages would: install, set up, look, upgrade, uninstall.
const (
	phaseInstall = iota
	phaseSetUp
	phaseLook
	phaseUpgrade
	phaseUninstall
)

// docsScript is one thing the docs tell a reader to type: a kubectl or helm
// command, or a whole block whose lines only work together (a job in the
// background and the lines that wait for it).
type docsScript struct {
	where  string // file:line
	text   string
	phase  int
	output []string // what a console block shows it print
}

var (
	kubectlOrHelm = regexp.MustCompile(`^(kubectl|helm)\s`)
	// A block with a background job (`cmd &`) or shell control flow runs whole.
	compound   = regexp.MustCompile(`(^|\s)&(\s|$)|^(if|wait|fi)\b`)
	createdAs  = regexp.MustCompile(`^kubectl create secret generic (\S+)`)
	watchFlag  = regexp.MustCompile(`\s(-w|--watch)(\s|$)`)
	nameHolder = regexp.MustCompile(`\bNAME\b`)
	looking    = regexp.MustCompile(`^kubectl (-n \S+ )?(get|describe|wait|rollout status)\s`)
)

// docsScripts lists the kubectl and helm commands of the docs' shell blocks.
func docsScripts(t *testing.T, root string) []docsScript {
	t.Helper()
	files, err := testutil.DocsFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []docsScript
	seen := map[string]bool{}
	for _, path := range files {
		if filepath.Base(path) == "design.md" {
			continue // decisions, not instructions
		}
		cmds, err := testutil.DocsCommands(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		whole, ours := map[int]bool{}, map[int]bool{}
		for _, c := range cmds {
			whole[c.Block] = whole[c.Block] || compound.MatchString(c.Text)
			ours[c.Block] = ours[c.Block] || kubectlOrHelm.MatchString(c.Text)
		}
		done := map[int]bool{}
		for _, c := range cmds {
			where := rel + ":" + strconv.Itoa(c.Line)
			switch {
			case whole[c.Block] && ours[c.Block] && !done[c.Block]:
				done[c.Block] = true
				var lines []string
				for _, d := range cmds {
					if d.Block == c.Block {
						lines = append(lines, d.Text)
					}
				}
				if text := strings.Join(lines, "\n"); !seen[text] {
					seen[text] = true
					out = append(out, docsScript{where: where, text: text, phase: phaseLook})
				}
			case whole[c.Block] || !kubectlOrHelm.MatchString(c.Text) || seen[c.Text]:
				// The rest of a block run whole, another program, or a
				// command another page has too (it runs once).
			default:
				seen[c.Text] = true
				out = append(out, docsScript{where: where, text: c.Text, phase: phaseOf(c.Text), output: c.Output})
			}
		}
	}
	return out
}

func phaseOf(cmd string) int {
	switch {
	case strings.HasPrefix(cmd, "helm install "):
		return phaseInstall
	case strings.HasPrefix(cmd, "helm upgrade "):
		return phaseUpgrade
	case strings.HasPrefix(cmd, "helm uninstall "):
		return phaseUninstall
	case looking.MatchString(cmd):
		return phaseLook
	}
	return phaseSetUp
}

// TestDocsCommands runs every kubectl and helm command of the README's, the
// chart's and the docs' shell blocks as written, from a checkout, against a
// real kube-apiserver that has nothing of Proctor's until the docs' helm
// install: the chart installs, upgrades and uninstalls with the values they
// name, the samples and examples they apply pass admission, the columns and
// JSONPaths they show exist, and their waits end. The cluster has no nodes and
// no controllers, so what the manager and the Deployment's ReplicaSet would
// write (a run's end, its results ConfigMap, a ready Deployment) the test
// writes instead, as they would. A command the phases do not know runs among
// the set-up commands: a new one is tried without being listed here.
func TestDocsCommands(t *testing.T) {
	root := repoRoot(t)
	scripts := docsScripts(t, root)
	if len(scripts) < 20 {
		t.Fatalf("found %d kubectl and helm commands in the docs, want more: is the parser still finding them?", len(scripts))
	}
	d := startDocsCluster(t, root)

	// Install: every variant, each over an uninstalled release (the CRDs the
	// chart keeps are taken over again, as the chart's README says).
	installed := false
	for _, s := range scripts {
		if s.phase != phaseInstall {
			continue
		}
		if installed {
			d.mustRun(t, "helm uninstall proctor -n proctor-system")
		}
		d.check(t, s)
		installed = true
	}
	if !installed {
		t.Fatal("the docs install the chart nowhere")
	}
	d.deploymentReady(t, "proctor-system", "proctor-controller-manager")
	d.argoCD(t)
	for _, s := range scripts {
		if s.phase == phaseSetUp {
			if m := createdAs.FindStringSubmatch(s.text); m != nil {
				// Each page starts from a namespace without that Secret.
				d.mustRun(t, "kubectl delete secret --ignore-not-found "+m[1])
			}
			d.check(t, s)
		}
	}
	// What the manager writes when a run succeeds.
	d.succeeded(t, docsName)
	d.succeeded(t, "candidate")
	d.results(t, "nightly-results")
	for _, s := range scripts {
		if s.phase == phaseLook {
			d.check(t, s)
		}
	}
	// Upgrades, the one that lets the CRDs go last; then uninstall.
	var dropCRDs []docsScript
	for _, s := range scripts {
		switch {
		case s.phase == phaseUpgrade && strings.Contains(s.text, "crds.keep=false"):
			dropCRDs = append(dropCRDs, s)
		case s.phase == phaseUpgrade:
			d.check(t, s)
		}
	}
	var uninstall []docsScript
	for _, s := range scripts {
		if s.phase == phaseUninstall {
			uninstall = append(uninstall, s)
			d.check(t, s)
		}
	}
	if len(uninstall) == 0 {
		t.Fatal("the docs uninstall the chart nowhere")
	}
	// The CRDs stay (crds.keep), with every Evaluation.
	if out, err := d.run("kubectl get evaluation " + docsName); err != nil {
		t.Errorf("after %s, Evaluation %s is gone (%v): the chart keeps the CRDs\n%s", uninstall[0].text, docsName, err, out)
	}
	if len(dropCRDs) > 0 {
		d.mustRun(t, "helm install proctor charts/proctor -n proctor-system")
		for _, s := range append(dropCRDs, uninstall...) {
			d.check(t, s)
		}
		// The API server deletes a CRD once it has deleted its objects.
		if out, err := d.run("kubectl wait --for=delete crd/evaluations.proctor.dev --timeout=60s"); err != nil {
			t.Errorf("after helm upgrade --set crds.keep=false and helm uninstall, the CRD is still there (%v):\n%s", err, out)
		}
	}
}

// docsCluster is a kube-apiserver and a checkout to run the docs' commands
// in: the repository's charts, config and docs, and the files the docs tell
// the reader to write.
type docsCluster struct {
	c   client.Client
	dir string
	env []string
}

func startDocsCluster(t *testing.T, root string) *docsCluster {
	t.Helper()
	kube := filepath.Join(root, "bin", "kube-"+kubeVersion)
	tools := map[string]string{
		"kubectl": filepath.Join(kube, "kubectl"),
		"helm":    helmBinary(t),
		// jq as the docs' pipelines use it: gojq, pinned (make gojq).
		"jq": filepath.Join(root, "bin", "gojq"),
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		tools[name] = filepath.Join(kube, name)
	}
	for name, path := range tools {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: %v; make test-integration builds it", name, err)
		}
	}
	// Prometheus Operator's PodMonitor and ServiceMonitor, which the docs'
	// monitoring install creates (make test-integration fetches them).
	crds, _ := filepath.Glob(filepath.Join(root, "bin", "prometheus-operator-crds-v*"))
	if len(crds) == 0 {
		t.Fatal("no bin/prometheus-operator-crds-VERSION: make test-integration installs them (hack/install-prometheus-crds.sh)")
	}
	slices.Sort(crds)
	env := &envtest.Environment{BinaryAssetsDirectory: kube, CRDDirectoryPaths: crds[len(crds)-1:], ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	admin, err := env.AddUser(envtest.User{Name: "docs-reader", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	home := t.TempDir()
	bin := filepath.Join(home, "bin")
	dir := filepath.Join(home, "checkout")
	for _, d := range []string{bin, dir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"kubectl", "helm", "jq"} {
		if err := os.Symlink(tools[name], filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"charts", "config", "docs"} {
		// kubectl and helm read them (readAll).
		if err := readAll(filepath.Join(root, sub)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(root, sub), filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, "kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	// candidate.yaml, which gitops.md applies: the README's Evaluation as a
	// candidate.
	example, err := os.ReadFile(filepath.Join(root, "docs", "examples", "openai-cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	candidate := strings.Replace(string(example), "name: "+docsName+"\n", "name: candidate\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "candidate.yaml"), []byte(candidate), 0o644); err != nil {
		t.Fatal(err)
	}
	return &docsCluster{c: c, dir: dir, env: append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"),
		"HOME="+home,
		"HELM_CONFIG_HOME="+filepath.Join(home, "helm", "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "helm", "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "helm", "data"),
		"OPENAI_API_KEY=sk-docs-test",
	)}
}

// errStillRunning is a watch that was still watching when it was stopped.
var errStillRunning = errors.New("still running")

// start runs script with bash in the checkout; after stopAfter (if not 0) it
// stops the script, returning errStillRunning.
func (d *docsCluster) start(script string, stopAfter time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if stopAfter > 0 {
		ctx, cancel = context.WithTimeout(ctx, stopAfter)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = d.dir, d.env
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if stopAfter > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out.String(), errStillRunning
	}
	return out.String(), err
}

func (d *docsCluster) run(script string) (string, error) { return d.start(script, 0) }

func (d *docsCluster) mustRun(t *testing.T, script string) {
	t.Helper()
	if out, err := d.run(script); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// check runs one of the docs' scripts, with NAME as docsName: it must exit 0;
// a watch must still be watching after a few seconds, having printed its
// table's header; a console block's header must be the one printed.
func (d *docsCluster) check(t *testing.T, s docsScript) {
	t.Helper()
	script := nameHolder.ReplaceAllString(s.text, docsName)
	var stopAfter time.Duration
	if watchFlag.MatchString(script) {
		stopAfter = 3 * time.Second
	}
	out, err := d.start(script, stopAfter)
	switch {
	case stopAfter > 0 && !errors.Is(err, errStillRunning):
		t.Errorf("%s: %s\nended (%v) instead of watching:\n%s", s.where, s.text, err, out)
		return
	case stopAfter > 0 && !strings.HasPrefix(out, "NAME "):
		t.Errorf("%s: %s\nprinted no table while watching:\n%s", s.where, s.text, out)
		return
	case stopAfter == 0 && err != nil:
		t.Errorf("%s: %s\n%v:\n%s", s.where, s.text, err, out)
		return
	case strings.Contains(script, "jsonpath=") && strings.TrimSpace(out) == "":
		t.Errorf("%s: %s\nprinted nothing: its JSONPath names no field", s.where, s.text)
		return
	}
	t.Logf("%s: %s", s.where, s.text)
	if len(s.output) > 0 {
		want := strings.Fields(s.output[0])
		got := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		if strings.Join(want, " ") != strings.Join(got, " ") {
			t.Errorf("%s: %s\nthe docs show the columns %v; kubectl prints %v", s.where, s.text, want, got)
		}
	}
}

// deploymentReady writes the status a Deployment's controllers would once its
// pods are ready, so that `kubectl rollout status` ends.
func (d *docsCluster) deploymentReady(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var dep appsv1.Deployment
	if err := d.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &dep); err != nil {
		t.Fatalf("the chart's Deployment: %v", err)
	}
	n := int32(1)
	if dep.Spec.Replicas != nil {
		n = *dep.Spec.Replicas
	}
	dep.Status = appsv1.DeploymentStatus{
		ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
		},
	}
	if err := d.c.Status().Update(ctx, &dep); err != nil {
		t.Fatal(err)
	}
}

// argoCD makes what an Argo CD install has that gitops.md patches.
func (d *docsCluster) argoCD(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := d.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "argocd-cm"}, Data: map[string]string{"url": "https://argocd.example"}}
	if err := d.c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
}

// succeeded writes what the manager does when Evaluation name (of the default
// namespace, which the docs apply to) succeeds: its phase and conditions, and
// its results ConfigMap.
func (d *docsCluster) succeeded(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	var ev v1alpha1.Evaluation
	if err := d.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &ev); err != nil {
		t.Fatalf("Evaluation %s, which the docs apply: %v", name, err)
	}
	ev.Status.Phase = v1alpha1.PhaseSucceeded
	ev.Status.ObservedGeneration = ev.Generation
	for _, c := range []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSucceeded, Message: "every sample finished"},
		{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSucceeded},
		{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSucceeded},
	} {
		c.ObservedGeneration = ev.Generation
		meta.SetStatusCondition(&ev.Status.Conditions, c)
	}
	if err := d.c.Status().Update(ctx, &ev); err != nil {
		t.Fatal(err)
	}
	d.results(t, cluster.ResultsName(name))
}

// results makes a results ConfigMap, as the manager names and fills it.
func (d *docsCluster) results(t *testing.T, name string) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Labels: map[string]string{cluster.LabelManagedBy: cluster.ManagedBy}},
		Data: map[string]string{cluster.ResultsKeySummary: `{"results": []}` + "\n"},
	}
	if err := d.c.Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
