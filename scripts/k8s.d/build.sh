# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): building the pinned
# Kubernetes, kine and CNI binaries, and the Debian packages the cluster runs on.

# ------------------------------------------------------------- build ---

# The cache key of one wrapper module: its go.mod and go.sum (which pin every
# version) plus the flags it is built with.
module_key() {
  local dir=$1 flags=$2
  { cat "$K8S_SRC/$dir/go.mod" "$K8S_SRC/$dir/go.sum"; printf '%s\n' "$flags"; } | sha256sum | cut -c1-64
}

# build_module DIR OUT_DIR LDFLAGS PKG... — build PKGs of the wrapper module
# k8s/DIR into OUT_DIR unless the stamp there matches the module's key.
build_module() {
  local dir=$1 out=$2 ldflags=$3
  shift 3
  local key stamp=$out/.stamp-$dir
  key=$(module_key "$dir" "$ldflags")
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    local p missing=0
    for p in "$@"; do [ -x "$out/${p##*/}" ] || missing=1; done
    [ "$missing" = 0 ] && return 0
  fi
  local go
  go=$(go_cmd) || arbiter_die "Go is needed to build the Kubernetes binaries (go not on PATH nor at /usr/local/go/bin/go)"
  mkdir -p "$out"
  local tmp t0=$SECONDS
  tmp=$(mktemp -d "$out/.build-$dir.XXXXXX")
  arbiter_log "building ${*##*/} (k8s/$dir) into $out; the first build takes minutes"
  if ! (cd "$K8S_SRC/$dir" &&
    CGO_ENABLED=0 GOFLAGS='-mod=readonly -buildvcs=false' \
      nice -n "${ARBITER_K8S_NICE:-10}" "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/" "$@" >&2); then
    rm -rf -- "$tmp"
    arbiter_die "go build in k8s/$dir failed (see above)"
  fi
  local p
  for p in "$@"; do mv -f -- "$tmp/${p##*/}" "$out/${p##*/}"; done
  rm -rf -- "$tmp"
  printf '%s\n' "$key" >"$stamp"
  arbiter_log "built ${*##*/} in $((SECONDS - t0)) s"
}

build_all() {
  local vmaj vmin
  vmaj=${KUBE_VERSION#v}
  vmin=${vmaj#*.}
  vmin=${vmin%%.*}
  vmaj=${vmaj%%.*}
  build_module kubernetes "$BIN" \
    "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=$vmaj -X k8s.io/component-base/version.gitMinor=$vmin" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
  build_module kine "$BIN" \
    "-s -w -X github.com/k3s-io/kine/pkg/version.Version=$KINE_VERSION" \
    github.com/k3s-io/kine
  build_module cni "$CNI_BIN" \
    "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" \
    github.com/containernetworking/plugins/plugins/main/bridge \
    github.com/containernetworking/plugins/plugins/main/loopback \
    github.com/containernetworking/plugins/plugins/ipam/host-local
}

cmd_build() {
  local t0=$SECONDS
  build_all
  arbiter_log "binaries ready in $BIN ($((SECONDS - t0)) s)"
}

# ---------------------------------------------------------- packages ---

# ensure_packages — install what the cluster runs on (root on Debian/Ubuntu).
# containerd and runc come with docker.io; installed alone they suffice.
ensure_packages() {
  local pkgs=() pair cmd pkg
  for pair in containerd:containerd ctr:containerd runc:runc docker-registry:docker-registry \
    iptables:iptables ip6tables:iptables openssl:openssl curl:curl ip:iproute2 ss:iproute2 \
    flock:util-linux setsid:util-linux mount:mount tar:tar sha256sum:coreutils; do
    cmd=${pair%%:*}
    pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 && continue
    case " ${pkgs[*]-} " in *" $pkg "*) ;; *) pkgs+=("$pkg") ;; esac
  done
  # The pause and test images are made from a statically linked busybox.
  if ! is_static /bin/busybox; then
    pkgs+=(busybox-static)
  fi
  [ ${#pkgs[@]} -eq 0 ] && return 0
  arbiter_apt_install "${pkgs[@]}" ||
    arbiter_die "missing packages (${pkgs[*]}) and apt-get could not install them"
  hash -r
}

is_static() {
  [ -x "$1" ] || return 1
  command -v ldd >/dev/null 2>&1 || return 0
  ! ldd "$1" >/dev/null 2>&1
}
