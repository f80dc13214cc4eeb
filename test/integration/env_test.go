// Package integration tests Proctor against a real kube-apiserver and etcd, started
// once per package by envtest from the binaries that hack/install-kube.sh builds.
package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// kubeVersion is the Kubernetes version hack/install-kube.sh builds by default.
const kubeVersion = "v1.36.3"

var (
	// root is the repository's root directory.
	root string
	// cfg reaches the test API server.
	cfg *rest.Config
	// k8sClient is a client of the test API server; its scheme knows the built-in
	// types, CustomResourceDefinitions and Proctor's API.
	k8sClient client.Client
	// etcdURL is the test etcd's client URL (its metrics, and the JSON
	// gateway of its API).
	etcdURL string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Every manager gets its test's logger (logFor); controller-runtime's
	// global one is only consulted, and complained about when unset, before.
	ctrllog.SetLogger(logr.Discard())
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		fmt.Fprintln(os.Stderr, "integration: cannot find the test's source file")
		return 1
	}
	root = filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(root, "bin", "kube-"+kubeVersion)

	// Fail loudly: a missing binary must not pass for a green run.
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			fmt.Fprintf(os.Stderr, "integration: %s is missing (%v).\n"+
				"Build the test control plane first: hack/install-kube.sh (several minutes, once).\n", name, err)
			return 1
		}
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: starting kube-apiserver and etcd from %s: %v\n", bin, err)
		return 1
	}
	etcdURL = env.ControlPlane.Etcd.URL.String()
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "integration: stopping the control plane: %v\n", err)
		}
	}()

	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			fmt.Fprintf(os.Stderr, "integration: %v\n", err)
			return 1
		}
	}
	if k8sClient, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		return 1
	}
	return m.Run()
}
