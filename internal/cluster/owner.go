package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// Everything an Evaluation trusts (its plan, budget, data snapshots, shard heads
// and record chunks, NAME-results) is created by the controller with a
// controller reference to the Evaluation's UID before any runner writes to it,
// and both sides check that reference on every read. Runners cannot create
// objects at all (their Role has no create), so an object of an expected name
// that the Evaluation does not control was made by someone else: it is ignored,
// never adopted, overwritten or deleted, and reported.

// OwnerReference is the controller reference of ev's children.
func OwnerReference(ev *v1alpha1.Evaluation) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "Evaluation", Name: ev.Name, UID: ev.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

// ForeignError says that an object Proctor expected to be an Evaluation's
// child is not: someone else made it.
type ForeignError struct {
	Kind, Namespace, Name string
	// Owner describes its controller, if it has one ("" otherwise).
	Owner string
	// Evaluation is the Evaluation it should belong to.
	Evaluation string
	// Of, if set, names its rightful owner instead ("ModelEndpoint x").
	Of string
}

func (e *ForeignError) Error() string {
	owner := "has no controller"
	if e.Owner != "" {
		owner = "is controlled by " + e.Owner
	}
	of := e.Of
	if of == "" {
		of = "Evaluation " + e.Evaluation
	}
	return fmt.Sprintf("%s %s/%s is not %s's: it %s; Proctor never adopts, overwrites or deletes an object it did not make",
		e.Kind, e.Namespace, e.Name, of, owner)
}

// Object is an object of the API server: controller-runtime's client.Object,
// named here so that the contract does not need controller-runtime.
type Object interface {
	metav1.Object
	runtime.Object
}

// Get reads the object namespace/name into obj, returning the API server's
// errors as they are (NotFound, Forbidden): a client.Reader's Get, as
// kube.Getter adapts it.
type Get func(ctx context.Context, namespace, name string, obj Object) error

// GetConfigMap reads the ConfigMap name of ev's namespace into cm, and returns
// a *ForeignError if ev does not control it: the runners and the controller
// read no other. The Get's own errors are returned as they are.
func GetConfigMap(ctx context.Context, get Get, ev *v1alpha1.Evaluation, name string, cm *corev1.ConfigMap) error {
	if err := get(ctx, ev.Namespace, name, cm); err != nil {
		return err
	}
	return Owned("ConfigMap", cm, ev)
}

// Owned returns nil if obj is controlled by ev (by UID), else a *ForeignError.
func Owned(kind string, obj metav1.Object, ev *v1alpha1.Evaluation) error {
	if ev.UID != "" && metav1.IsControlledBy(obj, ev) {
		return nil
	}
	e := &ForeignError{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Evaluation: ev.Name}
	if ref := metav1.GetControllerOf(obj); ref != nil {
		e.Owner = fmt.Sprintf("%s %s (uid %s)", ref.Kind, ref.Name, ref.UID)
	}
	return e
}
