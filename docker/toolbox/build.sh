#!/usr/bin/env bash
# Build the harness toolbox: a host directory with a statically linked busybox,
# the statically linked in-pod relay (docker/toolbox/relay, built here with cargo)
# and a manifest of sha256s. arbiter bind-mounts it read-only at
# /.arbiter/toolbox in every container and runs each of its own commands as
# /.arbiter/toolbox/busybox <applet> ... (see docker/toolbox/README.md).
#
# The busybox is built here from source: busybox 1.35.0 (Debian's pinned
# .orig tarball, sha256 checked), the exact configuration committed beside this
# script (docker/toolbox/busybox.config), statically linked against musl
# (musl-gcc, Debian's musl-tools). It must stay under 1,000,000 bytes: the
# Kubernetes backend ships it to pods in a ConfigMap, whose limit is 1 MiB
# (Debian's glibc busybox-static is ~1.9 MB). The build (30-60 s) is cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/arbiter/busybox/<key>/busybox, key = the first
# 16 hex digits of sha256(tarball sha256, busybox.config), so it runs once per
# configuration.
#
# Idempotent: an existing toolbox whose files match the manifest and the source
# busybox is left alone. A new one is assembled beside the target and renamed
# into place, so a reader never sees half a toolbox.
#
# Usage: docker/toolbox/build.sh [DIR]
#   DIR default: $ARBITER_TOOLBOX, else
#                ${XDG_CACHE_HOME:-$HOME/.cache}/arbiter/toolbox/<version>
# Env:   ARBITER_BUSYBOX  path to a static busybox binary to use instead of
#                         building one (any size: no size check here)
#        CARGO            cargo to build the relay with (default: cargo on PATH)
# Needs to build the busybox: musl-gcc, gcc, make, bzip2, the kernel headers
# (linux-libc-dev) and curl or wget; as root on Debian/Ubuntu the missing ones
# are installed with apt-get. Network only to fetch the tarball once.
# Prints the toolbox directory on stdout; logs go to stderr.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=scripts/lib.sh
. "$here/../../scripts/lib.sh"

# Must match TOOLBOX_VERSION / TOOLBOX_SCHEMA in src/sandbox/toolbox.rs.
toolbox_version=4
toolbox_schema=arbiter.toolbox.v1

cache=${XDG_CACHE_HOME:-}
[ -n "$cache" ] || cache=${HOME:-/tmp}/.cache
dir=${1:-${ARBITER_TOOLBOX:-$cache/arbiter/toolbox/$toolbox_version}}

# The busybox built from source (see the header).
busybox_version=1.35.0
busybox_tarball=busybox_$busybox_version.orig.tar.bz2
busybox_url=http://deb.debian.org/debian/pool/main/b/busybox/$busybox_tarball
busybox_tarball_sha256=faeeb244c35a348a334f4a59e44626ee870fb07b6884d68c10ae8bc19f83a694
busybox_config=$here/busybox.config
# Under the Kubernetes ConfigMap limit (1,048,576 bytes) with room to spare.
busybox_max_size=1000000

# A dynamically linked busybox would not run in an image without a libc.
is_static() {
  [ -f "$1" ] && [ -x "$1" ] || return 1
  command -v ldd >/dev/null 2>&1 || return 0 # cannot tell; arbiter checks the ELF itself
  ! ldd "$1" >/dev/null 2>&1
}

sha256_of() {
  sha256sum -- "$1" | cut -d' ' -f1
}

size_of() {
  wc -c <"$1" | tr -d ' '
}

# The tools the busybox build needs, installed with apt-get when missing (root on
# Debian/Ubuntu), else named in the error.
ensure_build_tools() {
  local missing=() tool package
  for tool in musl-gcc:musl-tools gcc:gcc make:make bzip2:bzip2; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
  done
  [ -d /usr/include/linux ] && [ -d /usr/include/asm-generic ] || missing+=(linux-libc-dev)
  command -v curl >/dev/null 2>&1 || command -v wget >/dev/null 2>&1 || missing+=(curl)
  [ "${#missing[@]}" -gt 0 ] || return 0
  if arbiter_can_apt; then
    arbiter_apt_install "${missing[@]}" || arbiter_die "could not install ${missing[*]} (needed to build the toolbox's busybox)"
    hash -r
  else
    arbiter_die "building the toolbox's busybox needs: ${missing[*]} (Debian/Ubuntu packages)." \
      "Install them (as root: apt-get install -y ${missing[*]})," \
      "or point ARBITER_BUSYBOX at a static busybox binary for Linux."
  fi
  for package in "${missing[@]}"; do
    case $package in
      musl-tools) tool=musl-gcc ;;
      linux-libc-dev | curl) continue ;;
      *) tool=$package ;;
    esac
    command -v "$tool" >/dev/null 2>&1 || arbiter_die "$tool is still missing after installing $package"
  done
}

