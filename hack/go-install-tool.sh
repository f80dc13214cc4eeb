#!/usr/bin/env bash
# Installs a Go tool at a pinned version into bin/, once: bin/NAME-VERSION is the
# cached build and bin/NAME links to it, so changing a pin rebuilds and nothing else does.
#
#   hack/go-install-tool.sh NAME PACKAGE VERSION
set -euo pipefail

name=$1 pkg=$2 version=$3
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
target="$bin/$name-$version"

mkdir -p "$bin"
if [ ! -x "$target" ]; then
	echo "Installing $name $version ($pkg)" >&2
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	GOBIN="$tmp" GOFLAGS=-mod=mod go install "$pkg@$version"
	mv "$tmp/$(basename "${pkg%/v[0-9]*}")" "$target" 2>/dev/null || mv "$tmp"/* "$target"
fi
ln -sf "$(basename "$target")" "$bin/$name"
