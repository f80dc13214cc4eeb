package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/apiconv"
	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/source"
)

// ensurePermissions gives the runner pods of an Evaluation a ServiceAccount
// bound to a Role allowing only what its shards need, all by name: to read its
// Evaluation, plan, budget and dataset ConfigMaps, and to read and update its
// shards' heads and chunk slots (and the plan, while the planner makes it).
// Nothing else: no create (the controller makes every object a runner writes
// to), no Secrets but its shards' uploads Secrets (keys reach pods as
// secretKeyRef env vars), no listing.
func (r *EvaluationReconciler) ensurePermissions(ctx context.Context, p *pass) (bool, error) {
	ev := p.ev
	{
		// The records an earlier run left (kept by startRun as this run's
		// cache, or as answers to score again): its runners read them.
		cms, err := r.listConfigMaps(ctx, client.InNamespace(ev.Namespace), client.MatchingLabels{cluster.LabelEvaluation: cluster.LabelValue(ev.Name)})
		if err != nil {
			return false, err
		}
		for i := range cms {
			cm := &cms[i]
			if c := cm.Labels[cluster.LabelComponent]; cm.Labels[cluster.LabelRun] != p.run && (c == cluster.ComponentShard || c == cluster.ComponentRecords) {
				if r.ignoreForeign(p, "ConfigMap", cm) {
					continue
				}
				p.cacheSources = append(p.cacheSources, cm.Name)
			}
		}
	}
	name := cluster.RunnerName(ev.Name)
	labels := cluster.Labels(ev.Name, "", cluster.ComponentPermission)

	saName := name
	if ev.Spec.Runner != nil && ev.Spec.Runner.ServiceAccountName != "" {
		saName = ev.Spec.Runner.ServiceAccountName
	}
	// The ServiceAccount beside the Role: one after the other, the three
	// were a third of a run's first pass before its Jobs. The RoleBinding
	// follows its Role (the API server looks the Role up to bind it).
	var ok [3]bool
	var g errgroup.Group
	g.Go(func() (err error) {
		ok[0], err = r.ensureRunnerServiceAccount(ctx, p, name, labels)
		return err
	})
	g.Go(func() (err error) {
		ok[1], err = r.ensureRunnerRole(ctx, p, &rbacv1.Role{ObjectMeta: objectMeta(ev.Namespace, name, labels), Rules: r.runnerRules(p)})
		if !ok[1] || err != nil {
			return err
		}
		ok[2], err = r.ensureRunnerRoleBinding(ctx, p, &rbacv1.RoleBinding{
			ObjectMeta: objectMeta(ev.Namespace, name, labels),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: saName, Namespace: ev.Namespace}},
		})
		return err
	})
	err := g.Wait()
	return ok[0] && ok[1] && ok[2] && err == nil, err
}

// ensureRunnerServiceAccount makes the runner ServiceAccount name, unless
// spec.runner.serviceAccountName names the one to use.
func (r *EvaluationReconciler) ensureRunnerServiceAccount(ctx context.Context, p *pass, name string, labels map[string]string) (bool, error) {
	if ev := p.ev; ev.Spec.Runner != nil && ev.Spec.Runner.ServiceAccountName != "" {
		return true, nil
	}
	// Looked for in the cache first: created on every pass (refused as
	// there, then read again), it took 2 round trips a pass.
	sa := &corev1.ServiceAccount{ObjectMeta: objectMeta(p.ev.Namespace, name, labels)}
	return r.claimCached(ctx, p, sa)
}

// ensureRunnerRole makes role, or brings the one there to its rules.
func (r *EvaluationReconciler) ensureRunnerRole(ctx context.Context, p *pass, role *rbacv1.Role) (bool, error) {
	var existing rbacv1.Role
	err := r.Get(ctx, client.ObjectKeyFromObject(role), &existing)
	switch {
	case apierrors.IsNotFound(err):
		return r.claim(ctx, p, role)
	case err != nil:
		return false, err
	case !r.ours(p, "Role", &existing):
		return false, nil
	case !apiequality.Semantic.DeepEqual(existing.Rules, role.Rules):
		existing.Rules = role.Rules
		if err := r.Update(ctx, &existing); err != nil {
			return false, fmt.Errorf("updating Role %s: %w", role.Name, err)
		}
	}
	return true, nil
}

