# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): finding and removing what
# a stopped or killed cluster left behind.

# ------------------------------------------------------------ cleanup ---

# Node indices with state on disk (always including 0).
node_indices() {
  local d i
  {
    echo 0
    for d in "$STATE"/nodes/*; do
      i=${d##*/}
      [[ $i =~ ^[0-9]+$ ]] && echo "$i"
    done
  } | sort -un
}

# Mount points of every cgroup v1 hierarchy (and the v2 one, if mounted).
cgroup_hierarchies() {
  awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts | sort -u
}

# The cgroup directories the kubelets create (per hierarchy).
our_cgroup_dirs() {
  local h i root
  for h in $(cgroup_hierarchies); do
    for i in $(node_indices); do
      root=$(node_cgroup_root "$i")
      if [ "$root" = / ]; then
        [ -d "$h/kubepods" ] && echo "$h/kubepods"
      else
        [ -d "$h$root" ] && echo "$h$root"
      fi
    done
  done
  return 0
}

# Processes this script's cluster may have left: components, containerd
# shims serving our containerd, and whatever runs in the pods' cgroups.
stray_pids() {
  local p comm cmd d
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] && continue
    # comm (at most 15 characters) first: a builtin read, no process per pid.
    read -r comm 2>/dev/null <"/proc/$p/comm" || continue
    case $comm in
      kine | kube-apiserver | kube-controller | kube-scheduler | kubelet | containerd | \
        containerd-shim | docker-registry) ;;
      *) continue ;;
    esac
    cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
    case $cmd in *"$STATE/"*) echo "$p" ;; esac
  done
  for d in $(our_cgroup_dirs); do
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true
  done
}

# Mount points at or below the state directory, deepest first.
state_mounts() {
  awk -v s="$STATE" '$5 == s || index($5, s "/") == 1 { print $5 }' /proc/self/mountinfo |
    awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-
}

# Network namespaces made by our CNI configuration: cni-* with an address in
# POD_CIDR. (containerd 1.6 puts them in /run/netns, shared with other
# runtimes, so each is checked.)
our_netns() {
  local ns prefix=${POD_CIDR%.*.*}.
  [ -d /run/netns ] || return 0
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    ip -n "${ns##*/}" -4 -o addr show 2>/dev/null | grep -qF " inet $prefix" && echo "${ns##*/}"
  done
  return 0
}

# KUBE-* chains of TOOL (iptables/ip6tables) in TABLE.
kube_chains() {
  "$1" -w 5 -t "$2" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }'
}

