package source

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// ConfigMap data (source.configMap: a key of a ConfigMap in the Evaluation's
// namespace) is read by the controller, which copies it for each run into an
// immutable snapshot (cluster.DataName), counts it and checks the spec against
// it; runner pods read the snapshot, never the user's ConfigMap, which may be
// edited mid-run.
type ConfigMap struct{}

var (
	_ Fetcher     = ConfigMap{}
	_ Referencing = ConfigMap{}
	_ Snapshotted = ConfigMap{}
	_ Held        = ConfigMap{}
	_ InPod       = ConfigMap{}
)

func (ConfigMap) Field() string                       { return "configMap" }
func (ConfigMap) Uses(s *v1alpha1.DatasetSource) bool { return s.ConfigMap != nil }

func (ConfigMap) Fetch(_ context.Context, d *v1alpha1.Dataset, path string, env Env) (Fetched, error) {
	return resolve(d, path+".source.configMap", d.Source.ConfigMap.Key, env)
}

func (ConfigMap) Lookup(ctx context.Context, get cluster.Get, ns string, d *v1alpha1.Dataset, path string) (Found, error) {
	ref := d.Source.ConfigMap
	var cm corev1.ConfigMap
	err := get(ctx, ns, ref.Name, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return Found{Missing: &Missing{
			Reason:  v1alpha1.ReasonConfigMapNotFound,
			Message: fmt.Sprintf("ConfigMap %s (%s.configMap) not found", ref.Name, path),
		}}, nil
	case err != nil:
		return Found{}, err
	}
	if _, ok := cluster.ConfigMapData(&cm, ref.Key); !ok {
		return Found{Missing: &Missing{
			Reason:  v1alpha1.ReasonConfigMapNotFound,
			Message: fmt.Sprintf("ConfigMap %s has no key %s (%s.configMap.key)", ref.Name, ref.Key, path),
		}}, nil
	}
	return Found{Held: &cm}, nil
}

func (ConfigMap) SnapshotName(ev *v1alpha1.Evaluation, run string, d *v1alpha1.Dataset) string {
	return cluster.DataName(ev.Name, run, d.Name)
}

func (ConfigMap) Snapshot(held *corev1.ConfigMap, ev *v1alpha1.Evaluation, run string, d *v1alpha1.Dataset) *corev1.ConfigMap {
	return cluster.NewDataSnapshot(held, d.Source.ConfigMap.Key, ev.Name, run, d.Name)
}

func (ConfigMap) Data(held *corev1.ConfigMap, d *v1alpha1.Dataset) ([]byte, bool) {
	return cluster.ConfigMapData(held, d.Source.ConfigMap.Key)
}

func (ConfigMap) DataName(d *v1alpha1.Dataset) string { return d.Source.ConfigMap.Key }

func (ConfigMap) Describe(d *v1alpha1.Dataset) string {
	return fmt.Sprintf("ConfigMap %s key %s", d.Source.ConfigMap.Name, d.Source.ConfigMap.Key)
}

// InPod copies the run's snapshot, which the plan counted, into pod.DataDir,
// checking it against the hash it was made with.
func (ConfigMap) InPod(ctx context.Context, pod Pod, d *v1alpha1.Dataset) (string, error) {
	ref := d.Source.ConfigMap
	var cm corev1.ConfigMap
	name := cluster.DataName(pod.Evaluation.Name, pod.Run, d.Name)
	if err := cluster.GetConfigMap(ctx, pod.Get, pod.Evaluation, name, &cm); err != nil {
		return "", fmt.Errorf("reading the run's copy of ConfigMap %s: %w", ref.Name, err)
	}
	data, err := cluster.SnapshotData(&cm, ref.Key)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(pod.DataDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(pod.DataDir, "configmap-"+d.Name+"-"+filepath.Base(ref.Key))
	return path, os.WriteFile(path, data, 0o644)
}