# fetch_tarball DEST — the pinned busybox tarball at DEST, its sha256 checked. A copy
# already there with the right digest is kept; else it is downloaded beside DEST and
# renamed into place.
fetch_tarball() {
  local dest=$1 part got
  if [ -f "$dest" ] && [ "$(sha256_of "$dest")" = "$busybox_tarball_sha256" ]; then
    return 0
  fi
  part=$dest.part.$$
  arbiter_log "fetching $busybox_url"
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 --connect-timeout 20 -o "$part" "$busybox_url" >&2 || {
      rm -f -- "$part"
      arbiter_die "could not fetch $busybox_url (curl failed); the toolbox's busybox is built from it." \
        "Check the network, or point ARBITER_BUSYBOX at a static busybox binary."
    }
  else
    wget -q -O "$part" "$busybox_url" >&2 || {
      rm -f -- "$part"
      arbiter_die "could not fetch $busybox_url (wget failed); the toolbox's busybox is built from it." \
        "Check the network, or point ARBITER_BUSYBOX at a static busybox binary."
    }
  fi
  got=$(sha256_of "$part")
  if [ "$got" != "$busybox_tarball_sha256" ]; then
    rm -f -- "$part"
    arbiter_die "$busybox_url has sha256 $got, expected $busybox_tarball_sha256; refusing to build from it."
  fi
  mv -f -- "$part" "$dest"
}

# build_busybox — prints the path of the cached busybox built from the pinned tarball
# and busybox.config, building it first when the cache has none.
build_busybox() {
  [ -f "$busybox_config" ] || arbiter_die "missing $busybox_config (the toolbox's busybox configuration)"
  local root key out tmp src kh asm log size
  root=$cache/arbiter/busybox
  key=$({ printf '%s\n' "$busybox_tarball_sha256" && cat -- "$busybox_config"; } | sha256sum | cut -c1-16)
  out=$root/$key/busybox
  if is_static "$out" && [ "$(size_of "$out")" -lt "$busybox_max_size" ]; then
    arbiter_log "busybox $busybox_version: cached at $out"
    printf '%s\n' "$out"
    return 0
  fi

  ensure_build_tools
  mkdir -p -- "$root"
  fetch_tarball "$root/$busybox_tarball"
  tmp=$(mktemp -d "$root/build.XXXXXX")
  # shellcheck disable=SC2064 # expand $tmp now: it is local
  trap "rm -rf -- '$tmp'" EXIT
  arbiter_log "building busybox $busybox_version (musl, static) in $tmp"
  tar -xjf "$root/$busybox_tarball" -C "$tmp"
  src=$tmp/busybox-$busybox_version
  [ -d "$src" ] || arbiter_die "$busybox_tarball has no busybox-$busybox_version/ directory"

  # The kernel's uapi headers for musl-gcc (whose include path has only musl's own):
  # just the directories busybox includes, not all of /usr/include (glibc's headers
  # would clash with musl's).
  kh=$src/kernel-headers
  mkdir -p -- "$kh"
  ln -s /usr/include/linux "$kh/linux"
  ln -s /usr/include/asm-generic "$kh/asm-generic"
  asm=/usr/include/$(gcc -print-multiarch 2>/dev/null || true)/asm
  [ -d "$asm" ] || asm=/usr/include/asm
  [ -d "$asm" ] || arbiter_die "no kernel asm headers (/usr/include/<multiarch>/asm); install linux-libc-dev"
  ln -s "$asm" "$kh/asm"
  if [ -d /usr/include/mtd ]; then ln -s /usr/include/mtd "$kh/mtd"; fi

  log=$tmp/build.log
  cp -- "$busybox_config" "$src/.config"
  # oldconfig answers nothing for a complete config; a symbol the committed config lacks
  # gets its default, and then the build would not be of the exact committed config.
  # KCONFIG_NOTIMESTAMP: no build time in the banner, so the same tarball and config
  # give the same binary (with the same compiler).
  export KCONFIG_NOTIMESTAMP=1
  if ! { yes "" 2>/dev/null || true; } | make -C "$src" oldconfig >"$log" 2>&1; then
    tail -n 30 -- "$log" >&2
    arbiter_die "busybox make oldconfig failed (log above)"
  fi
  # (Kconfig's timestamp comment aside.)
  local stamp='^# [A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8} [0-9]{4}$'
  if ! diff <(grep -Ev "$stamp" "$busybox_config") <(grep -Ev "$stamp" "$src/.config") >"$tmp/config.diff"; then
    cat -- "$tmp/config.diff" >&2
    arbiter_die "$busybox_config is not a complete busybox $busybox_version configuration (make oldconfig changed it, above);" \
      "regenerate it: in the busybox source, cp busybox.config .config && make oldconfig, then copy .config back."
  fi
  if ! make -C "$src" -j "$(nproc 2>/dev/null || echo 2)" CC=musl-gcc EXTRA_CFLAGS="-isystem $kh" busybox >>"$log" 2>&1; then
    tail -n 40 -- "$log" >&2
    arbiter_die "building busybox $busybox_version with musl-gcc failed (the end of its log above)"
  fi
  is_static "$src/busybox" || arbiter_die "the busybox built in $src is not statically linked"
  size=$(size_of "$src/busybox")
  [ "$size" -lt "$busybox_max_size" ] ||
    arbiter_die "the busybox built from $busybox_config is $size bytes; it must be under $busybox_max_size" \
      "(the Kubernetes backend ships it in a ConfigMap, at most 1 MiB). Disable applets in the config."

  # Into the cache: a rename within one filesystem, so a reader sees all of it or nothing.
  mkdir -p -- "$root/$key"
  mv -- "$src/busybox" "$root/$key/.busybox.$$"
  mv -f -- "$root/$key/.busybox.$$" "$out"
  rm -rf -- "$tmp"
  trap - EXIT
  arbiter_log "busybox $busybox_version: built, $size bytes, $("$out" --list | wc -l) applets, cached at $out"
  printf '%s\n' "$out"
}

