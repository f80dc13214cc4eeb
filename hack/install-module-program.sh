#!/usr/bin/env bash
# Builds a program from a module on the Go module proxy at a pinned version into
# bin/, once: bin/NAME-VERSION is the cached build and bin/NAME links to it, as
# hack/go-install-tool.sh does.
#
#   hack/install-module-program.sh NAME MODULE VERSION PACKAGE [BUILD-TAGS]
#   # e.g. hack/install-module-program.sh jaeger github.com/jaegertracing/jaeger v1.76.0 ./cmd/jaeger
#
# Why not `go install MODULE/PACKAGE@VERSION`: go install refuses a module whose
# go.mod has replace directives (SeaweedFS's, Prometheus's), and outside its own
# module a program builds against whatever newer dependencies the graph picks.
# So this builds PACKAGE inside a writable copy of the downloaded module, as its
# main module, with the module's own go.mod and go.sum: the program as its
# authors build it.
set -euo pipefail

name=$1 mod=$2 version=$3 pkg=$4 tags=${5:-}
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
target="$bin/$name-$version"

mkdir -p "$bin"
if [ ! -x "$target" ]; then
	echo "Installing $name $version ($mod, a few minutes)" >&2
	tmp=$(mktemp -d)
	trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	# Outside any module, so that Proctor's go.mod and go.sum are left alone.
	cd "$tmp"
	# GOWORK=off: a module may carry a go.work of its own (Prometheus does).
	export GO111MODULE=on GOFLAGS=-mod=mod GOWORK=off
	dir=$(go mod download -json "$mod@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	if [ -z "$dir" ]; then
		echo "cannot download $mod@$version" >&2
		exit 1
	fi
	cp -r "$dir" src
	chmod -R u+w src
	(cd src && CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "-s -w" -o "$tmp/$name" "$pkg")
	mv "$tmp/$name" "$target"
fi
ln -sf "$(basename "$target")" "$bin/$name"
