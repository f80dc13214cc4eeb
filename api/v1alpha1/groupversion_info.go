// Package v1alpha1 holds the Evaluation API, the ModelEndpoint that
// Evaluations share a key's limits through, and the ModelQuota that endpoints
// of several namespaces share an account's limits through: one schema shared
// by the local loader (`proctor run -f`) and the CRDs served by the operator.
//
// +kubebuilder:object:generate=true
// +groupName=proctor.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "proctor.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &Evaluation{}, &EvaluationList{},
		&ModelEndpoint{}, &ModelEndpointList{}, &ModelQuota{}, &ModelQuotaList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
