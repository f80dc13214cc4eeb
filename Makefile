# Proctor's build. Every tool is pinned and installed into bin/ by hack/ scripts;
# nothing but Go needs to be on the machine.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/proctor-dev/proctor/internal/version.Version=$(VERSION)

LOCALBIN := $(CURDIR)/bin
CONTROLLER_TOOLS_VERSION ?= v0.21.0
CONTROLLER_GEN := $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)

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
manifests: $(CONTROLLER_GEN) ## Generate the CRD into config/crd.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: ## go vet, and gofmt must have nothing to say.
	go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: verify
verify: generate manifests lint ## Regenerate everything and fail if the tree changed.
	go mod tidy
	git diff --exit-code -- . ':(exclude)bin'
	@untracked=$$(git ls-files --others --exclude-standard); if [ -n "$$untracked" ]; then echo "untracked files after generation:"; echo "$$untracked"; exit 1; fi

##@ Test

.PHONY: test
test: lint ## Unit and end-to-end tests of the local runner (the README's test command).
	go test -race -timeout $(TEST_TIMEOUT) ./...

.PHONY: bench
bench: ## Benchmarks: rate-limit efficiency, runner vs bare HTTP, memory on 1M samples.
	go test -run '^$$' -bench . -benchtime 1x -timeout 60m ./test/bench/ | tee bench.out

##@ Build

.PHONY: build
build: ## Build bin/proctor and bin/fakellm.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/proctor .
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/fakellm ./test/fakellm/cmd/fakellm

##@ Tools

$(CONTROLLER_GEN):
	hack/go-install-tool.sh controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen $(CONTROLLER_TOOLS_VERSION)
