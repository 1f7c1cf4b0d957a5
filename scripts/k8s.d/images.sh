# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): the pause and test images,
# made from the static busybox, imported into a node's containerd and pushed to the registry.

# ------------------------------------------------------------ images ---

# The pause (sandbox) image and the test image are both a static busybox; no
# Docker and no network needed. Layers are made reproducibly, so their
# digests change only when busybox does.
image_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) uname -m ;;
  esac
}

# busybox_rootfs DIR — the same layout as docker/base/build-busybox.sh.
busybox_rootfs() {
  local root=$1 applet
  mkdir -p "$root/bin" "$root/etc" "$root/root" "$root/app" "$root/tmp" "$root/usr/bin"
  chmod 1777 "$root/tmp"
  chmod 700 "$root/root"
  cp /bin/busybox "$root/bin/busybox"
  chmod 755 "$root/bin/busybox"
  while IFS= read -r applet; do
    case $applet in '' | busybox) continue ;; esac
    ln -s busybox "$root/bin/$applet"
  done < <("$root/bin/busybox" --list)
  ln -s ../../bin/busybox "$root/usr/bin/env"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$root/etc/group"
}

# blob DIR FILE — move FILE into DIR/blobs/sha256, print "sha256:HEX SIZE".
blob() {
  local dir=$1 file=$2 hex size
  hex=$(sha256sum "$file" | cut -c1-64)
  size=$(stat -c %s "$file")
  mkdir -p "$dir/blobs/sha256"
  mv -f "$file" "$dir/blobs/sha256/$hex"
  echo "sha256:$hex $size"
}

# oci_image DIR REF CONFIG_JSON — an OCI image layout in DIR holding one image
# (a busybox layer, the "config" object CONFIG_JSON) named REF.
oci_image() {
  local dir=$1 ref=$2 config=$3 work
  work=$(mktemp -d "${TMPDIR:-/tmp}/arbiter-k8s-image.XXXXXX")
  mkdir -p "$dir"
  busybox_rootfs "$work/root"
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$work/root" -cf "$work/layer.tar" .
  local layer layer_size
  read -r layer layer_size < <(blob "$dir" "$work/layer.tar")
  printf '{"architecture":"%s","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
    "$(image_arch)" "$config" "$layer" >"$work/config.json"
  local cfg cfg_size
  read -r cfg cfg_size < <(blob "$dir" "$work/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
    "$cfg" "$cfg_size" "$layer" "$layer_size" >"$work/manifest.json"
  local man man_size
  read -r man man_size < <(blob "$dir" "$work/manifest.json")
  printf '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci-layout"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$man" "$man_size" "$ref" "${ref##*:}" >"$dir/index.json"
  printf '%s\n' "$man" >"$dir/manifest-digest"
  rm -rf -- "$work"
}

pause_config='{"Env":["PATH=/bin"],"Entrypoint":["/bin/sleep","2147483647"],"WorkingDir":"/","Labels":{"arbiter.base":"pause"}}'
test_config='{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["sh"],"WorkingDir":"/","Labels":{"arbiter.base":"true"}}'

# registry_has NAME TAG
registry_has() {
  curl_probe -o /dev/null -I -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$REGISTRY/v2/$1/manifests/$2"
}

# registry_push DIR NAME TAG — push the image of OCI layout DIR over the
# registry's HTTP API (curl; no Docker needed).
registry_push() {
  local dir=$1 name=$2 tag=$3 f digest loc sep
  for f in "$dir"/blobs/sha256/*; do
    digest=sha256:${f##*/}
    [ "$digest" = "$(cat "$dir/manifest-digest")" ] && continue
    curl_probe -o /dev/null -I "http://$REGISTRY/v2/$name/blobs/$digest" && continue
    loc=$(curl_local -X POST -D - -o /dev/null "http://$REGISTRY/v2/$name/blobs/uploads/" |
      tr -d '\r' | awk 'tolower($1) == "location:" { print $2 }')
    [ -n "$loc" ] || arbiter_die "registry $REGISTRY gave no upload location for $name"
    case $loc in /*) loc=http://$REGISTRY$loc ;; esac
    sep='?'
    case $loc in *\?*) sep='&' ;; esac
    curl_local -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
      --data-binary "@$f" "$loc${sep}digest=$digest"
  done
  f=$dir/blobs/sha256/$(cut -d: -f2 <"$dir/manifest-digest")
  curl_local -o /dev/null -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
    --data-binary "@$f" "http://$REGISTRY/v2/$name/manifests/$tag"
}

# image_layout REF CONFIG — the directory holding REF as an OCI layout
# (layout/) and as an archive for `ctr images import` (image.tar), made once
# per busybox binary, reference and config under $CACHE/images.
image_layout() {
  local ref=$1 config=$2 key dir
  key=$({ sha256sum </bin/busybox; printf '%s\n%s\n' "$ref" "$config"; } | sha256sum | cut -c1-16)
  dir=$CACHE/images/$key
  if [ ! -f "$dir/image.tar" ]; then
    rm -rf -- "$dir.tmp"
    oci_image "$dir.tmp/layout" "$ref" "$config"
    (cd "$dir.tmp/layout" && tar -cf "$dir.tmp/image.tar" oci-layout index.json blobs)
    rm -rf -- "$dir"
    mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}

# ensure_images [I] — the pause image imported into node I's containerd (the
# kubelet never waits for a pull to start a sandbox) and pushed to the
# registry (so a garbage-collected pause image can be pulled again); the test
# image only pushed (pods pull it, which proves the registry path).
ensure_images() {
  local node=${1:-0} ref config name tag dir push import
  for ref in "$PAUSE_IMAGE" "$TEST_IMAGE"; do
    name=${ref#"$REGISTRY"/}
    tag=${name##*:}
    name=${name%:*}
    config=$test_config
    import=0
    if [ "$ref" = "$PAUSE_IMAGE" ]; then
      config=$pause_config
      ctr_node "$node" images ls -q "name==$ref" 2>/dev/null | grep -qxF "$ref" || import=1
    fi
    push=0
    registry_has "$name" "$tag" || push=1
    [ "$push$import" = 00 ] && continue
    dir=$(image_layout "$ref" "$config")
    if [ "$push" = 1 ]; then
      registry_push "$dir/layout" "$name" "$tag" || arbiter_die "could not push $ref to the registry"
      arbiter_log "pushed $ref (made from /bin/busybox)"
    fi
    if [ "$import" = 1 ]; then
      ctr_node "$node" images import "$dir/image.tar" >/dev/null ||
        arbiter_die "ctr images import of $ref into containerd-$node failed"
    fi
  done
}
