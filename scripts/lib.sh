# shellcheck shell=bash
# Helpers shared by scripts/bootstrap, scripts/demo, scripts/test and the
# recipes in docker/base/. Source it; do not run it.
#
# Everything here logs to stderr: stdout is reserved for what a script
# promises to print (scripts/bootstrap prints at most one `export DOCKER_HOST=…`
# line).

# Repository root, resolved from this file's own location.
ARBITER_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
export ARBITER_ROOT

ARBITER_LOG_PREFIX=${ARBITER_LOG_PREFIX:-[bootstrap]}

arbiter_log() {
  printf '%s %s\n' "$ARBITER_LOG_PREFIX" "$*" >&2
}

arbiter_warn() {
  printf '%s warning: %s\n' "$ARBITER_LOG_PREFIX" "$*" >&2
}

# arbiter_die LINE... — print each argument as one line of the error, exit 1.
arbiter_die() {
  local first=1 line
  for line in "$@"; do
    if [ "$first" = 1 ]; then
      printf '%s error: %s\n' "$ARBITER_LOG_PREFIX" "$line" >&2
      first=0
    else
      printf '%s        %s\n' "$ARBITER_LOG_PREFIX" "$line" >&2
    fi
  done
  exit 1
}

arbiter_is_root() {
  [ "$(id -u)" -eq 0 ]
}

# True on Debian, Ubuntu and their derivatives (ID or ID_LIKE in os-release).
arbiter_is_debian_like() {
  local os_release=${ARBITER_OS_RELEASE:-/etc/os-release}
  [ -r "$os_release" ] || return 1
  local ids
  # shellcheck disable=SC1090  # os-release is plain KEY=value shell syntax
  ids=$(. "$os_release" && printf '%s %s' "${ID:-}" "${ID_LIKE:-}")
  case " $ids " in
    *" debian "* | *" ubuntu "*) return 0 ;;
    *) return 1 ;;
  esac
}

# True when this script may install Debian packages itself.
arbiter_can_apt() {
  arbiter_is_root && arbiter_is_debian_like && command -v apt-get >/dev/null 2>&1
}

# arbiter_apt_install PKG... — apt-get install (root on Debian/Ubuntu only).
# Runs `apt-get update` once per bootstrap (child scripts inherit the marker).
# Services are kept from starting during the install by a temporary
# policy-rc.d when none exists, so installing docker.io never starts a
# default-bridge dockerd behind our back.
arbiter_apt_install() {
  arbiter_can_apt || return 1
  export DEBIAN_FRONTEND=noninteractive
  local apt_opts=(-o DPkg::Lock::Timeout=300)
  if [ -z "${ARBITER_APT_UPDATED:-}" ]; then
    arbiter_log "apt-get update"
    apt-get "${apt_opts[@]}" update >&2 || return 1
    export ARBITER_APT_UPDATED=1
  fi
  local policy=/usr/sbin/policy-rc.d marker='# arbiter-bootstrap: temporary' ours=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n%s\nexit 101\n' "$marker" >"$policy" && chmod 755 "$policy" && ours=1
  elif grep -qF "$marker" "$policy" 2>/dev/null; then
    ours=1 # left behind by an interrupted run: still ours to remove
  fi
  arbiter_log "apt-get install -y $*"
  local rc=0
  apt-get "${apt_opts[@]}" install -y "$@" >&2 || rc=$?
  if [ "$ours" = 1 ]; then
    rm -f "$policy"
  fi
  return "$rc"
}

# Does the engine selected by the current environment (DOCKER_HOST, docker
# context) answer?
arbiter_docker_answers() {
  if command -v timeout >/dev/null 2>&1; then
    timeout "${ARBITER_DOCKER_INFO_TIMEOUT:-20}" docker info >/dev/null 2>&1
  else
    docker info >/dev/null 2>&1
  fi
}

# Podman's Docker-compatible sockets, rootless first.
arbiter_podman_sockets() {
  printf '%s\n' "${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/podman/podman.sock" /run/podman/podman.sock
}

# arbiter_find_engine — find an engine that already answers; start nothing.
#   * DOCKER_HOST set: only that engine is considered (the user chose it).
#   * otherwise the default engine (socket or docker context, e.g. Docker
#     Desktop), then Podman's docker-compatible sockets.
# On success returns 0 with DOCKER_HOST exported if a Podman socket was picked.
arbiter_find_engine() {
  command -v docker >/dev/null 2>&1 || return 1
  if [ -n "${DOCKER_HOST:-}" ]; then
    arbiter_docker_answers
    return
  fi
  if arbiter_docker_answers; then
    return 0
  fi
  local sock
  while IFS= read -r sock; do
    [ -S "$sock" ] || continue
    if DOCKER_HOST="unix://$sock" arbiter_docker_answers; then
      export DOCKER_HOST="unix://$sock"
      return 0
    fi
  done < <(arbiter_podman_sockets)
  return 1
}

# Put rustup's default bin dir on PATH when cargo is not there yet (fresh
# shells that never sourced ~/.cargo/env).
arbiter_ensure_cargo_path() {
  command -v cargo >/dev/null 2>&1 && return 0
  local bin="${CARGO_HOME:-$HOME/.cargo}/bin"
  if [ -x "$bin/cargo" ]; then
    PATH="$bin:$PATH"
    export PATH
  fi
}

# arbiter_bootstrap — run scripts/bootstrap and adopt the engine it
# chose: its last stdout line is empty when the caller's environment already
# reaches the engine, or `export DOCKER_HOST=…` (shell-quoted) otherwise.
# Returns bootstrap's exit status.
arbiter_bootstrap() {
  local out line
  out=$(bash "$ARBITER_ROOT/scripts/bootstrap") || return $?
  line=${out##*$'\n'}
  case $line in
    '') ;;
    'export DOCKER_HOST='*)
      eval "$line"
      arbiter_log "using DOCKER_HOST=$DOCKER_HOST"
      ;;
    *)
      arbiter_warn "unexpected output from scripts/bootstrap: $line"
      return 1
      ;;
  esac
}

# arbiter_ensure_toolbox — build the harness toolbox (a static busybox and its
# manifest, mounted read-only at /.arbiter/toolbox in every container) with
# docker/toolbox/build.sh. Idempotent: a toolbox that is up to date is left
# alone. ARBITER_TOOLBOX chooses the directory (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/arbiter/toolbox/<version>).
arbiter_ensure_toolbox() {
  bash "$ARBITER_ROOT/docker/toolbox/build.sh" >/dev/null 3>&-
}
