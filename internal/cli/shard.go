package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/pacer"
	"github.com/proctor-dev/proctor/internal/shard"
	"github.com/proctor-dev/proctor/runner/provider"
)

// newShardCommand is what runner pods run: one worker's shards of one model.
func newShardCommand(s streams) *cobra.Command {
	o := shard.Options{}
	index := os.Getenv("JOB_COMPLETION_INDEX")
	var metricsAddr string
	cmd := &cobra.Command{
		Use:    cluster.CommandShard + " --evaluation NAME --run RUN --model MODEL",
		Short:  "Evaluate one worker's shards of an Evaluation (what runner pods run)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			i, err := strconv.Atoi(index)
			if err != nil {
				return invalid(fmt.Errorf("--index (or JOB_COMPLETION_INDEX): %q is not a number", index))
			}
			if o.Workers < 0 {
				return invalid(fmt.Errorf("--%s: %d is not a number of workers", cluster.FlagWorkers, o.Workers))
			}
			o.Index = i
			if metricsAddr != "" {
				m, stop, err := serveMetrics(metricsAddr)
				if err != nil {
					return err
				}
				defer stop()
				o.Metrics = m
			}
			return runInPod(s, o, shard.Run)
		},
	}
	podFlags(cmd, &o)
	cmd.Flags().StringVar(&metricsAddr, cluster.FlagMetricsAddr, "", "serve Prometheus metrics of the pod's calls and samples at http://ADDR/metrics (the pod's :9464)")
	cmd.Flags().StringVar(&o.Model, cluster.FlagModel, "", "the model whose shard this is")
	cmd.Flags().StringVar(&index, "index", index, "the pod's worker (default $JOB_COMPLETION_INDEX): it evaluates shards index, index+workers, ...")
	cmd.Flags().IntVar(&o.ShardRetries, cluster.FlagShardRetries, -1, "how many pods that fail a shard may be followed by another (-1: as many as the Job allows)")
	cmd.Flags().IntVar(&o.Workers, cluster.FlagWorkers, 0, "how many workers share the model's shards (the Job's completions); 0: one per shard, --index naming the shard")
	cmd.Flags().StringVar(&o.AgentSocket, cluster.FlagAgentSocket, "", "the Unix socket of the pod's agent executor (proctor agent-exec), which runs an agent model's processes in the agent's container")
	cmd.Flags().StringVar(&o.HookSocket, cluster.FlagHookSocket, "", "the Unix socket of the executor of the pod's hooks container, which runs spec.hooks")
	cmd.Flags().StringVar(&o.PacerURL, "pacer", os.Getenv(cluster.EnvPacerURL), "the manager's pacer, which spaces every pod's calls through a rate-limited key (default $"+cluster.EnvPacerURL+"; empty: none)")
	pacerToken := filepath.Join(cluster.PacerTokenDir, cluster.PacerTokenFile)
	cmd.Flags().StringVar(&pacerToken, "pacer-token", pacerToken, "the file holding the token presented to the pacer")
	// Read once the flags are parsed, then again each minute.
	token := sync.OnceValue(func() func() (string, error) { return pacer.FileToken(pacerToken) })
	o.PacerToken = func() (string, error) { return token()() }
	return cmd
}

// newPlanCommand is what the planner pod runs: count the datasets' samples.
func newPlanCommand(s streams) *cobra.Command {
	o := shard.Options{}
	cmd := &cobra.Command{
		Use:    cluster.CommandPlan + " --evaluation NAME --run RUN",
		Short:  "Count an Evaluation's samples and publish its shard plan (what the planner pod runs)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runInPod(s, o, func(ctx context.Context, c client.WithWatch, o shard.Options) error { return shard.Plan(ctx, c, o) })
		},
	}
	podFlags(cmd, &o)
	cmd.Flags().Int64Var(&o.StorageBudget, cluster.FlagStorageBudget, 0, "bytes of records the run may store, put in the plan (0: unbounded)")
	return cmd
}

func podFlags(cmd *cobra.Command, o *shard.Options) {
	f := cmd.Flags()
	f.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the Evaluation's namespace (default $POD_NAMESPACE)")
	f.StringVar(&o.Evaluation, cluster.FlagEvaluation, "", "the Evaluation's name")
	f.StringVar(&o.Run, cluster.FlagRun, "", "the run (status.run) this pod belongs to")
	f.StringVar(&o.Pod, "pod", os.Getenv("POD_NAME"), "this pod's name (default $POD_NAME)")
	f.StringVar(&o.WorkDir, "work-dir", filepath.Join(os.TempDir(), "proctor"), "scratch space: downloads and agent workspaces")
	f.StringVar(&o.DatasetRoot, "dataset-root", cluster.DatasetRoot, "where PVC datasets are mounted")
	f.DurationVar(&o.GracePeriod, "grace-period", 0, "on SIGTERM, how long samples in flight may finish (default 20s)")
}

