package shard

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/compile"
)

// Plan counts the samples of every dataset of a run and publishes the plan: the
// planner Job, for sources only a pod can read (url, pvc). It compiles the run as
// its runner pods will (compile.Check), so a problem with the data or with a
// template is published too, as the plan's error, and the run fails before any
// of its Jobs starts.
func Plan(ctx context.Context, c client.Client, o Options) error {
	o.defaults()
	ev, endpoints, err := currentEvaluation(ctx, c, o)
	if err != nil {
		return err
	}
	totals, countErr := compile.Check(ctx, ev, compile.Env{
		DataDir:        filepath.Join(o.WorkDir, "data"),
		Cluster:        true,
		ModelEndpoints: endpoints,
		ResolveSource: func(ds *v1alpha1.Dataset) (string, error) {
			return resolveSource(ctx, c, o, ev, ds)
		},
	})
	// The controller made the plan ConfigMap before starting this Job; the
	// planner fills it in (it may not create objects).
	var cm corev1.ConfigMap
	if err := cluster.GetConfigMap(ctx, c, ev, cluster.PlanName(o.Evaluation, o.Run), &cm); err != nil {
		return fmt.Errorf("reading the plan ConfigMap: %w", err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	if countErr != nil {
		cm.Annotations[cluster.AnnotationPlanError] = countErr.Error()
	} else {
		cluster.SetPlan(cm.Annotations, cluster.NewPlan(&ev.Spec, totals, o.StorageBudget))
	}
	if err := c.Update(ctx, &cm); err != nil {
		return fmt.Errorf("publishing the plan: %w", err)
	}
	if countErr != nil {
		return &InvalidError{countErr}
	}
	return nil
}
