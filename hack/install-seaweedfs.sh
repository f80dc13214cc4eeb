#!/usr/bin/env bash
# Installs SeaweedFS's weed (an S3-compatible object store in one binary) at a
# pinned version into bin/, once, from the Go module proxy: bin/weed-VERSION is
# the cached build and bin/weed links to it, as hack/go-install-tool.sh does.
#
#   hack/install-seaweedfs.sh VERSION   # a module version, e.g. v0.0.0-20261109003541-7506e5f91cd6
#
# Why not `go install ...@VERSION`: SeaweedFS's go.mod has a replace directive,
# which go install refuses; so this builds ./weed inside a writable copy of the
# downloaded module, as its main module (the module proxy serves no semver tags
# for it, only pseudo-versions; the version's release number is in
# weed/util/version/constants.go).
set -euo pipefail

version=$1
mod=github.com/seaweedfs/seaweedfs
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
target="$bin/weed-$version"

mkdir -p "$bin"
if [ ! -x "$target" ]; then
	echo "Installing weed $version ($mod, a few minutes)" >&2
	tmp=$(mktemp -d)
	trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	# Outside any module, so that Proctor's go.mod and go.sum are left alone.
	cd "$tmp"
	export GO111MODULE=on GOFLAGS=-mod=mod
	dir=$(go mod download -json "$mod@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	if [ -z "$dir" ]; then
		echo "cannot download $mod@$version" >&2
		exit 1
	fi
	cp -r "$dir" src
	chmod -R u+w src
	(cd src && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/weed" ./weed)
	mv "$tmp/weed" "$target"
fi
ln -sf "$(basename "$target")" "$bin/weed"