// runInPod connects to the cluster and runs fn until done or SIGTERM. Exit codes
// tell the Job what to do: 0 done (or the run is obsolete), 2 invalid input (the
// pod failure policy fails the shard at once), 3 a hook that failed for good
// (so does it), 1 anything else (retried).
func runInPod(s streams, o shard.Options, fn func(context.Context, client.WithWatch, shard.Options) error) (err error) {
	defer func() {
		if err != nil {
			writeTerminationMessage(terminationLog, err)
		}
	}()
	if o.Namespace == "" || o.Evaluation == "" || o.Run == "" {
		return invalid(errors.New("--namespace, --evaluation and --run are required"))
	}
	// This process holds API keys (its environment) and the ServiceAccount's
	// token: nothing of the same user may read its memory.
	if err := setNonDumpable(); err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("making the process non-dumpable: %w", err)}
	}
	o.Log = newLogger(s.errOut, 0)
	scheme := newScheme()
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("connecting to the cluster: %w", err)}
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("connecting to the cluster: %w", err)}
	}
	mapper, err := podMapper(cfg, hc)
	if err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("connecting to the cluster: %w", err)}
	}
	// With watches: a runner follows its budgets (shard.watchBudgets).
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme, HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return podExit(s, fn(ctx, c, o))
}

// podExit is the exit of a pod's command that ended with err.
func podExit(s streams, err error) error {
	var invalidErr *shard.InvalidError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kube.ErrObsolete):
		fmt.Fprintln(s.errOut, "proctor: the Evaluation changed or was deleted; this run is obsolete")
		return nil
	case provider.IsUnavailable(err):
		// The agent's container is gone or never listened: the pod's fault, not
		// the spec's, even when it showed while compiling. Retried.
		return &exitError{code: exitFailed, err: err}
	case errors.As(err, &invalidErr):
		return invalid(err)
	case shard.IsHookFailure(err):
		return &exitError{code: cluster.ExitHookFailed, err: err}
	case errors.As(err, new(*shard.RetriesUsedError)):
		return &exitError{code: cluster.ExitRetriesUsed, err: err}
	}
	return &exitError{code: exitFailed, err: err}
}

// terminationLog is where the kubelet reads a container's termination message
// (the pod's terminationMessagePath).
var terminationLog = corev1.TerminationMessagePathDefault

// maxTerminationMessage bounds the message (the kubelet keeps 4 KiB).
const maxTerminationMessage = 1024

// writeTerminationMessage leaves a runner's fatal error where the kubelet reads
// it, so that the controller can say in the Evaluation's status why the pod
// failed. Outside a pod the file does not exist and nothing is written. Values
// of the environment that could be secret (API keys come as variables) are
// removed first, though errors should not hold them.
func writeTerminationMessage(path string, err error) {
	f, openErr := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if openErr != nil {
		return
	}
	defer f.Close()
	msg := scrubEnvironment(err.Error(), os.Environ())
	if len(msg) > maxTerminationMessage {
		msg = msg[:maxTerminationMessage]
	}
	_, _ = f.WriteString(msg) // best effort: the pod is failing, with nowhere else to say so
}

// scrubEnvironment replaces in msg the values of env ("NAME=value") that are
// long enough to be secrets, but for variables known to hold none, and their
// encoded forms (provider.Redactor).
func scrubEnvironment(msg string, env []string) string {
	var values []string
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || len(value) < 6 || safeVariable(name) {
			continue
		}
		values = append(values, value)
	}
	return provider.NewRedactor(values...).Redact(msg)
}

func safeVariable(name string) bool {
	switch name {
	case "PATH", "HOME", "HOSTNAME", "PWD", "TMPDIR", "LANG", "TERM", "POD_NAME", "POD_NAMESPACE", "JOB_COMPLETION_INDEX":
		return true
	}
	return strings.HasPrefix(name, "KUBERNETES_")
}

// newInstallCommand copies this binary, so an init container can put proctor
// into an agent's image.
func newInstallCommand(s streams) *cobra.Command {
	return &cobra.Command{
		Use:    "install DEST",
		Short:  "Copy the proctor binary to DEST (for agent images)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			in, err := os.Open(self)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		},
	}
}