// ensureRunnerRoleBinding makes rb, or brings the one there to its subject.
func (r *EvaluationReconciler) ensureRunnerRoleBinding(ctx context.Context, p *pass, rb *rbacv1.RoleBinding) (bool, error) {
	var existing rbacv1.RoleBinding
	err := r.Get(ctx, client.ObjectKeyFromObject(rb), &existing)
	switch {
	case apierrors.IsNotFound(err):
		return r.claim(ctx, p, rb)
	case err != nil:
		return false, err
	case !r.ours(p, "RoleBinding", &existing):
		return false, nil
	case !apiequality.Semantic.DeepEqual(existing.Subjects, rb.Subjects):
		// The role reference cannot change; a new subject (spec.runner.serviceAccountName) can.
		existing.Subjects = rb.Subjects
		if err := r.Update(ctx, &existing); err != nil {
			return false, fmt.Errorf("updating RoleBinding %s: %w", rb.Name, err)
		}
	}
	return true, nil
}

// runnerRules are the runner's permissions for the current run.
func (r *EvaluationReconciler) runnerRules(p *pass) []rbacv1.PolicyRule {
	ev := p.ev
	read := []string{cluster.BudgetName(ev.Name)}
	for i := range ev.Spec.Datasets {
		d := &ev.Spec.Datasets[i]
		if k, ok := source.Of(&d.Source).(source.Snapshotted); ok {
			read = append(read, k.SnapshotName(ev, p.run, d)) // the run's copy
		}
	}
	// The list of what an earlier run left (absent when it left nothing):
	// every runner looks for it, to reuse the answers it lists.
	read = append(read, cluster.CacheSourcesName(ev.Name, p.run))
	read = append(read, p.cacheSources...)
	// The planner fills in the plan the controller made; once it is made, the
	// plan is only read.
	write := slices.Clone(p.shardObjects)
	if p.plan == nil {
		write = append(write, cluster.PlanName(ev.Name, p.run))
	} else {
		read = append(read, cluster.PlanName(ev.Name, p.run))
	}
	endpoints := ev.Spec.EndpointNames()
	// The budgets a runner follows, which it watches too (by name only).
	budgets := []string{cluster.BudgetName(ev.Name)}
	for _, e := range endpoints {
		budgets = append(budgets, cluster.EndpointBudgetName(e))
	}
	read = append(read, budgets...)
	slices.Sort(read)
	read = slices.Compact(read)
	slices.Sort(write)
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"evaluations"}, Verbs: []string{"get"}, ResourceNames: []string{ev.Name}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: read},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"watch"}, ResourceNames: slices.Sorted(slices.Values(budgets))},
	}
	if len(endpoints) > 0 {
		// Where its models' calls go; never the keys' Secrets (the kubelet
		// gives the pod those).
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"modelendpoints"}, Verbs: []string{"get"}, ResourceNames: endpoints})
	}
	if len(write) > 0 {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "update"}, ResourceNames: write})
	}
	secrets := slices.Clone(p.uploadSecrets)
	if p.cacheURLs != "" {
		secrets = append(secrets, p.cacheURLs)
	}
	if len(secrets) > 0 {
		// The presigned URLs its shards write their records with, into the
		// run's location only, and read the earlier run's with: never the
		// store's credentials.
		slices.Sort(secrets)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: secrets})
	}
	return rules
}

