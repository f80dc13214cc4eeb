package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A run reads one version of each ConfigMap dataset: when it is planned, the
// controller copies the data into an immutable ConfigMap of the run
// (DataName), counts the samples of that copy, and runner pods read the copy.
// Editing the user's ConfigMap mid-run changes nothing in the run.

// ConfigMapData is the dataset held under key in a ConfigMap (binaryData wins),
// and whether the key exists.
func ConfigMapData(cm *corev1.ConfigMap, key string) ([]byte, bool) {
	if b, ok := cm.BinaryData[key]; ok {
		return b, true
	}
	s, ok := cm.Data[key]
	return []byte(s), ok
}

// NewDataSnapshot is the snapshot of key of the ConfigMap src for dataset of a
// run; the caller sets its owner.
func NewDataSnapshot(src *corev1.ConfigMap, key, eval, run, dataset string) *corev1.ConfigMap {
	data, _ := ConfigMapData(src, key)
	labels := Labels(eval, run, ComponentData)
	labels[LabelDataset] = dataset
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: src.Namespace,
			Name:      DataName(eval, run, dataset),
			Labels:    labels,
			Annotations: map[string]string{
				AnnotationSource: fmt.Sprintf("configmap/%s uid=%s resourceVersion=%s key=%s", src.Name, src.UID, src.ResourceVersion, key),
				AnnotationSHA256: sha256Hex(data),
			},
		},
		BinaryData: map[string][]byte{key: data},
		Immutable:  ptr.To(true),
	}
}

// SnapshotData returns a snapshot's data, checking it against its recorded hash.
func SnapshotData(snap *corev1.ConfigMap, key string) ([]byte, error) {
	data, ok := ConfigMapData(snap, key)
	if !ok {
		return nil, fmt.Errorf("dataset snapshot %s has no key %s", snap.Name, key)
	}
	if want, got := snap.Annotations[AnnotationSHA256], sha256Hex(data); want != got {
		return nil, fmt.Errorf("dataset snapshot %s holds data with SHA-256 %s, not the %s the run was planned with", snap.Name, got, want)
	}
	return data, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
