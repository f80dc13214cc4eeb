#!/usr/bin/env bash
# Builds pinned Kubernetes components from the Go module proxy (no downloads of
# release binaries, no Docker) into bin/kube-$KUBE_VERSION/, once per version:
#
#   hack/install-kube.sh [component...]      # default: etcd kube-apiserver kubectl
#
# Components: etcd kube-apiserver kubectl (kube-controller-manager kube-scheduler
# kube-proxy kubelet come with the local cluster). The versions are pinned in
# hack/kube/go.mod; KUBE_VERSION must match it.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/kube-$KUBE_VERSION"
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(etcd kube-apiserver kubectl)

missing=()
for c in "${components[@]}"; do
	[ -x "$out/$c" ] || missing+=("$c")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "$out"
	exit 0
fi

pkgs=()
for c in "${missing[@]}"; do
	case "$c" in
	etcd) pkgs+=(./etcd) ;;
	kube-apiserver | kubectl | kube-controller-manager | kube-scheduler | kube-proxy | kubelet)
		pkgs+=("k8s.io/kubernetes/cmd/$c") ;;
	*) echo "unknown component $c" >&2; exit 2 ;;
	esac
done

# Without the version stamp, kubectl version and Helm's kubeVersion checks fail.
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

echo "Building ${missing[*]} $KUBE_VERSION from the module proxy (several minutes the first time)" >&2
mkdir -p "$out"
tmp=$(mktemp -d "$out/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$root/hack/kube" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
mv "$tmp"/* "$out/"
echo "$out"
