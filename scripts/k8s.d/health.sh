# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): health checks (is each
# component ready).

# ---------------------------------------------------- health checks ---

curl_local() { curl --noproxy '*' -fsS --max-time 5 "$@"; }
# curl_probe — the same, silent on HTTP errors (for "is it there?" checks).
curl_probe() { curl --noproxy '*' -fs --max-time 5 "$@"; }

tcp_open() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

admin_token() { cat "$PKI/token-admin"; }

# The token goes in through curl's config on stdin, not on its command line.
api_ready() {
  local token
  token=$(admin_token) || return 1
  [ "$(printf 'header = "Authorization: Bearer %s"\n' "$token" |
    curl_local -K - --cacert "$PKI/ca.crt" "$API_URL/readyz")" = ok ]
}
registry_ready() { curl_local -o /dev/null "http://$REGISTRY/v2/"; }
kine_ready() { tcp_open "$KINE_ADDR"; }
cm_ready() { [ "$(curl_local -k "https://127.0.0.1:$CM_PORT/healthz")" = ok ]; }
sched_ready() { [ "$(curl_local -k "https://127.0.0.1:$SCHED_PORT/healthz")" = ok ]; }
containerd_ready() { ctr_node "$1" version; }
kubelet_ready() { [ "$(curl_local "http://$(node_name "$1"):$KUBELET_HEALTHZ_PORT/healthz")" = ok ]; }

kubectl_admin() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" --context "$CONTEXT" --request-timeout=20s "$@"; }

node_ready() {
  [ "$(kubectl_admin get node "$(node_name "$1")" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

ctr_node() { ctr --address "$(containerd_sock "$1")" --namespace k8s.io "${@:2}"; }
