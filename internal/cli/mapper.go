package cli

import (
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// podKinds are the kinds a runner or planner pod reads and writes, with
// their scopes (Proctor's as its CRDs declare them: TestPodKindsAsTheCRDsSay).
var podKinds = []struct {
	gvk   schema.GroupVersionKind
	scope meta.RESTScope
}{
	{corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace},
	{corev1.SchemeGroupVersion.WithKind("Secret"), meta.RESTScopeNamespace},
	{v1alpha1.GroupVersion.WithKind("Evaluation"), meta.RESTScopeNamespace},
	{v1alpha1.GroupVersion.WithKind("ModelEndpoint"), meta.RESTScopeNamespace},
}

// podMapper maps podKinds without asking the API server, and any other kind
// by discovery. Discovery alone (/api and /apis, 67 KiB on the local
// cluster) came before each pod's first read, while the node was busy
// starting the run's pods.
func podMapper(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
	discovered, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	return meta.FirstHitRESTMapper{MultiRESTMapper: meta.MultiRESTMapper{staticPodMapper(), discovered}}, nil
}

func staticPodMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, k := range podKinds {
		m.Add(k.gvk, k.scope)
	}
	return m
}
