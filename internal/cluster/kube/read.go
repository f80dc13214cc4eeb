// Package kube reads and writes the objects of the controller–pod contract
// (internal/cluster) through the API server: a run's plan and budgets, a
// shard's record store, the records and baselines of earlier runs. It is the
// part of the contract that needs controller-runtime's client; local runs do
// not import it.
package kube

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
)

// Getter is r's Get as the contract's readers take it (cluster.Get).
func Getter(r client.Reader) cluster.Get {
	return func(ctx context.Context, namespace, name string, obj cluster.Object) error {
		return r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj)
	}
}

// GetConfigMap is cluster.GetConfigMap with r.
func GetConfigMap(ctx context.Context, r client.Reader, ev *v1alpha1.Evaluation, name string, cm *corev1.ConfigMap) error {
	return cluster.GetConfigMap(ctx, Getter(r), ev, name, cm)
}

// ReadPlan reads a run's plan, from the plan ConfigMap ev controls; an error if
// it has none.
func ReadPlan(ctx context.Context, c client.Reader, ev *v1alpha1.Evaluation, run string) (cluster.Plan, error) {
	var cm corev1.ConfigMap
	if err := GetConfigMap(ctx, c, ev, cluster.PlanName(ev.Name, run), &cm); err != nil {
		return cluster.Plan{}, fmt.Errorf("reading the plan: %w", err)
	}
	plan, failed, err := cluster.ParsePlan(cm.Annotations)
	switch {
	case err != nil:
		return cluster.Plan{}, err
	case failed != "":
		return cluster.Plan{}, fmt.Errorf("planning failed: %s", failed)
	case plan == nil:
		return cluster.Plan{}, errors.New("reading the plan: the plan ConfigMap holds no plan yet")
	}
	return *plan, nil
}

// ReadBudget reads an Evaluation's budget, from the ConfigMap ev controls.
func ReadBudget(ctx context.Context, c client.Reader, ev *v1alpha1.Evaluation) (*cluster.Budget, error) {
	var cm corev1.ConfigMap
	if err := GetConfigMap(ctx, c, ev, cluster.BudgetName(ev.Name), &cm); err != nil {
		return nil, err
	}
	return cluster.ParseBudget(cm.Annotations)
}

// ReadEndpointBudget reads the budget of the ModelEndpoint named endpoint in
// namespace, checking that the endpoint controls it, and returns it with its
// UID (what acknowledgements name).
func ReadEndpointBudget(ctx context.Context, c client.Reader, namespace, endpoint string) (*cluster.Budget, string, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster.EndpointBudgetName(endpoint)}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", cluster.ErrEndpointGone
		}
		return nil, "", err
	}
	ref := metav1.GetControllerOf(&cm)
	if ref == nil || ref.Kind != "ModelEndpoint" || ref.Name != endpoint || ref.APIVersion != v1alpha1.GroupVersion.String() {
		return nil, "", &cluster.ForeignError{Kind: "ConfigMap", Namespace: namespace, Name: cm.Name, Of: "ModelEndpoint " + endpoint}
	}
	b, err := cluster.ParseBudget(cm.Annotations)
	if err != nil {
		return nil, "", err
	}
	return b, string(cm.UID), nil
}
