package cluster

import "k8s.io/apimachinery/pkg/runtime/schema"

// Kueue's names, as its job integration reads them (Proctor does not import
// Kueue: its Workloads are read as unstructured objects, and only where
// Kueue is installed).
const (
	// LabelKueueQueueName puts a Job in a LocalQueue.
	LabelKueueQueueName = "kueue.x-k8s.io/queue-name"
	// AnnotationKueueMinParallelism allows partial admission of an Indexed
	// Job: as few pods at once as it says.
	AnnotationKueueMinParallelism = "kueue.x-k8s.io/job-min-parallelism"
	// LabelKueueJobUID is on a Job's Workload: the Job's UID.
	LabelKueueJobUID = "kueue.x-k8s.io/job-uid"
)

// WorkloadGVK is Kueue's Workload, one per Job it admits.
var WorkloadGVK = schema.GroupVersionKind{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "Workload"}
