#!/usr/bin/env bash
# Build the harness toolbox: a host directory with a statically linked busybox,
# the statically linked in-pod relay (docker/toolbox/relay, built here with cargo)
# and a manifest of sha256s. arbiter bind-mounts it read-only at
# /.arbiter/toolbox in every container and runs each of its own commands as
# /.arbiter/toolbox/busybox <applet> ... (see docker/toolbox/README.md).
#
# Idempotent: an existing toolbox whose files match the manifest and the source
# busybox is left alone. A new one is assembled beside the target and renamed
# into place, so a reader never sees half a toolbox.
#
# Usage: docker/toolbox/build.sh [DIR]
#   DIR default: $ARBITER_TOOLBOX, else
#                ${XDG_CACHE_HOME:-$HOME/.cache}/arbiter/toolbox/<version>
# Env:   ARBITER_BUSYBOX  path to a static busybox binary (default /bin/busybox;
#                         Debian's busybox-static is installed when missing)
#        CARGO            cargo to build the relay with (default: cargo on PATH)
# Prints the toolbox directory on stdout.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=scripts/lib.sh
. "$here/../../scripts/lib.sh"

# Must match TOOLBOX_VERSION / TOOLBOX_SCHEMA in src/verifier/toolbox.rs.
toolbox_version=2
toolbox_schema=arbiter.toolbox.v1

cache=${XDG_CACHE_HOME:-}
[ -n "$cache" ] || cache=${HOME:-/tmp}/.cache
dir=${1:-${ARBITER_TOOLBOX:-$cache/arbiter/toolbox/$toolbox_version}}
busybox=${ARBITER_BUSYBOX:-/bin/busybox}

# A dynamically linked busybox would not run in an image without a libc.
is_static() {
  [ -f "$1" ] && [ -x "$1" ] || return 1
  command -v ldd >/dev/null 2>&1 || return 0 # cannot tell; arbiter checks the ELF itself
  ! ldd "$1" >/dev/null 2>&1
}

if ! is_static "$busybox"; then
  if [ -z "${ARBITER_BUSYBOX:-}" ] && arbiter_can_apt; then
    arbiter_apt_install busybox-static || arbiter_die "could not install busybox-static"
  fi
  is_static "$busybox" ||
    arbiter_die "need a statically linked busybox at $busybox for the harness toolbox." \
      "Install Debian/Ubuntu's busybox-static (as root: apt-get install -y busybox-static)," \
      "or point ARBITER_BUSYBOX at a static busybox binary for Linux."
fi

sha256_of() {
  sha256sum -- "$1" | cut -d' ' -f1
}

want_sha=$(sha256_of "$busybox")

# The relay: std only, no dependencies (builds offline), statically linked against
# glibc (`crt-static`, not position-independent: no PT_INTERP, no dynamic section),
# so it runs in any image.
# cargo's own incremental build makes this a no-op when nothing changed.
cargo_bin=${CARGO:-cargo}
command -v "$cargo_bin" >/dev/null 2>&1 ||
  arbiter_die "need cargo to build the toolbox's relay (the same toolchain that builds arbiter)."
relay_target=$cache/arbiter/relay-target
RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" "$cargo_bin" build --quiet --release --locked \
  --manifest-path "$here/relay/Cargo.toml" --target x86_64-unknown-linux-gnu \
  --target-dir "$relay_target" >&2 ||
  arbiter_die "building the toolbox's relay (docker/toolbox/relay) failed; the static glibc (libc6-dev) is needed"
relay=$relay_target/x86_64-unknown-linux-gnu/release/arbiter-relay
is_static "$relay" || arbiter_die "the toolbox's relay at $relay is not statically linked"
want_relay_sha=$(sha256_of "$relay")

# Up to date when the manifest names this version, the busybox and relay we would
# copy, and the copies in place still have those digests.
if [ -f "$dir/manifest.json" ] && [ -f "$dir/busybox" ] && [ -f "$dir/relay" ] &&
  grep -q "\"version\": \"$toolbox_version\"" "$dir/manifest.json" &&
  grep -q "\"sha256\": \"$want_sha\"" "$dir/manifest.json" &&
  grep -q "\"sha256\": \"$want_relay_sha\"" "$dir/manifest.json" &&
  [ "$(sha256_of "$dir/busybox")" = "$want_sha" ] &&
  [ "$(sha256_of "$dir/relay")" = "$want_relay_sha" ] &&
  [ "$(find "$dir" -mindepth 1 -maxdepth 1 | wc -l)" -eq 3 ]; then
  arbiter_log "toolbox $dir: up to date"
  printf '%s\n' "$dir"
  exit 0
fi

umask 022
mkdir -p -- "$(dirname -- "$dir")"
work=$(mktemp -d "$dir.tmp.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

cp -- "$busybox" "$work/busybox"
chmod 755 "$work/busybox"
got_sha=$(sha256_of "$work/busybox")
[ "$got_sha" = "$want_sha" ] || arbiter_die "copy of $busybox changed while copying"
size=$(wc -c <"$work/busybox" | tr -d ' ')
cp -- "$relay" "$work/relay"
chmod 755 "$work/relay"
relay_sha=$(sha256_of "$work/relay")
[ "$relay_sha" = "$want_relay_sha" ] || arbiter_die "copy of $relay changed while copying"
relay_size=$(wc -c <"$work/relay" | tr -d ' ')
version_line=$("$work/busybox" 2>&1 | head -n 1 || true)
# JSON string escaping for the one free-text field.
version_line=${version_line//\\/\\\\}
version_line=${version_line//\"/\\\"}

cat >"$work/manifest.json" <<JSON
{
  "schema": "$toolbox_schema",
  "version": "$toolbox_version",
  "busybox": "$version_line",
  "files": [
    { "path": "busybox", "sha256": "$got_sha", "size": $size },
    { "path": "relay", "sha256": "$relay_sha", "size": $relay_size }
  ]
}
JSON
chmod 644 "$work/manifest.json"
chmod 755 "$work"

# Swap into place: move an old toolbox aside first (rename is atomic per name).
if [ -e "$dir" ]; then
  old="$dir.old.$$"
  mv -- "$dir" "$old"
  mv -- "$work" "$dir"
  rm -rf -- "$old"
else
  mv -- "$work" "$dir"
fi
trap - EXIT
arbiter_log "toolbox $dir: busybox $got_sha ($size bytes), relay $relay_sha ($relay_size bytes)"
printf '%s\n' "$dir"