// claim creates obj, controlled by the Evaluation, if absent, and reports
// whether the object of that name is the Evaluation's. One that is not (a
// user's own object, or one made before the Evaluation existed) is left as it
// is and reported as a NameConflict; the caller stops the pass.
func (r *EvaluationReconciler) claim(ctx context.Context, p *pass, obj client.Object) (bool, error) {
	created, err := r.createOwned(ctx, p, obj)
	if !apierrors.IsAlreadyExists(err) {
		return created, err
	}
	gvk, err := r.GroupVersionKindFor(obj)
	if err != nil {
		return false, err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), m); err != nil {
		if apierrors.IsNotFound(err) {
			p.requeueAfter(time.Second) // deleted meanwhile: create it next pass
			return false, nil
		}
		return false, err
	}
	return r.ours(p, gvk.Kind, m), nil
}

// createOwned creates obj, controlled by the Evaluation, and reports whether
// it did: false with the API server's AlreadyExists error when the name is
// taken, false without error when creating it was refused (p.refused).
func (r *EvaluationReconciler) createOwned(ctx context.Context, p *pass, obj client.Object) (bool, error) {
	if err := controllerutil.SetControllerReference(p.ev, obj, r.Scheme); err != nil {
		return false, err
	}
	err := r.Create(ctx, obj)
	if err == nil || apierrors.IsAlreadyExists(err) {
		return err == nil, err
	}
	gvk, gvkErr := r.GroupVersionKindFor(obj)
	if gvkErr != nil {
		return false, gvkErr
	}
	if p.refused(gvk.Kind, obj.GetName(), err) {
		return false, nil
	}
	return false, fmt.Errorf("creating %s %s: %w", gvk.Kind, obj.GetName(), err)
}

// ours reports whether obj is controlled by the Evaluation, noting a
// NameConflict if not.
func (r *EvaluationReconciler) ours(p *pass, kind string, obj metav1.Object) bool {
	if err := cluster.Owned(kind, obj, p.ev); err != nil {
		p.conflict(err)
		return false
	}
	return true
}

// ignoreForeign reports whether obj, found by the Evaluation's labels, is not
// the Evaluation's; such objects are skipped (never read nor deleted) and
// reported.
func (r *EvaluationReconciler) ignoreForeign(p *pass, kind string, obj metav1.Object) bool {
	if cluster.Owned(kind, obj, p.ev) == nil {
		return false
	}
	name := kind + " " + obj.GetName()
	if !slices.Contains(p.ignored, name) {
		p.ignored = append(p.ignored, name)
	}
	return true
}

// deleteIfOurs deletes the ConfigMap name if the Evaluation controls it.
func (r *EvaluationReconciler) deleteIfOurs(ctx context.Context, p *pass, name string) error {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.ev.Namespace, Name: name}, m)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cluster.Owned("ConfigMap", m, p.ev) != nil {
		return nil //nolint:nilerr // not ours: left alone (claim reports it if the run needs the name)
	}
	uid := m.UID
	err = r.Delete(ctx, m, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// ensureBudget creates the budget ConfigMap runners read their shares from.
func (r *EvaluationReconciler) ensureBudget(ctx context.Context, p *pass) (bool, error) {
	if apiconv.ModelLimits(&p.ev.Spec) == nil && p.ev.Spec.Budget == nil {
		return true, nil
	}
	return r.claimCached(ctx, p, cluster.NewBudgetConfigMap(p.ev))
}

// claimCached is claim for an object the pass has not looked for yet, of a
// kind the manager caches (its metadata at least): one the cache holds is
// only checked, not created again.
func (r *EvaluationReconciler) claimCached(ctx context.Context, p *pass, obj client.Object) (bool, error) {
	gvk, err := r.GroupVersionKindFor(obj)
	if err != nil {
		return false, err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	err = r.Get(ctx, client.ObjectKeyFromObject(obj), m)
	switch {
	case err == nil:
		return r.ours(p, gvk.Kind, m), nil
	case !apierrors.IsNotFound(err):
		return false, err
	}
	return r.claim(ctx, p, obj)
}

func objectMeta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
}

func client2key(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }

func equalStatus(a, b *v1alpha1.EvaluationStatus) bool { return apiequality.Semantic.DeepEqual(a, b) }
