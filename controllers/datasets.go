package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/source"
)

// snapshotDatasets gives the run one version of each ConfigMap dataset: the
// data as it is when the run is planned is copied into an immutable ConfigMap
// of the run (cluster.DataName), which the plan counts and runner pods read.
// A later pass finds the copy and uses it, whatever the user's ConfigMap holds
// by then. It runs only before the run's Jobs exist (checkReferences reads the
// user's ConfigMaps only then).
func (r *EvaluationReconciler) snapshotDatasets(ctx context.Context, p *pass) (bool, error) {
	for i := range p.ev.Spec.Datasets {
		d := &p.ev.Spec.Datasets[i]
		k, ok := source.Of(&d.Source).(source.Snapshotted)
		src := p.configMaps[d.Name]
		if !ok || src == nil {
			continue
		}
		key := client.ObjectKey{Namespace: p.ev.Namespace, Name: k.SnapshotName(p.ev, p.run, d)}
		var snap corev1.ConfigMap
		err := r.APIReader.Get(ctx, key, &snap)
		switch {
		case apierrors.IsNotFound(err):
			snap = *k.Snapshot(src, p.ev, p.run, d)
			if ok, err := r.claim(ctx, p, &snap); !ok || err != nil {
				return false, err
			}
		case err != nil:
			return false, err
		case !r.ours(p, "ConfigMap", &snap):
			return false, nil
		}
		p.configMaps[d.Name] = &snap
	}
	return true, nil
}

// checkSpec compiles the run as its runner pods will (templates against the
// first sample, field checks, rubrics), without API keys, so that a spec the
// pods would refuse fails the run now, before any Job starts, with a message
// naming the field. It checks with the data the controller holds (ConfigMap
// snapshots; inline data is in the spec); the planner Job checks runs with url
// or pvc datasets the same way.
func (r *EvaluationReconciler) checkSpec(ctx context.Context, p *pass) error {
	data := map[string][]byte{}
	for i := range p.ev.Spec.Datasets {
		d := &p.ev.Spec.Datasets[i]
		if b, ok := heldData(d, p.configMaps[d.Name]); ok {
			data[d.Name] = b
		}
	}
	return r.CheckSpec(ctx, p.ev, data)
}

// heldData is the data of dataset d that the controller holds in held (the
// object its source's Lookup found, or the run's snapshot of it), and whether
// it holds any.
func heldData(d *v1alpha1.Dataset, held *corev1.ConfigMap) ([]byte, bool) {
	k, ok := source.Of(&d.Source).(source.Held)
	if !ok || held == nil {
		return nil, false
	}
	return k.Data(held, d)
}
