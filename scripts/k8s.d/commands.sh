# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): the commands (up, down,
# status, env, node) and the health of the whole cluster.

# ----------------------------------------------------------- commands ---

core_components() { components | grep -v '^registry$'; }

# core_healthy — the control plane, the registry and node 0.
core_healthy() {
  local c
  for c in registry kine kube-apiserver kube-controller-manager kube-scheduler containerd-0 kubelet-0; do
    comp_alive "$c" || return 1
  done
  [ -f "$KUBECONFIG_FILE" ] && [ -f "$PKI/token-admin" ] || return 1
  registry_ready && api_ready && node_ready 0
}

# node_healthy I — node I's containerd and kubelet run, the node is Ready and
# schedulable (not left cordoned by `node stop`).
node_healthy() {
  comp_alive "containerd-$1" && comp_alive "kubelet-$1" && node_ready "$1" &&
    [ "$(kubectl_admin get node "$(node_name "$1")" -o jsonpath='{.spec.unschedulable}' 2>/dev/null)" != true ]
}

all_healthy() {
  core_healthy || return 1
  local i
  for ((i = 1; i < WANT_NODES; i++)); do node_healthy "$i" || return 1; done
}

# parse_node_index I — I as a node index >= 1 below MAX_NODES, or die.
parse_node_index() {
  if ! [[ $1 =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ] || [ "$1" -ge "$MAX_NODES" ]; then
    arbiter_die "node index must be 1..$((MAX_NODES - 1)) (node 0 carries the control plane's tests and is never stopped), not '$1'"
  fi
}

# start_node I — node I >= 1 (containerd, pause image, kubelet), Ready,
# labelled, tainted and schedulable. Touches nothing of another node.
start_node() {
  local i=$1 t
  t=$(ms_now)
  ensure_node_pki "$i"
  start_containerd "$i"
  wait_until "containerd-$i" containerd_ready "$i"
  ensure_images "$i"
  start_kubelet "$i"
  wait_until "kubelet-$i" kubelet_ready "$i"
  wait_until "kubelet-$i" node_ready "$i"
  label_node "$i" || arbiter_die "could not label and taint node $(node_name "$i")"
  kubectl_admin uncordon "$(node_name "$i")" >/dev/null ||
    arbiter_die "could not uncordon node $(node_name "$i")"
  arbiter_log "node $(node_name "$i") Ready in $(secs_since "$t") s (label $POOL_KEY=$POOL_VALUE, taint $POOL_KEY=$POOL_VALUE:NoSchedule)"
}

# stop_node I — lose node I >= 1: cordon it, stop its kubelet and containerd,
# kill every process of its pods (shims and what runs in its cgroup root).
# Its state stays on disk for `node start`.
stop_node() {
  local i=$1 name pids p cmd d
  name=$(node_name "$i")
  kubectl_admin cordon "$name" >/dev/null 2>&1 || arbiter_warn "could not cordon node $name"
  stop_comps "kubelet-$i"
  stop_comps "containerd-$i"
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=()
    for p in /proc/[0-9]*; do
      p=${p#/proc/}
      read -r cmd 2>/dev/null <"/proc/$p/comm" || continue
      [ "$cmd" = containerd-shim ] || continue
      cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
      case $cmd in *"$(node_run "$i")/"*) pids+=("$p") ;; esac
    done
    for d in $(cgroup_hierarchies); do
      d=$d$(node_cgroup_root "$i")
      [ -d "$d" ] || continue
      while IFS= read -r p; do pids+=("$p"); done < <(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null)
    done
    [ ${#pids[@]} -gt 0 ] || break
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 0.3
  done
  arbiter_log "node $name lost: cordoned, kubelet and containerd stopped, its pods' processes killed"
}

cmd_node() {
  local action=${1:-} i=${2:-}
  [ $# -eq 2 ] || arbiter_die "usage: scripts/k8s node stop|start I"
  parse_node_index "$i"
  need_root node
  take_lock
  core_healthy || arbiter_die "the cluster is not up (scripts/k8s up --nodes $((i + 1)))"
  case $action in
    stop)
      [ -d "$(node_dir "$i")" ] || arbiter_die "node $i was never started (scripts/k8s up --nodes $((i + 1)))"
      stop_node "$i"
      ;;
    start) start_node "$i" ;;
    *) arbiter_die "usage: scripts/k8s node stop|start I" ;;
  esac
}

cmd_up() {
  local nodes=1
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes)
        [ $# -ge 2 ] || arbiter_die "up --nodes needs a number"
        nodes=$2
        shift 2
        ;;
      *) arbiter_die "unknown option for up: $1 (usage: scripts/k8s up [--nodes N])" ;;
    esac
  done
  if ! [[ $nodes =~ ^[0-9]+$ ]] || [ "$nodes" -lt 1 ] || [ "$nodes" -gt "$MAX_NODES" ]; then
    arbiter_die "up --nodes $nodes: give a number from 1 to $MAX_NODES"
  fi
  WANT_NODES=$nodes
  need_root up
  local t0 t
  t0=$(ms_now)
  take_lock
  if [ -x "$KUBECTL" ] && all_healthy; then
    arbiter_log "already up with $nodes node(s) (checked in $(secs_since "$t0") s); kubeconfig $KUBECONFIG_FILE"
    return 0
  fi
  if [ -x "$KUBECTL" ] && core_healthy; then
    # Only nodes are missing: add them without touching node 0 or the
    # control plane (others may be running tests on them).
    local i
    for ((i = 1; i < nodes; i++)); do
      node_healthy "$i" || start_node "$i"
    done
    arbiter_log "up with $nodes node(s) in $(secs_since "$t0") s; KUBECONFIG=$KUBECONFIG_FILE"
    return 0
  fi

  ensure_packages
  t=$(ms_now)
  build_all
  local t_build
  t_build=$(secs_since "$t")

  mkdir -p "$STATE" "$LOGS" "$RUN"
  chmod 700 "$STATE"
  local c alive=()
  for c in $(core_components); do
    comp_alive "$c" && alive+=("$c")
  done
  if [ ${#alive[@]} -eq 0 ]; then
    if [ -n "$(leftovers)" ] || [ -e "$STATE/kine" ] || [ -e "$STATE/nodes" ]; then
      arbiter_log "no component runs: clearing what an earlier cluster left behind"
      cleanup_leftovers
    fi
  else
    arbiter_log "still running: ${alive[*]}; starting the others"
  fi
  for c in $(components); do
    comp_alive "$c" || rm -f "$(pid_file "$c")"
  done

  ensure_pki
  write_token_file
  write_client_kubeconfig

  check_ports
  t=$(ms_now)
  start_registry
  start_kine
  wait_until registry registry_ready
  wait_until kine kine_ready
  start_apiserver
  wait_until kube-apiserver api_ready
  local t_api
  t_api=$(secs_since "$t")
  # The namespace first: its default service account (needed to create a
  # pod) appears while the node starts.
  apply_test_namespace
  start_controller_manager
  start_scheduler
  start_containerd 0
  wait_until kube-controller-manager cm_ready
  wait_until kube-scheduler sched_ready
  wait_until containerd-0 containerd_ready 0
  ensure_images
  t=$(ms_now)
  start_kubelet 0
  wait_until kubelet-0 kubelet_ready 0
  wait_until kubelet-0 node_ready 0
  local t_node
  t_node=$(secs_since "$t")
  wait_until kube-controller-manager default_sa_exists
  t=$(ms_now)
  smoke_test
  local t_pod
  t_pod=$(secs_since "$t")
  local i
  for ((i = 1; i < nodes; i++)); do
    node_healthy "$i" || start_node "$i"
  done
  arbiter_log "up with $nodes node(s) in $(secs_since "$t0") s (binaries $t_build s, apiserver ready $t_api s, node Ready $t_node s after the kubelet, pod pulled+ran+exec'd $t_pod s); KUBECONFIG=$KUBECONFIG_FILE, registry $REGISTRY, namespace $NAMESPACE"
}

cmd_down() {
  need_root down
  local t0
  t0=$(ms_now)
  take_lock
  if [ -x "$KUBECTL" ] && comp_alive kubelet-0 && api_ready 2>/dev/null; then
    arbiter_log "deleting all pods"
    kubectl_admin delete pods --all --all-namespaces --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1 ||
      arbiter_warn "not every pod was deleted in 60 s; their containers are killed below"
  fi
  local i kubelets=() containerds=()
  for i in $(known_nodes); do
    kubelets+=("kubelet-$i")
    containerds+=("containerd-$i")
  done
  stop_comps "${kubelets[@]}"
  stop_comps "${containerds[@]}"
  stop_comps kube-scheduler kube-controller-manager kube-apiserver kine registry
  cleanup_leftovers
  local left
  left=$(leftovers)
  if [ -n "$left" ]; then
    arbiter_warn "still left after down:"
    printf '    %s\n' "$left" >&2
    arbiter_die "down did not clean up everything (see above)"
  fi
  arbiter_log "down in $(secs_since "$t0") s; nothing left running (kept: $PKI, $KUBECONFIG_FILE, $STATE/registry, $LOGS)"
}

cmd_status() {
  local c pid ok=0
  for c in $(components); do
    if pid=$(comp_pid "$c"); then
      printf '%-24s running (pid %s)\n' "$c" "$pid"
    else
      printf '%-24s not running\n' "$c"
      ok=1
    fi
  done
  if [ -f "$PKI/token-admin" ] && api_ready 2>/dev/null; then
    printf '%-24s ready\n' apiserver
  else
    printf '%-24s not ready\n' apiserver
    ok=1
  fi
  local i state
  for i in $(known_nodes); do
    if [ -x "$KUBECTL" ] && [ -f "$KUBECONFIG_FILE" ] && node_ready "$i" 2>/dev/null; then
      state=Ready
      [ "$(kubectl_admin get node "$(node_name "$i")" -o jsonpath='{.spec.unschedulable}' 2>/dev/null)" = true ] &&
        state="Ready, cordoned"
    else
      state="not Ready"
      ok=1
    fi
    [ "$i" != 0 ] && state="$state (pool $POOL_VALUE, tainted)"
    printf '%-24s %s\n' "node $(node_name "$i")" "$state"
  done
  if registry_ready 2>/dev/null; then
    printf '%-24s answers\n' "registry $REGISTRY"
  else
    printf '%-24s does not answer\n' "registry $REGISTRY"
    ok=1
  fi
  printf '%-24s %s\n' kubeconfig "$KUBECONFIG_FILE"
  return "$ok"
}

cmd_env() {
  [ -f "$KUBECONFIG_FILE" ] ||
    arbiter_die "no kubeconfig at $KUBECONFIG_FILE: start the cluster with scripts/k8s up"
  printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
  printf 'export ARBITER_K8S_REGISTRY=%q\n' "$REGISTRY"
  printf 'export ARBITER_K8S_NAMESPACE=%q\n' "$NAMESPACE"
  printf 'export ARBITER_K8S_KUBECTL=%q\n' "$KUBECTL"
  # Every node of this cluster shares this machine's cores: pods request a quarter of their
  # CPU limit, so trials that mostly wait can run side by side (arbiter's cpu_request).
  printf 'export ARBITER_K8S_CPU_REQUEST=%q\n' "0.25"
}
