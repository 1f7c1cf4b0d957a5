# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): the components' processes
# (pid files, launch, stop, ports, waiting until ready).

# --------------------------------------------------------- processes ---

# Components in start order; a node's components carry its index.
components() {
  printf '%s\n' registry kine kube-apiserver kube-controller-manager kube-scheduler
  local i
  for i in $(known_nodes); do printf '%s\n' "containerd-$i" "kubelet-$i"; done
}

# known_nodes — 0..WANT_NODES-1 and every node with state on disk.
known_nodes() {
  { seq 0 $((WANT_NODES - 1)); node_indices; } | sort -un
}

component_bin() {
  case $1 in
    registry) command -v docker-registry || echo /usr/bin/docker-registry ;;
    kine) echo "$BIN/kine" ;;
    kube-apiserver | kube-controller-manager | kube-scheduler) echo "$BIN/$1" ;;
    containerd-*) command -v containerd || echo /usr/bin/containerd ;;
    kubelet-*) echo "$BIN/kubelet" ;;
    *) return 1 ;;
  esac
}

pid_file() { printf '%s/%s.pid' "$RUN" "$1"; }

# is_ours PID BINARY — PID is alive, runs BINARY and was started with our
# state directory on its command line (Docker's own containerd runs the same
# binary).
is_ours() {
  local pid=$1 bin=$2 exe
  [ -n "$pid" ] && [ "$pid" -gt 1 ] 2>/dev/null || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)}
  [ "$exe" = "$(readlink -f "$bin")" ] || return 1
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE/"
}

# comp_pid NAME — the pid of a running component, or fail.
comp_pid() {
  local f pid bin
  f=$(pid_file "$1")
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  bin=$(component_bin "$1")
  is_ours "$pid" "$bin" || return 1
  echo "$pid"
}

comp_alive() { comp_pid "$1" >/dev/null; }

# launch NAME ARGS... — start component NAME detached from this shell: stdin
# from /dev/null, output to its log, every other inherited descriptor closed
# (the lock on fd 9, a caller's pipe), its own session (a ^C here does not
# reach it). Writes its pid file.
launch() {
  local name=$1
  shift
  local log=$LOGS/$name.log bin
  bin=$(component_bin "$name")
  [ -x "$bin" ] || arbiter_die "$name: $bin is missing"
  mkdir -p "$LOGS" "$RUN"
  [ -f "$log" ] && mv -f "$log" "$log.1"
  (
    exec </dev/null >"$log" 2>&1
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      case $fd in 0 | 1 | 2 | *[!0-9]*) continue ;; esac
      eval "exec $fd>&-" 2>/dev/null || true
    done
    exec setsid "$bin" "$@"
  ) &
  local pid=$!
  echo "$pid" >"$(pid_file "$name")"
  arbiter_log "$name started (pid $pid, log $log)"
}

# stop_comps NAME... — SIGTERM to each running component at once, SIGKILL to
# those still alive 10 s later.
stop_comps() {
  local name pid i names=() pids=()
  for name in "$@"; do
    if pid=$(comp_pid "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      names+=("$name")
      pids+=("$pid")
    fi
    rm -f "$(pid_file "$name")"
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  local p alive
  for ((i = 0; i < 100; i++)); do
    alive=0
    for p in "${pids[@]}"; do
      kill -0 "$p" 2>/dev/null && alive=1
    done
    [ "$alive" = 1 ] || break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      arbiter_warn "${names[$i]} (pid ${pids[$i]}) did not stop in 10 s; killing it"
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  arbiter_log "stopped ${names[*]}"
}

# port_user PORT [ADDR] — "name (pid N)" of whatever listens on TCP PORT on
# ADDR (default 127.0.0.1) or on every address, if anything.
port_user() {
  local port=$1 addr=${2:-127.0.0.1} line
  line=$(ss -Hltnp "sport = :$port" 2>/dev/null |
    awk -v a="$addr:$port" -v p=":$port" '$4 == a || $4 == "0.0.0.0" p || $4 == "*" p || $4 == "[::]" p' | head -n 1)
  [ -n "$line" ] || return 1
  if [[ $line =~ users:\(\(\"([^\"]+)\",pid=([0-9]+) ]]; then
    printf '%s (pid %s)\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  else
    echo "another process"
  fi
}

# require_free_port NAME PORT [ADDR]
require_free_port() {
  local name=$1 port=$2 addr=${3:-127.0.0.1} who
  if who=$(port_user "$port" "$addr"); then
    arbiter_die "$name cannot start: $addr:$port is already in use by $who, which this script did not start (stop it, or run scripts/k8s down if it is a leftover)"
  fi
}

# check_ports — before starting anything: every port a dead component needs
# is free.
check_ports() {
  local pair name
  for pair in registry:"${REGISTRY##*:}" kine:"${KINE_ADDR##*:}" kube-apiserver:"$API_PORT" \
    kube-controller-manager:"$CM_PORT" kube-scheduler:"$SCHED_PORT" \
    kubelet-0:"$KUBELET_PORT" kubelet-0:"$KUBELET_HEALTHZ_PORT"; do
    name=${pair%%:*}
    comp_alive "$name" || require_free_port "$name" "${pair#*:}"
  done
}

# wait_until NAME CHECK... — run CHECK until it succeeds; fail early with the
# component's last log lines if its process dies, and after TIMEOUT seconds.
wait_until() {
  local name=$1
  shift
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if [ -f "$(pid_file "$name")" ] && ! comp_alive "$name"; then
      arbiter_warn "$name exited; last lines of $LOGS/$name.log:"
      tail -n 15 "$LOGS/$name.log" >&2 || true
      arbiter_die "$name exited during start-up (log: $LOGS/$name.log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      arbiter_warn "last lines of $LOGS/$name.log:"
      tail -n 15 "$LOGS/$name.log" >&2 || true
      arbiter_die "$name not ready after $TIMEOUT s (log: $LOGS/$name.log)"
    fi
    sleep 0.2
  done
}