if [ -n "${ARBITER_BUSYBOX:-}" ]; then
  busybox=$ARBITER_BUSYBOX
  is_static "$busybox" ||
    arbiter_die "ARBITER_BUSYBOX=$busybox is not a statically linked busybox (it must run in an image without a libc)." \
      "Unset it to build the toolbox's own busybox."
else
  busybox=$(build_busybox)
fi

want_sha=$(sha256_of "$busybox")

# The relay: std only, no dependencies (builds offline), built for the musl target: linked
# statically, not position-independent (no PT_INTERP, no dynamic section: runs in any image) and small enough for a Kubernetes ConfigMap
# (~0.5 MB, under relay_max_size), so pods run it from the read-only toolbox volume as they
# run the busybox (a glibc static build is 1.25 MB and had to ride gzipped and be unpacked
# in every pod). The target's std is installed with rustup once when missing.
# cargo's own incremental build makes this a no-op when nothing changed.
cargo_bin=${CARGO:-cargo}
command -v "$cargo_bin" >/dev/null 2>&1 ||
  arbiter_die "need cargo to build the toolbox's relay (the same toolchain that builds arbiter)."
relay_triple=x86_64-unknown-linux-musl
relay_max_size=1000000
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed 2>/dev/null | grep -qx "$relay_triple"; then
  arbiter_log "installing the Rust target $relay_triple (the toolbox's relay)"
  rustup target add "$relay_triple" >&2 ||
    arbiter_die "rustup target add $relay_triple failed (the toolbox's relay is built for it)"
fi
relay_target=$cache/arbiter/relay-target
RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" "$cargo_bin" build --quiet --release --locked \
  --manifest-path "$here/relay/Cargo.toml" --target "$relay_triple" \
  --target-dir "$relay_target" >&2 ||
  arbiter_die "building the toolbox's relay (docker/toolbox/relay) for $relay_triple failed; rustup target add $relay_triple"
relay=$relay_target/$relay_triple/release/arbiter-relay
is_static "$relay" || arbiter_die "the toolbox's relay at $relay is not statically linked"
[ "$(size_of "$relay")" -lt "$relay_max_size" ] ||
  arbiter_die "the toolbox's relay at $relay is $(size_of "$relay") bytes, over $relay_max_size (a Kubernetes ConfigMap holds 1 MiB)"
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
