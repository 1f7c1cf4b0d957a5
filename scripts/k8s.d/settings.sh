# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): the settings:
# paths, fixed addresses, pinned versions, and each node's layout as a function of its index.
# Sourced first, right after scripts/lib.sh: the only part that runs anything when sourced
# (it reads the pinned versions from k8s/*/go.mod).
# shellcheck disable=SC2034  # the other parts of scripts/k8s read these; checked alone, unused

# ------------------------------------------------------------- settings ---

K8S_SRC=$ARBITER_ROOT/k8s
STATE=${ARBITER_K8S_STATE:-/var/lib/arbiter-k8s}
NAMESPACE=${ARBITER_K8S_NAMESPACE:-arbiter-test}
TIMEOUT=${ARBITER_K8S_TIMEOUT:-120}

# Fixed addresses (all loopback).
KINE_ADDR=127.0.0.1:2379
API_PORT=6443
API_URL=https://127.0.0.1:$API_PORT
CM_PORT=10257
SCHED_PORT=10259
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248
REGISTRY=127.0.0.1:5000
SERVICE_CIDR=198.18.0.0/24
SERVICE_API_IP=198.18.0.1
POD_CIDR=198.19.0.0/16
BRIDGE=arbk8s0
CNI_NETWORK=arbiter-k8s
CONTEXT=arbiter
PAUSE_IMAGE=$REGISTRY/arbiter/pause:busybox
TEST_IMAGE=$REGISTRY/arbiter/busybox:latest

# Pinned versions, read from the wrapper modules (the single source of truth).
# mod_version DIR MODULE
mod_version() {
  awk -v m="$2" '{ for (i = 1; i < NF; i++) if ($i == m) { print $(i + 1); exit } }' "$K8S_SRC/$1/go.mod"
}
KUBE_VERSION=$(mod_version kubernetes k8s.io/kubernetes)
KINE_VERSION=$(mod_version kine github.com/k3s-io/kine)
CNI_VERSION=$(mod_version cni github.com/containernetworking/plugins)
if [ -z "$KUBE_VERSION" ] || [ -z "$KINE_VERSION" ] || [ -z "$CNI_VERSION" ]; then
  arbiter_die "cannot read the pinned versions from $K8S_SRC/{kubernetes,kine,cni}/go.mod"
fi

CACHE=${ARBITER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/arbiter/k8s}
BIN=$CACHE/$KUBE_VERSION/bin
CNI_BIN=$BIN/cni
KUBECTL=$BIN/kubectl

# Layout of the state directory. pki/ (so the kubeconfig stays valid),
# registry/ and logs/ survive `down`; run/ (pid files, sockets, containerd
# state), kine/ and nodes/<i>/ (kubelet root, pod logs, CNI, containerd root)
# do not.
PKI=$STATE/pki
RUN=$STATE/run
LOGS=$STATE/logs
KUBECONFIG_FILE=$STATE/kubeconfig

# --------------------------------------------------- per-node layout ---
# Everything that belongs to one node is a function of its index (`up --nodes N`
# starts nodes 0..N-1).

node_name() { printf '127.0.0.%d' "$(($1 + 1))"; }
node_dir() { printf '%s/nodes/%d' "$STATE" "$1"; }             # kubelet, pod logs, CNI, containerd root
node_run() { printf '%s/node%d' "$RUN" "$1"; }                  # containerd state and sockets
containerd_sock() { printf '%s/containerd.sock' "$(node_run "$1")"; }
node_cgroup_root() { if [ "$1" = 0 ]; then echo /; else echo "/node$1"; fi; }
# Node i's share of POD_CIDR: 198.19.<16i>.1 - 198.19.<16i+15>.254 (16 nodes at most).
node_range_start() { printf '198.19.%d.1' "$(($1 * 16))"; }
node_range_end() { printf '198.19.%d.254' "$(($1 * 16 + 15))"; }
MAX_NODES=16
# What keeps other pods off nodes >= 1 (see the header).
POOL_KEY=arbiter.dev/pool
POOL_VALUE=extra
# Nodes up wants running (0..WANT_NODES-1); status and down also see every node
# with state on disk.
WANT_NODES=1
