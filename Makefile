# Proctor's build. Every tool is pinned and installed into bin/ by hack/ scripts;
# nothing but Go needs to be on the machine.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/proctor-dev/proctor/internal/version.Version=$(VERSION)

LOCALBIN := $(CURDIR)/bin
CONTROLLER_TOOLS_VERSION ?= v0.21.0
CONTROLLER_GEN := $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
# The API reference (docs/reference/api.md) is rendered from the Go types by crd-ref-docs.
CRD_REF_DOCS_VERSION ?= v0.3.0
CRD_REF_DOCS := $(LOCALBIN)/crd-ref-docs-$(CRD_REF_DOCS_VERSION)
KUSTOMIZE_VERSION ?= v5.7.1
KUSTOMIZE := $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
HELM_VERSION ?= v3.22.0
HELM := $(LOCALBIN)/helm-$(HELM_VERSION)
# jq for the docs' pipelines in test/chart (gojq: jq's language, in Go; the newest that builds from the proxy).
GOJQ_VERSION ?= v0.12.17
GOJQ := $(LOCALBIN)/gojq-$(GOJQ_VERSION)
GOTESTSUM_VERSION ?= v1.13.0
GOTESTSUM := $(LOCALBIN)/gotestsum-$(GOTESTSUM_VERSION)
# SeaweedFS's weed, an S3-compatible object store (release 4.53; the proxy serves only pseudo-versions): the real
# store of the results-location tests (test/objstore, the local e2e).
SEAWEEDFS_VERSION ?= v0.0.0-20261109003541-7506e5f91cd6
WEED := $(LOCALBIN)/weed-$(SEAWEEDFS_VERSION)
# Jaeger v2 (an OpenTelemetry Collector with Jaeger's in-memory store and query API; the module's v1.76.0 is
# Jaeger 2.13): the real trace store the e2e tests send traces to over OTLP.
JAEGER_VERSION ?= v1.76.0
JAEGER := $(LOCALBIN)/jaeger-$(JAEGER_VERSION)
# Prometheus (the module's v0.316.0 is Prometheus 3.16): the real Prometheus that scrapes runner pods in the
# cluster e2e.
PROMETHEUS_VERSION ?= v0.316.0
PROMETHEUS := $(LOCALBIN)/prometheus-$(PROMETHEUS_VERSION)
# Kueue's controller (cmd/kueue, its image registry.k8s.io/kueue/kueue:$(KUEUE_VERSION), made by
# hack/build-images.sh) and its Helm chart, from its module: the cluster e2e installs it to admit runs through queues.
KUEUE_VERSION ?= v0.17.0
KUEUE := $(LOCALBIN)/kueue-$(KUEUE_VERSION)
# Prometheus Operator's PodMonitor and ServiceMonitor CRDs, from its module (hack/install-prometheus-crds.sh): the
# docs' commands test installs the chart's monitoring on a kube-apiserver that has them. The version of the Go
# types in go.mod (pkg/apis/monitoring), which the chart test decodes them with.
PROMETHEUS_OPERATOR_VERSION ?= v0.93.1
PROMETHEUS_CRDS := $(LOCALBIN)/prometheus-operator-crds-$(PROMETHEUS_OPERATOR_VERSION)/monitoring.coreos.com_podmonitors.yaml
# Kubernetes components built from the module proxy (hack/install-kube.sh).
KUBE_VERSION ?= v1.36.3
KUBE_BIN := $(LOCALBIN)/kube-$(KUBE_VERSION)
# golangci-lint with kube-api-linter built in (hack/tools/golangci-kal; its go.mod pins the same versions).
GOLANGCI_LINT_VERSION ?= v2.15.0
KUBE_API_LINTER_VERSION ?= v0.0.0-20260716143926-092fe0c72997
GOLANGCI_LINT := $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)-kal-$(lastword $(subst -, ,$(KUBE_API_LINTER_VERSION)))
# kubectl: yours if installed, else the pinned one.
KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo $(KUBE_BIN)/kubectl)

# The image make deploy installs.
IMG ?= proctor:dev
# The tag of the images make images builds (ghcr.io/proctor-dev/proctor:$(IMAGE_TAG), ...).
IMAGE_TAG ?= v0.1.0

# How long `go test` may run per package; the e2e packages start real processes.
TEST_TIMEOUT ?= 20m

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: manifests
manifests: $(CONTROLLER_GEN) $(CRD_REF_DOCS) ## Generate the CRD (config/crd), the manager's RBAC (config/rbac), their copies in the Helm chart and the API reference (docs/reference/api.md).
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	go run ./hack/chartgen
	$(CRD_REF_DOCS) --source-path=./api --config=hack/crd-ref-docs.yaml --renderer=markdown --output-path=docs/reference/api.md --log-level=ERROR

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint (.golangci.yml: go vet, staticcheck, kube-api-linter on api/, ...), gofmt/goimports on every file, the entry-point check.
	$(GOLANGCI_LINT) run ./...
	cd hack/image && $(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) fmt --diff $$(git ls-files '*.go')
	hack/check-entrypoints.sh

