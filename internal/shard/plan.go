package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/compile"
	"github.com/proctor-dev/proctor/internal/estimate"
	"github.com/proctor-dev/proctor/runner"
)

// estimateTimeout bounds the estimate, which the run's start waits for.
const estimateTimeout = 5 * time.Minute

// runEstimate estimates what the run will cost, as proctor run --estimate
// does: every prompt's tokens counted by its model's counting endpoint. An
// estimate that fails, or takes too long, says so; the run starts anyway.
func runEstimate(ctx context.Context, plan *runner.Plan, o Options) *v1alpha1.EstimateStatus {
	ctx, cancel := context.WithTimeout(ctx, estimateTimeout)
	defer cancel()
	rows, err := estimate.Run(ctx, plan, estimate.Options{Log: func(msg string) { o.Log.Info(msg) }})
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return estimate.FailedStatus(fmt.Errorf("counting the prompts' tokens took longer than %s", estimateTimeout))
	case err != nil:
		o.Log.Error(err, "Could not estimate the run's cost")
		return estimate.FailedStatus(err)
	}
	return estimate.Status(rows)
}

// Plan counts the samples of every dataset of a run and publishes the plan: the
// planner Job, for sources only a pod can read (url, pvc), and for runs with a
// budget or a priced model, whose estimate it publishes too (it is given the
// models' keys to count the prompts' tokens). It compiles the run as its
// runner pods will (compile.CheckPlan), so a problem with the data or with a
// template is published too, as the plan's error, and the run fails before any
// of its Jobs starts.
func Plan(ctx context.Context, c client.Client, o Options) error {
	o.defaults()
	ev, endpoints, err := currentEvaluation(ctx, c, o, false)
	if err != nil {
		return err
	}
	plan, countErr := compile.CheckPlan(ctx, ev, compile.Env{
		DataDir:        filepath.Join(o.WorkDir, "data"),
		Cluster:        true,
		ModelEndpoints: endpoints,
		ResolveSource: func(ds *v1alpha1.Dataset) (string, error) {
			return resolveSource(ctx, c, o, ev, ds)
		},
		// The models' keys, given to the planner for the estimate.
		LookupEnv: o.LookupEnv,
	})
	// The controller made the plan ConfigMap before starting this Job; the
	// planner fills it in (it may not create objects).
	var cm corev1.ConfigMap
	if err := kube.GetConfigMap(ctx, c, ev, cluster.PlanName(o.Evaluation, o.Run), &cm); err != nil {
		return fmt.Errorf("reading the plan ConfigMap: %w", err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	if countErr != nil {
		cm.Annotations[cluster.AnnotationPlanError] = countErr.Error()
	} else {
		pl := cluster.NewPlan(&ev.Spec, plan.Totals(), o.StorageBudget)
		// What it read, which every runner pod must read too.
		for _, d := range plan.Datasets {
			if pl.Data == nil {
				pl.Data = map[string]string{}
			}
			pl.Data[d.Name] = d.Fingerprint
		}
		cluster.SetPlan(cm.Annotations, pl)
		if apiconv.WantsEstimate(&ev.Spec) {
			b, _ := json.Marshal(runEstimate(ctx, plan, o))
			cm.Annotations[cluster.AnnotationEstimate] = string(b)
		}
	}
	if err := c.Update(ctx, &cm); err != nil {
		return fmt.Errorf("publishing the plan: %w", err)
	}
	if countErr != nil {
		return &InvalidError{countErr}
	}
	return nil
}
