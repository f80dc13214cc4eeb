package cluster

import (
	"path"
	"strconv"
)

// What a runner pod and the controller agree on beyond the objects' names and
// layouts: where the pod finds things, and what its exit code means.

// Exit codes of the proctor commands a runner pod runs (shard, plan).
const (
	// ExitFailed: the pod could not finish (a dropped connection, a full
	// disk...); the Job retries the shard.
	ExitFailed = 1
	// ExitInvalid: the input is invalid (a template naming a missing field, a
	// missing API key) and no retry can fix it; the Job's pod failure policy
	// fails the shard at once.
	ExitInvalid = 2
	// ExitHookFailed: a hook failed for good (hooks.setup, or a slot that
	// hooks.repairTimeout did not see repaired); the Job's pod failure policy
	// fails the shard at once, and the controller names the hook.
	ExitHookFailed = 3
	// ExitRetriesUsed: a shard of the pod's worker failed on as many pods as
	// its retries allow (shard.RetriesUsedError); the Job's pod failure
	// policy fails the worker at once, and the controller names the shard
	// and why its last pod failed. A worker runs many shards, so the Job's
	// own count of its failures cannot be each shard's.
	ExitRetriesUsed = 4
)

// DatasetRoot is where a runner pod's PVC datasets are mounted, one directory a
// claim: DatasetMount.
const DatasetRoot = "/datasets"

// DatasetMount is where the PVC claim is mounted under root (DatasetRoot in a pod).
func DatasetMount(root, claim string) string { return path.Join(root, claim) }

// The proctor commands runner pods run, and their flags: the controller writes
// the arguments (ShardArgs, PlanArgs), the pod's command line (internal/cli)
// reads them.
const (
	CommandShard      = "shard"
	CommandPlan       = "plan"
	FlagEvaluation    = "evaluation"
	FlagRun           = "run"
	FlagModel         = "model"
	FlagAgentSocket   = "agent-socket"
	FlagHookSocket    = "hook-socket"
	FlagStorageBudget = "storage-budget"
	FlagMetricsAddr   = "metrics-addr"
	FlagWorkers       = "workers"
	FlagShardRetries  = "shard-retries"
)

// A runner pod serves its metrics (runner/telemetry) on this port, named
// MetricsPortName, at /metrics: what a PodMonitor scrapes. The API refuses
// a service (spec.services) on it: ServicePort's rule names 9464.
const (
	MetricsPort     = 9464
	MetricsPortName = "metrics"
)

// ShardArgs runs the shards of model in run of Evaluation eval, by workers
// workers: the pod's worker is the Job's completion index, and it evaluates
// that worker's shards (WorkerShards).
// A shard is begun on at most retries+1 pods that fail.
func ShardArgs(eval, run, model string, workers int, retries int32) []string {
	return []string{CommandShard, "--" + FlagEvaluation, eval, "--" + FlagRun, run, "--" + FlagModel, model,
		"--" + FlagWorkers + "=" + strconv.Itoa(workers), "--" + FlagShardRetries + "=" + strconv.Itoa(int(retries)),
		"--" + FlagMetricsAddr + "=:" + strconv.Itoa(MetricsPort)}
}

// PlanArgs counts the datasets of run and publishes its plan, with a storage
// budget for records of storageBytes (0: unbounded).
func PlanArgs(eval, run string, storageBytes int64) []string {
	return []string{CommandPlan, "--" + FlagEvaluation, eval, "--" + FlagRun, run, "--" + FlagStorageBudget + "=" + strconv.FormatInt(max(0, storageBytes), 10)}
}