.PHONY: verify
verify: $(CONTROLLER_GEN) $(CRD_REF_DOCS) lint ## Lint, regenerate everything (generate, manifests, go mod tidy) and fail if that changed a file (make test runs it).
	hack/verify.sh

##@ Test

# Test tiers, as jobset's: test-unit, test-integration and test-e2e are disjoint and together are everything.
# Packages that need Kubernetes binaries or a cluster; the rest are unit tests.
NON_UNIT_PKGS := /test/integration|/test/chart|/test/objstore|/test/e2e/

.PHONY: test
test: verify test-race test-integration test-e2e ## Everything: generated files and lint, unit tests with the race detector, integration and end-to-end tests (the README's test command).

.PHONY: test-unit
test-unit: ## Unit tests: about a minute, no root, no Kubernetes binaries.
	go test -timeout $(TEST_TIMEOUT) $$(go list ./... | grep -Ev '$(NON_UNIT_PKGS)')
	cd hack/image && go test ./...

.PHONY: test-race
test-race: ## The unit tests with the race detector (several minutes; what make test runs).
	go test -race -timeout $(TEST_TIMEOUT) $$(go list ./... | grep -Ev '$(NON_UNIT_PKGS)')
	cd hack/image && go test -race ./...

.PHONY: test-integration
test-integration: kube-assets $(HELM) $(GOJQ) $(KUSTOMIZE) $(WEED) $(PROMETHEUS_CRDS) ## Integration tests: the real manager against a real kube-apiserver + etcd; the chart rendered by Helm, and the docs' kubectl and helm commands run against a kube-apiserver; the results store's client against a real S3-compatible server (weed).
	go test -race -timeout $(TEST_TIMEOUT) ./test/integration/ ./test/chart/ ./test/objstore/

.PHONY: test-e2e
test-e2e: test-e2e-local e2e ## End-to-end tests: the proctor binary locally, then a real local cluster (root).

.PHONY: test-e2e-local
test-e2e-local: host-deps-images $(WEED) $(JAEGER) ## End-to-end tests of the proctor binary, locally (no cluster; PostgreSQL for the CRM example; weed for results locations; Jaeger for traces; Chromium for proctor view).
	go test -race -timeout $(TEST_TIMEOUT) ./test/e2e/local/

.PHONY: test-go
test-go: lint test-unit test-integration test-e2e-local ## Everything but the cluster (no root needed).

.PHONY: e2e
e2e: host-deps build $(KUEUE) images $(HELM) $(JAEGER) $(PROMETHEUS) $(GOTESTSUM) ## End-to-end tests on a real local cluster (hack/cluster-up.sh; needs root). KEEP_CLUSTER=1 keeps it.
	hack/install-kube.sh etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl >/dev/null
	HELM=$(HELM) GOTESTSUM=$(GOTESTSUM) KUEUE_VERSION=$(KUEUE_VERSION) hack/e2e.sh

.PHONY: kube-assets
kube-assets: ## Build etcd, kube-apiserver and kubectl $(KUBE_VERSION) into bin/ (once; several minutes).
	hack/install-kube.sh etcd kube-apiserver kubectl

.PHONY: bench
bench: kube-assets host-deps-images $(WEED) ## Benchmarks: rate limits, runner vs bare HTTP, memory, the cost of per-sample isolation (PostgreSQL); operator latency and memory.
	go test -run '^$$' -bench . -benchtime 1x -timeout 60m ./test/bench/ ./test/integration/ | tee bench.out

# BENCH_COUNT: how many times bench-cluster runs each case (in a row, on one cluster).
BENCH_COUNT ?= 1

.PHONY: bench-cluster
bench-cluster: host-deps build images $(HELM) ## The cluster benchmark on a real local cluster (root): a run's samples/s against its bound, the objects it made, the manager's memory, etcd's bytes per 1,000 samples (BenchmarkClusterThroughput).
	hack/install-kube.sh etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl >/dev/null
	HELM=$(HELM) E2E_RUN='^$$' E2E_BENCH=. E2E_BENCH_COUNT=$(BENCH_COUNT) hack/e2e.sh | tee bench-cluster.out

.PHONY: seaweedfs
seaweedfs: $(WEED) ## Build SeaweedFS's weed $(SEAWEEDFS_VERSION) into bin/ (once; about 6 minutes cold).

.PHONY: jaeger
jaeger: $(JAEGER) ## Build Jaeger $(JAEGER_VERSION) (v2) into bin/ (once; a few minutes cold).

