#!/usr/bin/env bash
# Installs Prometheus Operator's PodMonitor and ServiceMonitor CRDs at a pinned
# version into bin/prometheus-operator-crds-VERSION/, once, from the Go module
# proxy (the operator's module holds them in example/prometheus-operator-crd).
# The docs' commands test (test/chart) gives them to its kube-apiserver: the
# docs install the chart with its PodMonitor and ServiceMonitor, as a user with
# Prometheus Operator would.
#
#   hack/install-prometheus-crds.sh VERSION   # e.g. v0.93.1
set -euo pipefail

version=$1
mod=github.com/prometheus-operator/prometheus-operator
root=$(cd "$(dirname "$0")/.." && pwd)
target="$root/bin/prometheus-operator-crds-$version"

if [ ! -f "$target/monitoring.coreos.com_podmonitors.yaml" ]; then
	echo "Installing Prometheus Operator's CRDs $version ($mod)" >&2
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	# Outside any module, so that Proctor's go.mod and go.sum are left alone.
	cd "$tmp"
	export GO111MODULE=on GOFLAGS=-mod=mod
	dir=$(go mod download -json "$mod@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	if [ -z "$dir" ]; then
		echo "cannot download $mod@$version" >&2
		exit 1
	fi
	mkdir -p "$tmp/crds"
	for kind in podmonitors servicemonitors; do
		cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$tmp/crds/"
	done
	chmod -R u+w "$tmp/crds"
	mkdir -p "$root/bin"
	rm -rf "$target"
	mv "$tmp/crds" "$target"
fi
