# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): starting a node (its
# containerd and kubelet) and labelling it.

# ---------------------------------------------------- components: nodes ---

# start_containerd I — node I's private containerd (own root, state, sockets)
# and its CNI configuration.
start_containerd() {
  local i=$1 name=containerd-$1 dir run
  comp_alive "$name" && return 0
  dir=$(node_dir "$i")
  run=$(node_run "$i")
  mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/cni/ipam" "$run"
  rm -f "$(containerd_sock "$i")" "$(containerd_sock "$i").ttrpc"
  cat >"$dir/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "$(node_range_start "$i")", "rangeEnd": "$(node_range_end "$i")"}]],
        "dataDir": "$dir/cni/ipam"
      }
    }
  ]
}
EOF
  # restrict_oom_score_adj: processes here cannot lower oom_score_adj (no
  # CAP_SYS_RESOURCE); the kubelet asks -998 for sandboxes and runc would fail.
  cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd"
state = "$run/state"
oom_score = 0

[grpc]
  address = "$(containerd_sock "$i")"

[ttrpc]
  address = "$(containerd_sock "$i").ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$dir/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$run/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN"
      conf_dir = "$dir/cni/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REGISTRY"]
        endpoint = ["http://$REGISTRY"]
EOF
  launch "$name" --config "$dir/containerd.toml"
}

# start_kubelet I — node I's kubelet, named and listening on $(node_name I).
start_kubelet() {
  local i=$1 name=kubelet-$1 dir addr cgroup_root=''
  comp_alive "$name" && return 0
  dir=$(node_dir "$i")
  addr=$(node_name "$i")
  mkdir -p "$dir/kubelet" "$dir/pod-logs"
  local extra=() taints=''
  if [ "$i" = 0 ]; then
    write_component_kubeconfig "$dir/kubeconfig" "system:node:$addr" "$(cat "$PKI/token-node-$i")"
  else
    write_cert_kubeconfig "$dir/kubeconfig" "system:node:$addr" "kubelet-client-$i"
    cgroup_root="cgroupRoot: $(node_cgroup_root "$i")"
    local h
    for h in $(cgroup_hierarchies); do mkdir -p "$h$(node_cgroup_root "$i")"; done
    # Set when the node registers; label_node sets them again on a node object
    # that already exists.
    extra=(--node-labels "$POOL_KEY=$POOL_VALUE")
    taints="registerWithTaints:
- key: $POOL_KEY
  value: $POOL_VALUE
  effect: NoSchedule"
  fi
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $addr
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: $addr
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-$i.crt
tlsPrivateKeyFile: $PKI/kubelet-$i.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$(containerd_sock "$i")
cgroupDriver: cgroupfs
$cgroup_root
$taints
failSwapOn: false
failCgroupV1: false
resolvConf: ""
clusterDomain: cluster.local
maxPods: 250
podLogsDir: $dir/pod-logs
serializeImagePulls: false
imageGCHighThresholdPercent: 95
imageGCLowThresholdPercent: 90
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
  nodefs.inodesFree: 2%
EOF
  require_free_port "$name" "$KUBELET_PORT" "$addr"
  require_free_port "$name" "$KUBELET_HEALTHZ_PORT" "$addr"
  launch "$name" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubeconfig" \
    --hostname-override "$addr" --root-dir "$dir/kubelet" --v=1 ${extra[@]+"${extra[@]}"}
}

# label_node I — node I >= 1's pool label and taint, whether it registered now
# or earlier (registration alone does not update an existing node object).
label_node() {
  local name
  name=$(node_name "$1")
  kubectl_admin label node "$name" --overwrite "$POOL_KEY=$POOL_VALUE" >/dev/null &&
    kubectl_admin taint node "$name" --overwrite "$POOL_KEY=$POOL_VALUE:NoSchedule" >/dev/null
}