.PHONY: prometheus
prometheus: $(PROMETHEUS) ## Build Prometheus $(PROMETHEUS_VERSION) into bin/ (once; a few minutes cold).

.PHONY: kueue
kueue: $(KUEUE) ## Build Kueue $(KUEUE_VERSION)'s controller into bin/ (once; several minutes cold). The cluster e2e installs it.

.PHONY: helm
helm: $(HELM) ## Build Helm $(HELM_VERSION) into bin/ (once; a few minutes). The chart tests (test/chart) run it.

##@ Build

.PHONY: build
build: ## Build bin/proctor and bin/fakellm.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/proctor .
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/fakellm ./test/fakellm/cmd/fakellm

.PHONY: images
images: host-deps-images $(WEED) ## Build the proctor, fakellm, pause, busybox, postgres and seaweedfs image tarballs into bin/images (no Docker); Kueue's too once it is built (make kueue; make e2e does).
	IMAGE_TAG=$(IMAGE_TAG) VERSION=$(VERSION) KUEUE=$(wildcard $(KUEUE)) KUEUE_VERSION=$(KUEUE_VERSION) hack/build-images.sh $(LOCALBIN)/images

##@ Local cluster

.PHONY: host-deps
host-deps: ## Install the Debian packages the local cluster and the images need (root; apt-get), if missing.
	hack/install-host-deps.sh cluster

.PHONY: host-deps-images
host-deps-images: ## Install the Debian packages the images and the local e2e tests need (static busybox, PostgreSQL, Chromium), if missing.
	hack/install-host-deps.sh images

.PHONY: demo
demo: host-deps build images $(HELM) ## Start the local cluster, install the chart, run a sample Evaluation and show its results.
	hack/install-kube.sh etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl >/dev/null
	HELM=$(HELM) hack/demo.sh

.PHONY: cluster-up
cluster-up: host-deps images ## Start the local single-node cluster (root; see docs/tasks/local-cluster.md).
	hack/cluster-up.sh

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and undo its host changes.
	hack/cluster-down.sh

##@ Deployment

.PHONY: install
install: manifests $(KUSTOMIZE) ## Install the CRD into the cluster of your kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: $(KUSTOMIZE) ## Remove the CRD (and every Evaluation) from the cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests $(KUSTOMIZE) ## Deploy the manager, image IMG, into proctor-system.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) ## Remove the manager (and the CRD) from the cluster.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -

##@ Tools

$(CONTROLLER_GEN):
	hack/go-install-tool.sh controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen $(CONTROLLER_TOOLS_VERSION)

$(CRD_REF_DOCS):
	hack/go-install-tool.sh crd-ref-docs github.com/elastic/crd-ref-docs $(CRD_REF_DOCS_VERSION)

# Not hack/go-install-tool.sh: SeaweedFS's go.mod has a replace directive, which go install refuses (see the script).
$(WEED):
	hack/install-module-program.sh weed github.com/seaweedfs/seaweedfs $(SEAWEEDFS_VERSION) ./weed

# Jaeger and Prometheus, built in their own modules as their authors build them (see the script).
$(JAEGER):
	hack/install-module-program.sh jaeger github.com/jaegertracing/jaeger $(JAEGER_VERSION) ./cmd/jaeger

$(PROMETHEUS):
	hack/install-module-program.sh prometheus github.com/prometheus/prometheus $(PROMETHEUS_VERSION) ./cmd/prometheus

$(KUEUE):
	hack/install-module-program.sh kueue sigs.k8s.io/kueue $(KUEUE_VERSION) ./cmd/kueue

$(GOJQ):
	hack/go-install-tool.sh gojq github.com/itchyny/gojq/cmd/gojq $(GOJQ_VERSION)

# gotestsum runs the cluster e2e (hack/e2e.sh): after the tests' output it
# repeats each failed test's, so that a log's tail says why.
$(GOTESTSUM):
	hack/go-install-tool.sh gotestsum gotest.tools/gotestsum $(GOTESTSUM_VERSION)

$(KUSTOMIZE):
	hack/go-install-tool.sh kustomize sigs.k8s.io/kustomize/kustomize/v5 $(KUSTOMIZE_VERSION)

# Not hack/go-install-tool.sh: kube-api-linter is built into golangci-lint (see the script).
$(GOLANGCI_LINT):
	hack/tools/install-golangci-lint.sh $(GOLANGCI_LINT_VERSION) $(KUBE_API_LINTER_VERSION)

$(PROMETHEUS_CRDS):
	hack/install-prometheus-crds.sh $(PROMETHEUS_OPERATOR_VERSION)

# Not hack/go-install-tool.sh: Helm needs link-time version stamps (see the script).
$(HELM):
	hack/install-helm.sh $(HELM_VERSION)
