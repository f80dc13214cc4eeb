package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/shard"
)

// ensurePermissions gives the runner pods of an Evaluation a ServiceAccount
// bound to a Role allowing only what its shards need: to read its Evaluation,
// plan, budget and dataset ConfigMaps, and to read and update its shards' heads,
// all by name; and to create ConfigMaps (sealed record chunks, the plan), which
// Kubernetes cannot restrict by name. Nothing else: no Secrets (keys reach pods
// as secretKeyRef env vars), no listing.
func (r *EvaluationReconciler) ensurePermissions(ctx context.Context, p *pass) (bool, error) {
	ev := p.ev
	if cacheOn(&ev.Spec) {
		// The records an earlier run left are this run's cache: its runners read them.
		var cms metav1.PartialObjectMetadataList
		cms.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
		if err := r.List(ctx, &cms, client.InNamespace(ev.Namespace), client.MatchingLabels{cluster.LabelEvaluation: cluster.LabelValue(ev.Name)}); err != nil {
			return false, err
		}
		for _, cm := range cms.Items {
			if c := cm.Labels[cluster.LabelComponent]; cm.Labels[cluster.LabelRun] != p.run && (c == cluster.ComponentShard || c == cluster.ComponentRecords) {
				p.cacheSources = append(p.cacheSources, cm.Name)
			}
		}
	}
	name := cluster.RunnerName(ev.Name)
	labels := cluster.Labels(ev.Name, "", cluster.ComponentPermission)

	saName := name
	if ev.Spec.Runner != nil && ev.Spec.Runner.ServiceAccountName != "" {
		saName = ev.Spec.Runner.ServiceAccountName
	} else {
		sa := &corev1.ServiceAccount{ObjectMeta: objectMeta(ev.Namespace, name, labels)}
		if err := r.createOwned(ctx, ev, sa); err != nil {
			return false, err
		}
	}

	role := &rbacv1.Role{ObjectMeta: objectMeta(ev.Namespace, name, labels), Rules: r.runnerRules(p)}
	var existing rbacv1.Role
	err := r.Get(ctx, client.ObjectKeyFromObject(role), &existing)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.createOwned(ctx, ev, role); err != nil {
			return false, err
		}
	case err != nil:
		return false, err
	case !apiequality.Semantic.DeepEqual(existing.Rules, role.Rules):
		existing.Rules = role.Rules
		if err := r.Update(ctx, &existing); err != nil {
			return false, fmt.Errorf("updating Role %s: %w", name, err)
		}
	}

	rb := &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(ev.Namespace, name, labels),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: saName, Namespace: ev.Namespace}},
	}
	var existingRB rbacv1.RoleBinding
	err = r.Get(ctx, client.ObjectKeyFromObject(rb), &existingRB)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.createOwned(ctx, ev, rb); err != nil {
			return false, err
		}
	case err != nil:
		return false, err
	case !apiequality.Semantic.DeepEqual(existingRB.Subjects, rb.Subjects):
		// The role reference cannot change; a new subject (spec.runner.serviceAccountName) can.
		existingRB.Subjects = rb.Subjects
		if err := r.Update(ctx, &existingRB); err != nil {
			return false, fmt.Errorf("updating RoleBinding %s: %w", name, err)
		}
	}
	return true, nil
}

// runnerRules are the runner's permissions for the current run.
func (r *EvaluationReconciler) runnerRules(p *pass) []rbacv1.PolicyRule {
	ev := p.ev
	read := []string{cluster.PlanName(ev.Name, p.run), cluster.BudgetName(ev.Name)}
	for _, d := range ev.Spec.Datasets {
		if d.Source.ConfigMap != nil {
			read = append(read, cluster.DataName(ev.Name, p.run, d.Name)) // the run's snapshot
		}
	}
	if cacheOn(&ev.Spec) {
		read = append(read, cluster.CacheSourcesName(ev.Name, p.run))
		read = append(read, p.cacheSources...)
	}
	var heads []string
	if p.plan != nil {
		for _, model := range cluster.Subjects(&ev.Spec) {
			for _, s := range p.plan.Shards(&ev.Spec, model) {
				heads = append(heads, cluster.HeadName(ev.Name, p.run, model, s.Index))
			}
		}
	}
	slices.Sort(read)
	read = slices.Compact(read)
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"evaluations"}, Verbs: []string{"get"}, ResourceNames: []string{ev.Name}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: read},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
	}
	if len(heads) > 0 {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "update"}, ResourceNames: heads})
	}
	return rules
}

// createOwned creates obj owned by ev, if absent.
func (r *EvaluationReconciler) createOwned(ctx context.Context, ev *v1alpha1.Evaluation, obj client.Object) error {
	if err := controllerutil.SetControllerReference(ev, obj, r.Scheme); err != nil {
		return err
	}
	if err := r.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// ensureBudget creates the budget ConfigMap runners read their shares from.
func (r *EvaluationReconciler) ensureBudget(ctx context.Context, p *pass) (bool, error) {
	if limitsOf(&p.ev.Spec) == nil {
		return true, nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: objectMeta(p.ev.Namespace, cluster.BudgetName(p.ev.Name), cluster.Labels(p.ev.Name, "", cluster.ComponentBudget))}
	var existing metav1.PartialObjectMetadata
	existing.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.Get(ctx, client.ObjectKeyFromObject(cm), &existing); err == nil || !apierrors.IsNotFound(err) {
		return true, err
	}
	b, _ := json.Marshal(&cluster.Budget{})
	cm.Annotations = map[string]string{shard.AnnotationBudget: string(b)}
	return true, r.createOwned(ctx, p.ev, cm)
}

func objectMeta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
}

func client2key(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }

func equalStatus(a, b *v1alpha1.EvaluationStatus) bool { return apiequality.Semantic.DeepEqual(a, b) }
