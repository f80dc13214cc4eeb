#!/usr/bin/env bash
# Installs Helm at a pinned version into bin/, once, from the Go module proxy:
# bin/helm-VERSION is the cached build and bin/helm links to it, as
# hack/go-install-tool.sh does for the other tools.
#
#   hack/install-helm.sh VERSION        # e.g. v3.22.0
#
# Why not hack/go-install-tool.sh: a plain `go install` leaves out the link-time
# stamps of Helm's own release builds, and then `helm template` and `helm lint`
# assume Kubernetes v1.20 and refuse the chart's kubeVersion (>=1.30). Like Helm's
# Makefile, this stamps the Kubernetes version of the client-go Helm is built
# with, and Helm's own version.
set -euo pipefail

version=$1
pkg=helm.sh/helm/v3/cmd/helm
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
target="$bin/helm-$version"

mkdir -p "$bin"
if [ ! -x "$target" ]; then
	echo "Installing helm $version ($pkg)" >&2
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	# Outside any module, so that Proctor's go.mod and go.sum are left alone.
	cd "$tmp"
	export GO111MODULE=on GOFLAGS=-mod=mod
	gomod=$(go mod download -json "helm.sh/helm/v3@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
	clientgo=$(awk '$1 == "k8s.io/client-go" { print $2 }' "$gomod")
	if [ -z "$clientgo" ]; then
		echo "cannot find k8s.io/client-go in $gomod" >&2
		exit 1
	fi
	# client-go v0.MINOR.x is Kubernetes v1.MINOR.x.
	minor=${clientgo#v0.}
	minor=${minor%%.*}
	ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
	for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
		ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
	done
	GOBIN="$tmp/bin" go install -ldflags "$ldflags" "$pkg@$version"
	mv "$tmp/bin/helm" "$target"
fi
ln -sf "$(basename "$target")" "$bin/helm"
