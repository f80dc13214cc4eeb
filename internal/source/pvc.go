package source

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// PVC data (source.pvc) is a file on a PersistentVolumeClaim that runner pods
// and the planner Job mount read-only under cluster.DatasetRoot; the
// controller only checks that the claim exists.
type PVC struct{}

var (
	_ Fetcher     = PVC{}
	_ Referencing = PVC{}
	_ InPod       = PVC{}
	_ Mounted     = PVC{}
)

func (PVC) Field() string                       { return "pvc" }
func (PVC) Uses(s *v1alpha1.DatasetSource) bool { return s.PVC != nil }

func (PVC) Fetch(_ context.Context, d *v1alpha1.Dataset, path string, env Env) (Fetched, error) {
	return resolve(d, path+".source.pvc", d.Source.PVC.Path, env)
}

func (PVC) Lookup(ctx context.Context, get cluster.Get, ns string, d *v1alpha1.Dataset, path string) (Found, error) {
	// Metadata only: the manager needs nothing else of the claim.
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"))
	err := get(ctx, ns, d.Source.PVC.ClaimName, m)
	switch {
	case apierrors.IsNotFound(err):
		return Found{Missing: &Missing{
			Reason:  v1alpha1.ReasonPVCNotFound,
			Message: fmt.Sprintf("PersistentVolumeClaim %s (%s.pvc) not found", d.Source.PVC.ClaimName, path),
		}}, nil
	case err != nil:
		return Found{}, err
	}
	return Found{}, nil
}

func (PVC) InPod(_ context.Context, pod Pod, d *v1alpha1.Dataset) (string, error) {
	return filepath.Join(filepath.FromSlash(cluster.DatasetMount(pod.DatasetRoot, d.Source.PVC.ClaimName)), filepath.FromSlash(d.Source.PVC.Path)), nil
}

func (PVC) Volume(d *v1alpha1.Dataset, name string) (corev1.Volume, corev1.VolumeMount) {
	claim := d.Source.PVC.ClaimName
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true},
		}},
		corev1.VolumeMount{Name: name, MountPath: cluster.DatasetMount(cluster.DatasetRoot, claim), ReadOnly: true}
}

// resolve makes a source only a cluster can read a local file, through env.
func resolve(d *v1alpha1.Dataset, srcPath, name string, env Env) (Fetched, error) {
	if env.Resolve == nil {
		return Fetched{}, fmt.Errorf("%s: only works in a cluster; to run locally use file: or url: instead", srcPath)
	}
	file, err := env.Resolve(d)
	if err != nil {
		return Fetched{}, fmt.Errorf("%s: %w", srcPath, err)
	}
	return Fetched{Path: file, Name: name}, nil
}