# remove_kube_chains — the kubelet's KUBE-* chains (KUBE-FIREWALL,
# KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, ...) and every rule jumping to one.
remove_kube_chains() {
  local tool table chain n
  for tool in iptables ip6tables; do
    command -v "$tool" >/dev/null 2>&1 || continue
    for table in filter nat mangle; do
      # Rules in any chain whose target is a KUBE-* chain, deleted by number
      # from the bottom up.
      for chain in $("$tool" -w 5 -t "$table" -S 2>/dev/null | awk '$1 == "-P" || $1 == "-N" { print $2 }'); do
        for n in $("$tool" -w 5 -t "$table" -L "$chain" -n --line-numbers 2>/dev/null |
          awk 'NR > 2 && $2 ~ /^KUBE-/ { print $1 }' | sort -rn); do
          "$tool" -w 5 -t "$table" -D "$chain" "$n" 2>/dev/null || true
        done
      done
      for chain in $(kube_chains "$tool" "$table"); do
        "$tool" -w 5 -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $(kube_chains "$tool" "$table"); do
        "$tool" -w 5 -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# rm_tree DIR — rm -rf, refusing while anything is mounted below DIR (a
# kubelet or container mount would make rm delete what it points at).
rm_tree() {
  local dir=$1
  [ -e "$dir" ] || return 0
  if awk -v s="$dir" '$5 == s || index($5, s "/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    arbiter_die "not removing $dir: something is still mounted below it (see /proc/self/mountinfo)"
  fi
  rm -rf -- "$dir"
}

# cleanup_leftovers — what a stopped or killed cluster leaves behind: stray
# processes, kubelet and container mounts, pod network namespaces, the bridge,
# the pods' cgroup directories, KUBE-* iptables chains, CNI caches, log
# symlinks, and the runtime state (pid files, sockets, kine database, the
# nodes' kubelet and containerd directories). Keeps pki/, registry/, logs/.
cleanup_leftovers() {
  local pids pass m ns d
  for pass in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(stray_pids | sort -un | tr '\n' ' ')
    [ -n "${pids// /}" ] || break
    [ "$pass" = 1 ] && arbiter_log "killing leftover processes: $pids"
    # shellcheck disable=SC2086  # a list of pids
    kill -KILL $pids 2>/dev/null || true
    sleep 0.3
  done
  for pass in 1 2 3 4 5; do
    m=$(state_mounts)
    [ -n "$m" ] || break
    while IFS= read -r d; do
      umount "$d" 2>/dev/null || umount -l "$d" 2>/dev/null || true
    done <<<"$m"
  done
  for ns in $(our_netns); do
    ip netns delete "$ns" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link delete "$BRIDGE" 2>/dev/null || arbiter_warn "could not delete bridge $BRIDGE"
  fi
  for pass in 1 2 3 4 5 6 7 8 9 10; do
    local left=0
    for d in $(our_cgroup_dirs); do
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$d" ] && left=1
    done
    [ "$left" = 0 ] && break
    sleep 0.5
  done
  remove_kube_chains
  remove_runtime_caches
  rm_tree "$RUN"
  rm_tree "$STATE/nodes"
  rm_tree "$STATE/kine"
  rm -f "$STATE"/*.kubeconfig
}

# remove_runtime_caches — files outside $STATE that a killed cluster leaves:
# shim sockets in /run/containerd/s (named by the hash of containerd's
# address, namespace and container id), libcni's cache entries for our pods,
# the kubelet's log symlinks and its device-plugin socket (a path the kubelet
# does not put under --root-dir).
remove_runtime_caches() {
  local i d id f
  for i in $(node_indices); do
    for d in "$(node_run "$i")"/state/io.containerd.runtime.v2.task/k8s.io/*; do
      [ -d "$d" ] || continue
      id=${d##*/}
      rm -f "/run/containerd/s/$(printf '%s/k8s.io/%s' "$(containerd_sock "$i")" "$id" | sha256sum | cut -c1-64)"
    done
  done
  for f in /var/lib/cni/results/"$CNI_NETWORK"-*; do
    [ -e "$f" ] || continue
    id=${f#/var/lib/cni/results/"$CNI_NETWORK"-}
    id=${id%-*}
    rm -f -- "$f" /var/lib/cni/results/cni-loopback-"$id"-lo
  done
  rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" -delete 2>/dev/null || true
  fi
  if ! grep -qx kubelet /proc/[0-9]*/comm 2>/dev/null; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
  fi
}

# leftovers — print what is still there (empty when clean).
leftovers() {
  local p
  p=$(stray_pids | sort -un | tr '\n' ' ') || true
  [ -n "${p// /}" ] && echo "processes: $p"
  ip link show "$BRIDGE" >/dev/null 2>&1 && echo "bridge $BRIDGE"
  p=$(state_mounts | tr '\n' ' ') || true
  [ -n "$p" ] && echo "mounts: $p"
  p=$(our_netns | tr '\n' ' ') || true
  [ -n "$p" ] && echo "network namespaces: $p"
  p=$(our_cgroup_dirs | tr '\n' ' ') || true
  [ -n "$p" ] && echo "cgroups: $p"
  local tool table
  for tool in iptables ip6tables; do
    command -v "$tool" >/dev/null 2>&1 || continue
    for table in filter nat mangle; do
      p=$(kube_chains "$tool" "$table" | tr '\n' ' ') || true
      [ -n "$p" ] && echo "$tool -t $table chains: $p"
    done
  done
  return 0
}
