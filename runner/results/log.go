package results

// Log is where a run's records go, and where a resumed run learns which
// samples are done. Both drivers write through it: a local run into its
// checkpoint journals (Dir), a runner pod into its shard's ConfigMaps
// (kube.Store). A result sink added later (object storage, a database) is
// one more implementation; what it stores is record log lines (AppendLine),
// and whoever reads them back picks one record per sample with a Collector.
type Log interface {
	// Done reports whether the sample at index already has a record (resume).
	Done(model, dataset string, index int) bool
	// Put stores a record. An error stops the run.
	Put(model, dataset string, index int, rec *Record) error
}

var _ Log = (*Dir)(nil)
