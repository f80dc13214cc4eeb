#!/usr/bin/env bash
# Installs what the local cluster needs from the host's package manager (Debian):
# containerd, runc, the CNI plugins, iptables, conntrack, iproute2, procps, and the static busybox
# that stands in for the busybox image of the agent sample. Kubernetes itself is
# built from the Go module proxy (hack/install-kube.sh), never installed here.
set -euo pipefail

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/portmap ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v ip >/dev/null || need+=(iproute2)
{ command -v sysctl >/dev/null && command -v pgrep >/dev/null; } || need+=(procps)
file=$(command -v busybox || true)
{ [ -n "$file" ] && ! ldd "$file" >/dev/null 2>&1; } || need+=(busybox-static)
[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
	echo "missing: ${need[*]} (install them with your package manager; these are Debian's names)" >&2
	exit 1
fi
echo "Installing ${need[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
	{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
