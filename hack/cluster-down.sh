#!/usr/bin/env bash
# Stops the local cluster of hack/cluster-up.sh and undoes its host changes:
# pods are deleted through the kubelet first (so the CNI plugin releases their
# network), then every process it started is stopped by its recorded PID (after
# checking the PID is still that program), leftover container shims on its own
# containerd socket are killed, its mounts unmounted, kube-proxy's and the CNI
# plugins' iptables rules, the cni0 bridge and the kubepods cgroups removed, the
# sysctls it changed restored, and $CLUSTER_DIR deleted (KEEP_CLUSTER_DIR=1 keeps
# it, e.g. to read the logs). Safe to run twice or after a failed up.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
CLUSTER_DIR=${CLUSTER_DIR:-$root/bin/cluster}
D=$CLUSTER_DIR
kb="$root/bin/kube-$KUBE_VERSION"
sock="$D/containerd/containerd.sock"

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
[ "$(id -u)" = 0 ] || { log "ERROR: needs root"; exit 1; }
if [ ! -d "$D" ]; then
	log "No local cluster in $D"
	exit 0
fi
start=$(date +%s.%N)

alive() { # name: is the recorded process still the program we started?
	local f="$D/pids/$1.pid" pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	[ -r "/proc/$pid/cmdline" ] || return 1
	# The command line names our binary; a recycled PID would not.
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$1"
}
running() { # pid: alive and not a zombie waiting for a parent that is gone
	[ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
stop() { # name...: SIGTERM, then SIGKILL after 10 s
	local name pid
	for name in "$@"; do
		alive "$name" || { rm -f "$D/pids/$name.pid"; continue; }
		pid=$(cat "$D/pids/$name.pid")
		kill -TERM "$pid" 2>/dev/null
		for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
		running "$pid" && { log "$name did not stop in 10s; killing it"; kill -KILL "$pid" 2>/dev/null; }
		rm -f "$D/pids/$name.pid"
		log "Stopped $name"
	done
}
k() { "$kb/kubectl" --kubeconfig "$D/kubeconfig" --request-timeout 10s "$@"; }

# 1. No new pods, then every pod deleted through the kubelet so that CNI DEL runs.
stop kube-controller-manager kube-scheduler
if alive kube-apiserver && alive kubelet; then
	k delete pods --all --all-namespaces --grace-period=2 --wait=false >/dev/null 2>&1
	for _ in $(seq 60); do
		[ -z "$(k get pods --all-namespaces -o name 2>/dev/null)" ] &&
			[ -z "$(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null)" ] && break
		sleep 0.5
	done
	log "Deleted the pods"
fi

# 2. The node, then the control plane.
stop kubelet kube-proxy clusterdns
# Containers the kubelet did not get to: force-delete them with runc, then their shims.
if [ -d "$D/runc" ]; then
	for r in "$D"/runc/*/; do
		for id in $(runc --root "$r" list -q 2>/dev/null); do
			runc --root "$r" delete --force "$id" >/dev/null 2>&1
		done
	done
fi
stop containerd
for pid in $(pgrep -f "containerd-shim.*-address $sock" 2>/dev/null); do
	kill -KILL "$pid" 2>/dev/null && log "Killed leftover shim $pid"
done
stop kube-apiserver etcd

# 3. Mounts under our directory (overlay snapshots, netns, pod volumes), deepest first.
awk -v d="$D" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
	umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
done

# 4. Network: kube-proxy's rules, the CNI plugins' chains, the bridge.
if [ -x "$kb/kube-proxy" ]; then
	"$kb/kube-proxy" --cleanup >/dev/null 2>&1 || true
fi
# The kubelet's (KUBE-FIREWALL, canaries) and the CNI plugins' chains too, when
# the host had none of them before up.
if ! grep -qE -- '-N (KUBE|CNI)-' "$D/iptables.before" 2>/dev/null; then
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null || continue
		for t in filter nat mangle; do
			"$ipt" -t "$t" -S 2>/dev/null | grep -E -- '-j (KUBE|CNI)-' | sed 's/^-A/-D/' | while read -r rule; do
				eval "$ipt" -t "$t" "$rule" 2>/dev/null
			done
			chains=$("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}')
			for c in $chains; do "$ipt" -t "$t" -F "$c" 2>/dev/null; done
			for c in $chains; do "$ipt" -t "$t" -X "$c" 2>/dev/null; done
		done
	done
fi
ip link del cni0 2>/dev/null && log "Deleted the cni0 bridge"

# 5. Cgroups the kubelet made (cgroup v1: one tree per controller), leaves first.
find /sys/fs/cgroup -mindepth 2 -depth -type d -path '*/kubepods*' -exec rmdir {} + 2>/dev/null
find /sys/fs/cgroup -mindepth 2 -depth -type d -path '*/kubepods*' -exec rmdir {} + 2>/dev/null

# 6. Sysctls back to what they were, paths we created removed.
if [ -f "$D/sysctls.saved" ]; then
	while IFS= read -r kv; do sysctl -qw "$kv" 2>/dev/null; done <"$D/sysctls.saved"
	log "Restored $(wc -l <"$D/sysctls.saved") sysctls"
fi
if [ -f "$D/created-paths" ]; then
	sort -r "$D/created-paths" | while read -r p; do rm -rf "$p"; done
fi

left=$(ls "$D/pids" 2>/dev/null)
if [ "${KEEP_CLUSTER_DIR:-0}" = 1 ]; then
	log "Kept $D"
else
	rm -rf "$D"
fi
log "Cluster down in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')s"
[ -z "$left" ] || { log "ERROR: could not stop: $left"; exit 1; }
