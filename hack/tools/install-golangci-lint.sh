#!/usr/bin/env bash
# Builds golangci-lint with kube-api-linter built in (hack/tools/golangci-kal)
# into bin/, once per pair of versions: bin/golangci-lint-VERSION-kal-COMMIT is
# the cached build and bin/golangci-lint links to it, as hack/go-install-tool.sh
# does for the other tools.
#
#   hack/tools/install-golangci-lint.sh GOLANGCI_LINT_VERSION KUBE_API_LINTER_VERSION
#
# Why not `golangci-lint custom`: it clones golangci-lint with git, and Proctor's
# machines reach only the Go module proxy. hack/tools/golangci-kal is the same
# program built from modules; its go.mod pins both versions, and this script
# refuses to build if the Makefile's pins and go.mod disagree.
set -euo pipefail

version=$1 kal=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
src="$root/hack/tools/golangci-kal"
bin="$root/bin"
target="$bin/golangci-lint-$version-kal-${kal##*-}"

mkdir -p "$bin"
if [ ! -x "$target" ]; then
	cd "$src"
	for pin in "github.com/golangci/golangci-lint/v2 $version" "sigs.k8s.io/kube-api-linter $kal"; do
		mod=${pin% *} want=${pin#* }
		have=$(go list -m -f '{{.Version}}' "$mod")
		if [ "$have" != "$want" ]; then
			echo "hack/tools/golangci-kal/go.mod pins $mod $have, the Makefile $want: change both (go get $mod@$want && go mod tidy there)" >&2
			exit 1
		fi
	done
	echo "Building golangci-lint $version with kube-api-linter $kal (about a minute the first time)" >&2
	tmp=$(mktemp -d "$bin/.golangci-lint-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	# -mod=readonly: build exactly what go.mod and go.sum pin, never update them.
	GOFLAGS="${GOFLAGS:-} -mod=readonly" CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$tmp/golangci-lint" .
	mv "$tmp/golangci-lint" "$target"
fi
ln -sf "$(basename "$target")" "$bin/golangci-lint"
