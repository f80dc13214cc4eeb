// Package source holds the kinds of dataset source (spec.datasets[].source:
// inline, configMap, url, pvc, file). Each kind is one file with one type that
// says everything Proctor does that depends on where a dataset's data is: how
// a local run or a runner pod makes it a file, what the controller looks up,
// copies, counts, mounts and lets the runner read. A new source is a new file
// here, one entry in kinds, and its field in the API (api/v1alpha1
// DatasetSource, whose CEL rule lets one source be set).
//
// A kind implements the interfaces below for what it supports; the callers
// (internal/compile, internal/shard, controllers) ask for an interface and
// treat a kind without it as "not applicable".
package source

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/runner/dataset"
)

// Kind is one kind of dataset source.
type Kind interface {
	// Field is the kind's field in spec.datasets[].source.
	Field() string
	// Uses reports whether s is a source of this kind.
	Uses(s *v1alpha1.DatasetSource) bool
}

// kinds are the dataset sources, in the order they are tried.
var kinds = []Kind{Inline{}, File{}, URL{}, ConfigMap{}, PVC{}}

// Of is the kind of source s, nil when it sets none.
func Of(s *v1alpha1.DatasetSource) Kind {
	for _, k := range kinds {
		if k.Uses(s) {
			return k
		}
	}
	return nil
}

// Kinds are the fields of every kind of source.
func Kinds() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.Field()
	}
	return out
}

// Itemized is a source whose samples are in the spec itself (inline).
type Itemized interface {
	Items(d *v1alpha1.Dataset) []json.RawMessage
}

// Env is where a local run or a runner pod makes a source a file.
type Env struct {
	// BaseDir is what relative file paths are relative to (the Evaluation file's
	// directory).
	BaseDir string
	// DataDir holds downloads.
	DataDir string
	// HTTPClient downloads url sources; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Resolve makes a source only a cluster can read (configMap, pvc) a local
	// file: a runner pod's InPod, or the data the controller holds. Nil outside
	// a cluster, where such sources are refused.
	Resolve func(*v1alpha1.Dataset) (string, error)
}

// Fetched is a source made a local file.
type Fetched struct {
	// Path of the file.
	Path string
	// Name is what the data's format is guessed from (a file name, a key, a URL).
	Name string
}

// Fetcher is a source that can be made a local file. path is the dataset's
// field path (spec.datasets[i]); errors name the source's field.
type Fetcher interface {
	Fetch(ctx context.Context, d *v1alpha1.Dataset, path string, env Env) (Fetched, error)
}

// Pod is what a runner pod reads cluster sources with.
type Pod struct {
	// Get reads the Evaluation's objects (kube.Getter of the pod's client).
	Get        cluster.Get
	Evaluation *v1alpha1.Evaluation
	Run        string
	// DatasetRoot is where PVC datasets are mounted (cluster.DatasetRoot).
	DatasetRoot string
	// DataDir holds the copies of ConfigMap data.
	DataDir string
}

// InPod is a source a runner pod reads from the cluster.
type InPod interface {
	InPod(ctx context.Context, pod Pod, d *v1alpha1.Dataset) (string, error)
}

// ResolveInPod makes d's source a local file in a runner pod.
func ResolveInPod(ctx context.Context, pod Pod, d *v1alpha1.Dataset) (string, error) {
	if k, ok := Of(&d.Source).(InPod); ok {
		return k.InPod(ctx, pod, d)
	}
	return "", fmt.Errorf("dataset %s: not a cluster source", d.Name)
}

// Found is what the controller learnt looking up a source's references.
type Found struct {
	// Held is the object holding the data, which the controller keeps for the
	// pass (a ConfigMap), or nil.
	Held *corev1.ConfigMap
	// Missing, when set, says what is not there yet: the run waits (Pending)
	// with this reason and message and looks again.
	Missing *Missing
	// Invalid, when set, says why the source cannot work in a cluster: the run
	// fails.
	Invalid string
}

// Missing is a reference that does not resolve yet.
type Missing struct {
	Reason  string
	Message string
}

// Referencing is a source that names objects of the Evaluation's namespace,
// which the controller looks up before it plans a run. path is the source's
// field path (spec.datasets[i].source).
type Referencing interface {
	Lookup(ctx context.Context, get cluster.Get, ns string, d *v1alpha1.Dataset, path string) (Found, error)
}

// Snapshotted is a source whose data the controller copies for each run, so a
// run reads one version of it.
type Snapshotted interface {
	// SnapshotName is the run's copy, which runner pods read.
	SnapshotName(ev *v1alpha1.Evaluation, run string, d *v1alpha1.Dataset) string
	// Snapshot is the copy of held to make for the run; the caller sets its owner.
	Snapshot(held *corev1.ConfigMap, ev *v1alpha1.Evaluation, run string, d *v1alpha1.Dataset) *corev1.ConfigMap
}

// Held is a source whose data the controller holds (an object Lookup found, or
// its snapshot), so that it can count it and check the spec against it.
type Held interface {
	// Data is the data held, and whether held has it.
	Data(held *corev1.ConfigMap, d *v1alpha1.Dataset) ([]byte, bool)
	// DataName is what the data's format is guessed from (a key).
	DataName(d *v1alpha1.Dataset) string
	// Describe names the data in messages.
	Describe(d *v1alpha1.Dataset) string
}

// CountInMemory counts the samples of a dataset the controller can read itself
// (after its limit): items in the spec, or data it holds. ok is false for
// sources only a runner pod can read (url, pvc), which the planner Job counts.
func CountInMemory(d *v1alpha1.Dataset, heldData []byte) (n int, ok bool, err error) {
	switch k := Of(&d.Source).(type) {
	case Itemized:
		return d.Limited(len(k.Items(d))), true, nil
	case Held:
		format := dataset.Format(d.Format)
		if format == "" {
			format = dataset.FormatFromName(k.DataName(d))
		}
		r, err := dataset.Decompress(bytes.NewReader(heldData))
		if err != nil {
			return 0, true, err
		}
		n, err := dataset.Count(r, format)
		if err != nil {
			return 0, true, fmt.Errorf("%s: %w", k.Describe(d), err)
		}
		return d.Limited(n), true, nil
	}
	return 0, false, nil
}

// Mounted is a source runner pods mount as a volume.
type Mounted interface {
	Volume(d *v1alpha1.Dataset, name string) (corev1.Volume, corev1.VolumeMount)
}
