package cluster

import "path"

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
)

// DatasetRoot is where a runner pod's PVC datasets are mounted, one directory a
// claim: DatasetMount.
const DatasetRoot = "/datasets"

// DatasetMount is where the PVC claim is mounted under root (DatasetRoot in a pod).
func DatasetMount(root, claim string) string { return path.Join(root, claim) }
