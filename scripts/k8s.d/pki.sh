# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): certificates, tokens and
# kubeconfigs (under $STATE/pki and $STATE).

# ------------------------------------------------------ certificates ---

# make_ca DIR NAME CN — a self-signed CA (NAME.crt, NAME.key).
make_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1/$2.key" -out "$1/$2.crt" -days 3650 \
    -sha256 -subj "/CN=$3" -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature 2>/dev/null
}

# sign DIR NAME SUBJECT EXTENSIONS [CA] — a key and a certificate signed by
# CA (default: ca, the cluster CA).
sign() {
  local dir=$1 name=$2 subj=$3 ext=$4 ca=${5:-ca}
  openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -out "$dir/$name.csr" \
    -subj "$subj" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/$ca.crt" -CAkey "$dir/$ca.key" \
    -CAserial "$dir/$ca.srl" -CAcreateserial -days 3650 -sha256 -out "$dir/$name.crt" \
    -extfile <(printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' "$ext") 2>/dev/null
  rm -f "$dir/$name.csr"
}

new_token() { openssl rand -hex 24; }

# ensure_pki — CA, serving and client certificates, the service-account key
# pair and the bearer tokens; made once and kept by `down`.
ensure_pki() {
  if [ -f "$PKI/.complete" ]; then
    ensure_front_proxy_pki
    ensure_node_pki 0
    return 0
  fi
  arbiter_log "generating certificates, service-account keys and tokens in $PKI"
  local tmp
  rm -rf -- "$PKI.tmp"
  tmp=$PKI.tmp
  mkdir -p "$tmp"
  chmod 700 "$tmp"
  make_ca "$tmp" ca arbiter-k8s-ca
  sign "$tmp" apiserver /CN=kube-apiserver \
    "extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SERVICE_API_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign "$tmp" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" \
    "extendedKeyUsage=clientAuth"
  openssl genrsa -out "$tmp/sa.key" 2048 2>/dev/null
  openssl rsa -in "$tmp/sa.key" -pubout -out "$tmp/sa.pub" 2>/dev/null
  local who
  for who in admin tester kube-controller-manager kube-scheduler; do
    new_token >"$tmp/token-$who"
  done
  touch "$tmp/.complete"
  rm -rf -- "$PKI"
  mv "$tmp" "$PKI"
  ensure_front_proxy_pki
  ensure_node_pki 0
}

# ensure_front_proxy_pki — the request-header (front proxy) CA and client
# certificate, as kubeadm makes them: without them the controller-manager and
# the scheduler keep logging "missing content for CA bundle".
ensure_front_proxy_pki() {
  [ -f "$PKI/front-proxy-client.crt" ] && return 0
  make_ca "$PKI" front-proxy-ca arbiter-k8s-front-proxy-ca
  sign "$PKI" front-proxy-client /CN=front-proxy-client "extendedKeyUsage=clientAuth" front-proxy-ca
}

# ensure_node_pki I — node I's kubelet serving certificate and its credential:
# node 0 a token (in the apiserver's token file), nodes >= 1 a client
# certificate (the apiserver reads its token file only when it starts; a
# certificate signed by the cluster CA needs no restart).
ensure_node_pki() {
  local i=$1 name
  name=$(node_name "$i")
  if [ "$i" = 0 ]; then
    [ -f "$PKI/token-node-$i" ] || new_token >"$PKI/token-node-$i"
  elif [ ! -f "$PKI/kubelet-client-$i.crt" ]; then
    sign "$PKI" "kubelet-client-$i" "/O=system:nodes/CN=system:node:$name" "extendedKeyUsage=clientAuth"
  fi
  if [ ! -f "$PKI/kubelet-$i.crt" ]; then
    sign "$PKI" "kubelet-$i" "/CN=$name" "extendedKeyUsage=serverAuth
subjectAltName=IP:$name"
  fi
}

# The static token file: user, uid, groups per token.
write_token_file() {
  local f=$PKI/tokens.csv i
  {
    printf '%s,arbiter-admin,arbiter-admin,"system:masters"\n' "$(cat "$PKI/token-admin")"
    printf '%s,arbiter-tester,arbiter-tester\n' "$(cat "$PKI/token-tester")"
    printf '%s,system:kube-controller-manager,system:kube-controller-manager\n' "$(cat "$PKI/token-kube-controller-manager")"
    printf '%s,system:kube-scheduler,system:kube-scheduler\n' "$(cat "$PKI/token-kube-scheduler")"
    printf '%s,system:node:%s,system:node:%s,"system:nodes"\n' \
      "$(cat "$PKI/token-node-0")" "$(node_name 0)" "$(node_name 0)"
  } >"$f.tmp"
  chmod 600 "$f.tmp"
  mv -f "$f.tmp" "$f"
}

# write_component_kubeconfig FILE USER TOKEN — a kubeconfig with one context.
write_component_kubeconfig() {
  local file=$1 user=$2 token=$3
  : >"$file"
  chmod 600 "$file"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: arbiter-k8s
  cluster:
    server: $API_URL
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    token: $token
contexts:
- name: default
  context: {cluster: arbiter-k8s, user: $user}
current-context: default
EOF
}

# write_cert_kubeconfig FILE USER CERT_NAME — the same, authenticated by the
# client certificate $PKI/CERT_NAME.{crt,key}.
write_cert_kubeconfig() {
  local file=$1 user=$2 cert=$3
  : >"$file"
  chmod 600 "$file"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: arbiter-k8s
  cluster:
    server: $API_URL
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    client-certificate: $PKI/$cert.crt
    client-key: $PKI/$cert.key
contexts:
- name: default
  context: {cluster: arbiter-k8s, user: $user}
current-context: default
EOF
}

# The kubeconfig handed to clients: self-contained (CA inline), current context
# "arbiter" (cluster admin, namespace $NAMESPACE) and "arbiter-restricted" (a
# user who may only work with pods and network policies in $NAMESPACE).
write_client_kubeconfig() {
  local ca
  ca=$(base64 -w0 <"$PKI/ca.crt")
  : >"$KUBECONFIG_FILE.tmp"
  chmod 600 "$KUBECONFIG_FILE.tmp"
  cat >"$KUBECONFIG_FILE.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: arbiter-k8s
  cluster:
    server: $API_URL
    certificate-authority-data: $ca
users:
- name: arbiter-admin
  user:
    token: $(cat "$PKI/token-admin")
- name: arbiter-tester
  user:
    token: $(cat "$PKI/token-tester")
contexts:
- name: $CONTEXT
  context: {cluster: arbiter-k8s, user: arbiter-admin, namespace: $NAMESPACE}
- name: $CONTEXT-restricted
  context: {cluster: arbiter-k8s, user: arbiter-tester, namespace: $NAMESPACE}
current-context: $CONTEXT
EOF
  mv -f "$KUBECONFIG_FILE.tmp" "$KUBECONFIG_FILE"
}
