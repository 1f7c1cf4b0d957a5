# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): starting the registry and
# the control plane (kine, kube-apiserver, kube-controller-manager, kube-scheduler).

# ---------------------------- components: the registry and the control plane ---

start_registry() {
  comp_alive registry && return 0
  require_free_port registry "${REGISTRY##*:}"
  mkdir -p "$STATE/registry"
  cat >"$STATE/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $STATE/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY
EOF
  launch registry serve "$STATE/registry.yml"
}

start_kine() {
  comp_alive kine && return 0
  require_free_port kine "${KINE_ADDR##*:}"
  mkdir -p "$STATE/kine"
  # Busy timeout and immediate transactions, or concurrent writes fail and
  # the apiserver never gets ready. Metrics off: they would listen on :8080.
  launch kine --listen-address "$KINE_ADDR" --metrics-bind-address 0 \
    --endpoint "sqlite://$STATE/kine/kine.db?_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate&cache=shared"
}

start_apiserver() {
  comp_alive kube-apiserver && return 0
  require_free_port kube-apiserver "$API_PORT"
  launch kube-apiserver \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --etcd-servers "http://$KINE_ADDR" --endpoint-reconciler-type none \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --token-auth-file "$PKI/tokens.csv" --anonymous-auth=false \
    --authorization-mode Node,RBAC \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --allow-privileged=true --profiling=false
}

start_controller_manager() {
  comp_alive kube-controller-manager && return 0
  require_free_port kube-controller-manager "$CM_PORT"
  local kc=$STATE/kube-controller-manager.kubeconfig
  write_component_kubeconfig "$kc" system:kube-controller-manager "$(cat "$PKI/token-kube-controller-manager")"
  launch kube-controller-manager \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --bind-address 127.0.0.1 --secure-port "$CM_PORT" \
    --controllers '*,-nodeipam,-cloud-node-lifecycle' --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --profiling=false
}

start_scheduler() {
  comp_alive kube-scheduler && return 0
  require_free_port kube-scheduler "$SCHED_PORT"
  local kc=$STATE/kube-scheduler.kubeconfig
  write_component_kubeconfig "$kc" system:kube-scheduler "$(cat "$PKI/token-kube-scheduler")"
  launch kube-scheduler \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false
}
