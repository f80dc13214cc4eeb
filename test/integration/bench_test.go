package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/testutil"
	"github.com/proctor-dev/proctor/test/fakellm"
)

// The operator's latency goals, against the test API server (`make bench`).

// BenchmarkApplyToFirstJob: from creating an Evaluation to its first Job. Goal < 1s.
func BenchmarkApplyToFirstJob(b *testing.B) {
	ns := newNamespace(b)
	_, url := fakeLLM(b, fakellm.Config{})
	startManager(b, ns)
	var lat []time.Duration
	// The first Evaluation waits for the new manager's caches to sync; users
	// apply to a manager that is already running, so it is not measured.
	for i := -1; i < max(b.N, 10); i++ {
		name := fmt.Sprintf("first-%d", i+1)
		start := time.Now()
		create(b, testutil.MakeEvaluation(name, ns).InlineDataset("d", 20).OpenAIModel("m", url).Scorer(v1alpha1.ScorerExactMatch).ShardSize(5).Obj())
		for {
			var jobs batchv1.JobList
			if err := k8sClient.List(context.Background(), &jobs, client.InNamespace(ns), client.MatchingLabels{"proctor.dev/evaluation": name}); err != nil {
				b.Fatal(err)
			}
			if len(jobs.Items) > 0 {
				break
			}
			if time.Since(start) > 30*time.Second {
				b.Fatal("no Job after 30s")
			}
			time.Sleep(2 * time.Millisecond)
		}
		if i >= 0 {
			lat = append(lat, time.Since(start))
		}
	}
	report(b, "apply-to-job", lat, time.Second)
}

// BenchmarkLastShardToSucceeded: from the last Job finishing to the Evaluation
// being Succeeded, its results gathered. Goal < 3s.
func BenchmarkLastShardToSucceeded(b *testing.B) {
	ns := newNamespace(b)
	_, url := fakeLLM(b, fakellm.Config{})
	startManager(b, ns)
	k := startKubelet(b, ns)
	var lat []time.Duration
	for i := range max(b.N, 5) {
		name := fmt.Sprintf("done-%d", i)
		create(b, testutil.MakeEvaluation(name, ns).InlineDataset("d", 40).OpenAIModel("a", url).OpenAIModel("b", url).
			Scorer(v1alpha1.ScorerExactMatch).ShardSize(10).Parallelism(4).Obj())
		var done time.Time
		deadline := time.Now().Add(60 * time.Second)
		for done.IsZero() {
			if ev := getEvaluation(b, ns, name); ev.Status.Phase == v1alpha1.PhaseSucceeded {
				done = time.Now()
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s did not succeed", name)
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, done.Sub(k.lastFinished()))
		// Let the next run start from a quiet cluster.
		time.Sleep(100 * time.Millisecond)
	}
	report(b, "shard-to-succeeded", lat, 3*time.Second)
}

func report(b *testing.B, what string, lat []time.Duration, goal time.Duration) {
	slices.Sort(lat)
	p50, worst := lat[len(lat)/2], lat[len(lat)-1]
	b.ReportMetric(float64(p50.Milliseconds()), what+"-p50-ms")
	b.ReportMetric(float64(worst.Milliseconds()), what+"-max-ms")
	b.Logf("%s over %d runs: p50 %v, max %v (goal < %v)", what, len(lat), p50, worst, goal)
	if worst >= goal {
		b.Errorf("goal: %s < %v; the slowest took %v", what, goal, worst)
	}
}

// BenchmarkManagerMemory: the proctor manager binary reconciles 100 Evaluations
// of 10 shards each, to the end. Goal: its peak RSS <= 100 MiB.
func BenchmarkManagerMemory(b *testing.B) {
	const evals, shards = 100, 10
	dir := b.TempDir()
	bin := filepath.Join(dir, "proctor")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/proctor-dev/proctor").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	kubeconfig := writeKubeconfig(b, dir)
	for range b.N {
		ns := newNamespace(b)
		_, url := fakeLLM(b, fakellm.Config{})
		cmd := exec.Command(bin, "manager", "--runner-image", "proctor:bench", "--metrics-bind-address", "0",
			"--health-probe-bind-address", "0", "--watch-namespaces", ns,
			// All at once: no namespace or cluster storage budget holds any.
			"--namespace-storage-budget", "0", "--cluster-storage-budget", "0")
		var logs bytes.Buffer
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		startKubelet(b, ns)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range evals {
			wg.Go(func() {
				create(b, testutil.MakeEvaluation(fmt.Sprintf("mem-%d", i), ns).InlineDataset("d", shards*2).OpenAIModel("m", url).
					Scorer(v1alpha1.ScorerExactMatch).ShardSize(2).Parallelism(10).Obj())
			})
		}
		wg.Wait()
		for i := range evals {
			waitPhase(b, ns, fmt.Sprintf("mem-%d", i), v1alpha1.PhaseSucceeded, 10*time.Minute)
		}
		elapsed := time.Since(start)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			b.Logf("manager exited: %v\n%s", err, tail(logs.String(), 2000))
		}
		peak := float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024
		b.ReportMetric(peak, "manager-peakRSS-MiB")
		b.Logf("%d Evaluations x %d shards reconciled to the end in %v; manager peak RSS %.1f MiB", evals, shards, elapsed.Round(time.Second), peak)
		if peak > 100 {
			b.Errorf("goal: manager peak RSS <= 100 MiB; got %.1f", peak)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// writeKubeconfig writes a kubeconfig for the test API server.
func writeKubeconfig(b testing.TB, dir string) string {
	c := clientcmdapi.NewConfig()
	c.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	c.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	c.CurrentContext = "test"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		b.Fatal(err)
	}
	return path
}
