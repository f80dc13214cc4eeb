#!/usr/bin/env bash
# Starts a real single-node Kubernetes cluster on this machine, without Docker
# and without a registry:
#
#   hack/cluster-up.sh            # then: export KUBECONFIG=$(hack/cluster-up.sh --kubeconfig)
#   hack/cluster-up.sh --load-images   # import rebuilt images (make images) into the running node
#   hack/cluster-down.sh          # stops everything this started and undoes its host changes
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and kubectl are the pinned versions built from the Go module proxy
# by hack/install-kube.sh (cached in bin/kube-<version>); containerd, runc and
# the CNI plugins are Debian's (hack/install-host-deps.sh). Images are the
# tarballs of hack/build-images.sh, imported into the node's containerd: pods use
# them with imagePullPolicy IfNotPresent and nothing is ever pulled.
#
# Everything lives in $CLUSTER_DIR (default bin/cluster): certificates,
# kubeconfig, configs, data, logs (logs/<component>.log) and the PID of every
# process started (pids/). It needs root: the kubelet, containerd, iptables and
# sysctls. The facts behind each setting are in docs/tasks/local-cluster.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
CLUSTER_DIR=${CLUSTER_DIR:-$root/bin/cluster}
NODE_NAME=${NODE_NAME:-proctor-node}
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
KUBERNETES_SVC_IP=${KUBERNETES_SVC_IP:-10.96.0.1}
POD_CIDR=${POD_CIDR:-10.244.0.0/24}
APISERVER_PORT=${APISERVER_PORT:-6443}
ETCD_PORT=${ETCD_PORT:-12379}
IMAGES_DIR=${IMAGES_DIR:-$root/bin/images}
PAUSE_IMAGE=${PAUSE_IMAGE:-localhost/pause:3.10}
D=$CLUSTER_DIR
kb="$root/bin/kube-$KUBE_VERSION"

if [ "${1:-}" = "--kubeconfig" ]; then
	echo "$D/kubeconfig"
	exit 0
