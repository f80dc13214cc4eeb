#!/usr/bin/env bash
# Installs what Proctor's build and local cluster need from the host's package
# manager (Debian). Kubernetes itself is built from the Go module proxy
# (hack/install-kube.sh), never installed here.
#
#   hack/install-host-deps.sh images    # the static busybox that stands in for the
#                                       # busybox image of the agent sample, CA certificates,
#                                       # PostgreSQL (the CRM example's service, locally
#                                       # and in the proctor-postgres image), and Chromium
#                                       # (the local e2e drives proctor view's page in it)
#   hack/install-host-deps.sh [cluster] # all of images, plus containerd, runc, the CNI
#                                       # plugins, iptables, conntrack, openssl, curl,
#                                       # iproute2 and procps
#
# Every entry point that needs them (make images, cluster-up, e2e, demo, test)
# runs this first; hack/check-entrypoints.sh keeps that order checked.
set -euo pipefail

group=${1:-cluster}
case $group in images | cluster) ;; *)
	echo "usage: $0 [images|cluster]" >&2
	exit 2
	;;
esac

need=()
file=$(command -v busybox || true)
{ [ -n "$file" ] && ! ldd "$file" >/dev/null 2>&1; } || need+=(busybox-static)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
# Debian's PostgreSQL server, whichever major version the release ships.
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium)
if [ "$group" = cluster ]; then
	command -v containerd >/dev/null || need+=(containerd)
	command -v runc >/dev/null || need+=(runc)
	[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/portmap ] || need+=(containernetworking-plugins)
	command -v iptables >/dev/null || need+=(iptables)
	command -v conntrack >/dev/null || need+=(conntrack)
	command -v openssl >/dev/null || need+=(openssl)
	command -v curl >/dev/null || need+=(curl)
	command -v ip >/dev/null || need+=(iproute2)
	{ command -v sysctl >/dev/null && command -v pgrep >/dev/null; } || need+=(procps)
fi
[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
	echo "missing: ${need[*]} (install them with your package manager; these are Debian's names)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "missing: ${need[*]}: run as root, or: sudo apt-get install ${need[*]}" >&2
	exit 1
fi
echo "Installing ${need[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
if [[ " ${need[*]} " == *" postgresql "* ]]; then
	# Only the programs: no cluster created and started by the package.
	mkdir -p /etc/postgresql-common/createcluster.d
	echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/proctor.conf
fi
apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
	{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
