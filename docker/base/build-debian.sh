#!/usr/bin/env bash
# Build the Debian base image (default tag arbiter/debian:bookworm) with
# debootstrap: minbase plus python3, bash and ca-certificates. Needs root and
# a Debian mirror; no registry. Takes about 40 s and gives a ~270 MB image.
#
# Usage: docker/base/build-debian.sh [IMAGE]
# Env:   ARBITER_DEBIAN_SUITE   (default bookworm)
#        ARBITER_DEBIAN_MIRROR  (default http://deb.debian.org/debian)
#        ARBITER_BUILD_TMPDIR   where the root tree is assembled (default /var/tmp)
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=scripts/lib.sh
. "$here/../../scripts/lib.sh"

image=${1:-arbiter/debian:bookworm}
suite=${ARBITER_DEBIAN_SUITE:-bookworm}
mirror=${ARBITER_DEBIAN_MIRROR:-http://deb.debian.org/debian}

arbiter_is_root ||
  arbiter_die "building $image needs root (debootstrap creates device nodes and chroots)." \
    "Run scripts/bootstrap as root, or build the image on a machine where you are."

if ! command -v debootstrap >/dev/null 2>&1; then
  if arbiter_can_apt; then
    arbiter_apt_install debootstrap || arbiter_die "could not install debootstrap"
    hash -r
  fi
  command -v debootstrap >/dev/null 2>&1 ||
    arbiter_die "debootstrap not found: install it (Debian/Ubuntu: apt-get install -y debootstrap)."
fi

umask 022
work=$(mktemp -d "${ARBITER_BUILD_TMPDIR:-/var/tmp}/arbiter-debian.XXXXXX")
root=$work/root

# An interrupted debootstrap can leave proc/sys mounted inside the tree:
# unmount those first and never let rm cross into another file system.
cleanup() {
  local mounts
  mounts=$(awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts 2>/dev/null | sort -r) || true
  if [ -n "$mounts" ]; then
    while IFS= read -r m; do
      umount -l -- "$m" 2>/dev/null || true
    done <<<"$mounts"
  fi
  rm -rf --one-file-system -- "$work"
}
trap cleanup EXIT

arbiter_log "debootstrap $suite from $mirror into $root (takes ~40 s)"
if ! debootstrap --variant=minbase --include=python3,bash,ca-certificates \
  "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
  arbiter_warn "debootstrap failed; last 30 lines of its output:"
  tail -n 30 "$work/debootstrap.log" >&2 || true
  if [ -f "$root/debootstrap/debootstrap.log" ]; then
    arbiter_warn "last 15 lines of $root/debootstrap/debootstrap.log:"
    tail -n 15 "$root/debootstrap/debootstrap.log" >&2 || true
  fi
  arbiter_die "debootstrap could not build $suite from $mirror." \
    "Check that the mirror is reachable from here (or set ARBITER_DEBIAN_MIRROR to one that is)."
fi

# Like the official images: no package lists or downloaded .debs (run
# apt-get update first to install more), and none of this host's resolver
# settings (the engine provides /etc/resolv.conf at run time).
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin
rm -f -- "$root/etc/resolv.conf"
: >"$root/etc/resolv.conf"

arbiter_log "importing $image ($(du -sh --one-file-system "$root" | cut -f1))"
id=$(tar --numeric-owner -C "$root" -c . |
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --change 'LABEL arbiter.base=true' \
    --message "arbiter base image: debootstrap --variant=minbase $suite + python3, bash, ca-certificates" \
    - "$image")
arbiter_log "$image: $id"
