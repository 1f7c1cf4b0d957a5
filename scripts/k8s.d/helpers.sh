# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): small helpers (timing, root,
# Go) and the lock on the state directory.

# ----------------------------------------------------------- helpers ---

ms_now() { date +%s%3N; }
secs_since() { # MS_START -> "1.2"
  local d=$(($(ms_now) - $1))
  printf '%d.%d' $((d / 1000)) $((d % 1000 / 100))
}

need_root() {
  arbiter_is_root || arbiter_die "scripts/k8s $1 must run as root (it starts a kubelet and containerd)"
}

go_cmd() {
  if command -v go >/dev/null 2>&1; then
    command -v go
  elif [ -x /usr/local/go/bin/go ]; then
    echo /usr/local/go/bin/go
  else
    return 1
  fi
}

# ------------------------------------------------------------ locking ---

take_lock() {
  mkdir -p "$STATE"
  exec 9>>"$STATE/.lock"
  if ! flock -n 9; then
    arbiter_log "another scripts/k8s holds $STATE/.lock; waiting for it"
    flock -w 1800 9 || arbiter_die "gave up waiting for $STATE/.lock"
  fi
}
