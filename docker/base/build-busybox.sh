#!/usr/bin/env bash
# Build the tiny base image (default tag arbiter/busybox:latest) from a
# statically linked busybox, normally Debian's busybox-static. No registry and
# no network needed; takes about a second.
#
# Usage: docker/base/build-busybox.sh [IMAGE]
# Env:   ARBITER_BUSYBOX  path to a static busybox binary (default /bin/busybox)
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=scripts/lib.sh
. "$here/../../scripts/lib.sh"

image=${1:-arbiter/busybox:latest}
busybox=${ARBITER_BUSYBOX:-/bin/busybox}

# A dynamically linked busybox would not run in an image without a libc.
is_static() {
  [ -x "$1" ] || return 1
  command -v ldd >/dev/null 2>&1 || return 0 # cannot tell; trust it
  ! ldd "$1" >/dev/null 2>&1
}

if ! is_static "$busybox"; then
  if [ -z "${ARBITER_BUSYBOX:-}" ] && arbiter_can_apt; then
    arbiter_apt_install busybox-static || arbiter_die "could not install busybox-static"
  fi
  is_static "$busybox" ||
    arbiter_die "need a statically linked busybox at $busybox." \
      "Install Debian/Ubuntu's busybox-static (as root: apt-get install -y busybox-static)," \
      "or point ARBITER_BUSYBOX at a static busybox binary for Linux."
fi

umask 022
work=$(mktemp -d "${TMPDIR:-/tmp}/arbiter-busybox.XXXXXX")
trap 'rm -rf -- "$work"' EXIT
root=$work/root

mkdir -p "$root/bin" "$root/etc" "$root/root" "$root/app" "$root/tmp" "$root/usr/bin"
chmod 1777 "$root/tmp"
chmod 700 "$root/root"

cp -- "$busybox" "$root/bin/busybox"
chmod 755 "$root/bin/busybox"
count=0
while IFS= read -r applet; do
  case $applet in '' | busybox) continue ;; esac
  ln -s busybox "$root/bin/$applet"
  count=$((count + 1))
done < <("$root/bin/busybox" --list)
# Scripts often start with `#!/usr/bin/env sh`.
ln -s ../../bin/busybox "$root/usr/bin/env"

cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
EOF

arbiter_log "importing $image (busybox with $count applets)"
id=$(tar --numeric-owner --owner=0 --group=0 -C "$root" -c . |
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["sh"]' \
    --change 'LABEL arbiter.base=true' \
    --message "arbiter base image: busybox from $busybox" \
    - "$image")
arbiter_log "$image: $id"