fi
# --load-images: (re)import the image tarballs into the running cluster's node,
# e.g. after make images; pods started afterwards use them.
if [ "${1:-}" = "--load-images" ]; then
	for tar in "$IMAGES_DIR"/*.tar; do
		ctr --address "$D/containerd/containerd.sock" -n k8s.io images import "$tar" >/dev/null
		echo "Loaded $tar" >&2
	done
	exit 0
fi

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "the local cluster needs root (kubelet, containerd, iptables, sysctls)"

# Up is idempotent: a running cluster only gets the current images.
if [ -f "$D/pids/kube-apiserver.pid" ] && kill -0 "$(cat "$D/pids/kube-apiserver.pid")" 2>/dev/null; then
	log "A cluster is already running in $D (hack/cluster-down.sh stops it); reloading its images"
	"$0" --load-images
	echo "$D/kubeconfig"
	exit 0
fi
if [ -d "$D/pids" ] && [ -n "$(ls -A "$D/pids" 2>/dev/null)" ]; then
	log "Cleaning up what a previous cluster left behind"
	"$root/hack/cluster-down.sh"
fi

start=$(date +%s.%N)
"$root/hack/install-host-deps.sh"
"$root/hack/install-kube.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl >/dev/null
[ -f "$IMAGES_DIR/pause.tar" ] || "$root/hack/build-images.sh" "$IMAGES_DIR" >&2
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$root/bin/clusterdns" ./hack/clusterdns)

NODE_IP=${NODE_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
[ -n "$NODE_IP" ] || NODE_IP=$(ip -4 -o addr show scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}')
[ -n "$NODE_IP" ] || die "cannot find this machine's IP address (set NODE_IP)"

mkdir -p "$D"/{pki,pids,logs,etcd,containerd/root,containerd/state,runc,cni/net.d,kubelet,kubelet-pki,pod-logs,volume-plugins,flex-volumes}
chmod 700 "$D/pki"
echo "$NODE_IP" >"$D/node-ip"

# --- Host changes, recorded so that cluster-down.sh can undo them ---------------
if [ ! -f "$D/sysctls.saved" ]; then
	# The kubelet rewrites the first three; forwarding and bridge netfilter are needed
	# for Service traffic between pods.
	for k in kernel.panic kernel.panic_on_oops vm.overcommit_memory net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables; do
		v=$(sysctl -n "$k" 2>/dev/null) && echo "$k=$v"
	done >"$D/sysctls.saved"
fi
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || log "net.bridge.bridge-nf-call-iptables is not available; kube-proxy masquerades all Service traffic instead"
[ -f "$D/iptables.before" ] || { iptables-save; ip6tables-save; } >"$D/iptables.before" 2>/dev/null || true
# Directories whose paths the kubelet and CNI hard-code; removed at teardown only if we made them.
: >"$D/created-paths"
for p in /var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni /var/lib/cni/results /run/containerd /run/containerd/s /run/containerd/fifo /run/containerd/runc; do
	[ -e "$p" ] || echo "$p" >>"$D/created-paths"
done

# --- Certificates and credentials ----------------------------------------------
pki=$D/pki
cert() { # name subject [SANs]: a key and a certificate signed by the cluster CA
	local name=$1 subj=$2 sans=${3:-}
	[ -f "$pki/$name.crt" ] && return 0
	openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
	openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
	local ext="$pki/$name.ext"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$sans" ]; then
			echo "extendedKeyUsage=serverAuth,clientAuth"
			echo "subjectAltName=$sans"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$ext"
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 365 -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
	rm -f "$pki/$name.csr" "$ext"
}
if [ ! -f "$pki/ca.crt" ]; then
	openssl genrsa -out "$pki/ca.key" 2048 2>/dev/null
	openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=proctor-local-ca" -days 365 -sha256 -out "$pki/ca.crt" 2>/dev/null
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
cert apiserver "/CN=kube-apiserver" \
	"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:$KUBERNETES_SVC_IP,IP:$NODE_IP,IP:127.0.0.1"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kubelet "/CN=$NODE_NAME" "DNS:$NODE_NAME,DNS:localhost,IP:$NODE_IP,IP:127.0.0.1"

# Clients authenticate with static tokens: simplest to rotate per cluster, and
# the Node authorizer only needs the system:node:<name> user in system:nodes.
tok() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
if [ ! -f "$pki/tokens.csv" ]; then
	{
		echo "$(tok),admin,admin,system:masters"
		echo "$(tok),system:kube-controller-manager,kube-controller-manager"
		echo "$(tok),system:kube-scheduler,kube-scheduler"
		echo "$(tok),system:kube-proxy,kube-proxy"
		echo "$(tok),system:node:$NODE_NAME,kubelet,system:nodes"
		echo "$(tok),clusterdns,clusterdns"
	} >"$pki/tokens.csv"
	chmod 600 "$pki/tokens.csv"
fi
kubeconfig() { # file user
	local token
	token=$(awk -F, -v u="$2" '$2 == u {print $1}' "$pki/tokens.csv")
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: proctor-local
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    token: $token
contexts:
- name: proctor-local
  context: {cluster: proctor-local, user: "$2"}
current-context: proctor-local
EOF
	chmod 600 "$1"
}
kubeconfig "$D/kubeconfig" admin
kubeconfig "$D/controller-manager.kubeconfig" system:kube-controller-manager
kubeconfig "$D/scheduler.kubeconfig" system:kube-scheduler
kubeconfig "$D/kube-proxy.kubeconfig" system:kube-proxy
kubeconfig "$D/kubelet.kubeconfig" "system:node:$NODE_NAME"
kubeconfig "$D/clusterdns.kubeconfig" clusterdns

# --- Processes --------------------------------------------------------------------
launch() { # name command...: run in the background, log to logs/<name>.log, record the PID
	local name=$1; shift
	log "Starting $name"
	# The daemons outlive this script: they must not keep the caller's other
	# descriptors open (a lock held with flock, a pipe to tee), or the caller's
	# lock or pipe would last as long as the cluster.
	(
		for fd in /proc/self/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
		done
		exec setsid "$@" >>"$D/logs/$name.log" 2>&1 </dev/null
	) &
	echo $! >"$D/pids/$name.pid"
}
wait_for() { # description timeout-seconds command...
	local what=$1 timeout=$2; shift 2
	local deadline=$(($(date +%s) + timeout))
	until "$@" >/dev/null 2>&1; do
		if [ "$(date +%s)" -ge "$deadline" ]; then
			die "timed out after ${timeout}s waiting for $what (logs in $D/logs)"
		fi
		sleep 0.5
	done
}
k() { "$kb/kubectl" --kubeconfig "$D/kubeconfig" "$@"; }

launch etcd "$kb/etcd" --name proctor-local --data-dir "$D/etcd" \
	--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
	--initial-cluster "proctor-local=http://127.0.0.1:$((ETCD_PORT + 1))" \
	--listen-metrics-urls "http://127.0.0.1:$((ETCD_PORT + 2))" --quota-backend-bytes 4294967296
wait_for etcd 30 curl -sf "http://127.0.0.1:$((ETCD_PORT + 2))/health"

launch kube-apiserver "$kb/kube-apiserver" \
	--etcd-servers "http://127.0.0.1:$ETCD_PORT" \
	--advertise-address "$NODE_IP" --bind-address 0.0.0.0 --secure-port "$APISERVER_PORT" \
	--cert-dir "$D/apiserver-certs" \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--service-cluster-ip-range "$SERVICE_CIDR" \
	--service-account-issuer https://kubernetes.default.svc.cluster.local \
	--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
	--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP,Hostname \
	--allow-privileged=true --profiling=false
wait_for kube-apiserver 60 k get --raw /readyz
# What the cluster DNS may read, before it starts.
k apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "proctor-local:clusterdns"}
rules:
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "proctor-local:clusterdns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "proctor-local:clusterdns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: clusterdns}
EOF

launch kube-controller-manager "$kb/kube-controller-manager" \
	--kubeconfig "$D/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$D/controller-manager.kubeconfig" --authorization-kubeconfig "$D/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false \
	--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
	--use-service-account-credentials --service-cluster-ip-range "$SERVICE_CIDR" \
	--flex-volume-plugin-dir "$D/flex-volumes" --profiling=false
launch kube-scheduler "$kb/kube-scheduler" \
	--kubeconfig "$D/scheduler.kubeconfig" \
	--authentication-kubeconfig "$D/scheduler.kubeconfig" --authorization-kubeconfig "$D/scheduler.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false --profiling=false

# containerd with its own root, state and socket: a containerd of the host (if
# any) is not touched. restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE,
# and runc fails every sandbox without it.
sock="$D/containerd/containerd.sock"
cat >"$D/cni/net.d/10-proctor.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "proctor",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$D/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
cat >"$D/containerd/config.toml" <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
[grpc]
  address = "$sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$D/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
EOF
launch containerd containerd --config "$D/containerd/config.toml"
wait_for containerd 30 ctr --address "$sock" version
for tar in "$IMAGES_DIR"/*.tar; do
	ctr --address "$sock" -n k8s.io images import "$tar" >/dev/null ||
		die "importing $tar into containerd failed"
done
log "Imported $(ls "$IMAGES_DIR"/*.tar | wc -l) images from $IMAGES_DIR"

cat >"$D/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
clusterDomain: cluster.local
clusterDNS: [$NODE_IP]
resolvConf: $D/kubelet/resolv.conf
podLogsDir: $D/pod-logs
volumePluginDir: $D/volume-plugins
# Imported images cannot be pulled back: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
maxPods: 110
serializeImagePulls: false
EOF
# Pods resolve through the cluster DNS (clusterDNS) only: the host's resolver
# may not even be reachable from the pod network.
: >"$D/kubelet/resolv.conf"
launch kubelet "$kb/kubelet" --config "$D/kubelet/config.yaml" --kubeconfig "$D/kubelet.kubeconfig" \
	--root-dir "$D/kubelet" --cert-dir "$D/kubelet-pki" \
	--hostname-override "$NODE_NAME" --node-ip "$NODE_IP"

cat >"$D/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $D/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
iptables: {masqueradeAll: true}
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
launch kube-proxy "$kb/kube-proxy" --config "$D/kube-proxy.yaml"

# Cluster DNS: Services by name (<svc>.<ns>.svc.cluster.local), answered on the
# node's IP, which every pod reaches through its gateway.
upstream=$(awk '$1 == "nameserver" {print $2; exit}' /etc/resolv.conf)
launch clusterdns "$root/bin/clusterdns" --kubeconfig "$D/clusterdns.kubeconfig" --listen "$NODE_IP:53" \
	${upstream:+--upstream "$upstream:53"}

wait_for "node $NODE_NAME to be Ready" 120 bash -c "'$kb/kubectl' --kubeconfig '$D/kubeconfig' get node '$NODE_NAME' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
# Pods in a namespace need its default ServiceAccount and the kube-root-ca.crt ConfigMap.
wait_for "the default ServiceAccount" 60 k -n default get serviceaccount default
wait_for "the kube-root-ca.crt ConfigMap" 60 k -n default get configmap kube-root-ca.crt
log "Cluster up in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')s: node $NODE_NAME ($NODE_IP), Kubernetes $KUBE_VERSION"
log "Use it with: export KUBECONFIG=$D/kubeconfig PATH=$kb:\$PATH"
echo "$D/kubeconfig"
