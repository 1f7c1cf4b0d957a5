#!/bin/sh
# Copy the non-glibc shared libraries that the Python tree at $1 links against into $1/lib,
# and point every ELF file's RPATH at them ($ORIGIN-relative), so the tree runs unchanged when
# mounted at the same path in another glibc-based image.
set -eu
root=$1
lib="$root/lib"
glibc='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl|librt|libutil|libresolv|libnss|libcrypt\.so\.1)'
find "$root" -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) | while read -r f; do
  file "$f" 2>/dev/null | grep -q ELF || continue
  ldd "$f" 2>/dev/null | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    echo "$name" | grep -Eq "$glibc" && continue
    [ -e "$lib/$name" ] || cp -L "$path" "$lib/$name"
  done
done
find "$root" -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) | while read -r f; do
  file "$f" 2>/dev/null | grep -q ELF || continue
  dir=$(dirname "$f")
  rel=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$lib" "$dir")
  patchelf --set-rpath "\$ORIGIN/$rel" "$f" 2>/dev/null || true
done
