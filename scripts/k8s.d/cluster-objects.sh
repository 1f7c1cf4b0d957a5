# shellcheck shell=bash
# Part of scripts/k8s, which sources it (never run on its own): what up creates in the
# cluster (the test namespace and its RBAC) and the smoke test.

# --------------------------------------------------- cluster objects ---

apply_test_namespace() {
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $NAMESPACE
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: arbiter-tester
  namespace: $NAMESPACE
rules:
- apiGroups: [""]
  resources: [pods, pods/log, pods/status]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
- apiGroups: [""]
  resources: [pods/exec, pods/attach, pods/portforward]
  verbs: [get, create]
- apiGroups: [""]
  resources: [events]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [namespaces]
  resourceNames: [$NAMESPACE]
  verbs: [get]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: arbiter-tester
  namespace: $NAMESPACE
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: arbiter-tester
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: arbiter-tester
EOF
}

default_sa_exists() { kubectl_admin -n "$NAMESPACE" get serviceaccount default; }

# smoke_test — a busybox pod pulled from the registry starts and answers an
# exec; then it is deleted.
smoke_test() {
  local pod=arbiter-k8s-smoke out
  kubectl_admin -n "$NAMESPACE" delete pod "$pod" --ignore-not-found --grace-period=1 --wait=true >/dev/null 2>&1 || true
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  namespace: $NAMESPACE
  labels: {app.kubernetes.io/managed-by: arbiter-scripts-k8s}
spec:
  restartPolicy: Never
  dnsPolicy: Default
  enableServiceLinks: false
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $TEST_IMAGE
    command: [sh, -c, 'trap "exit 0" TERM; sleep 3600 & wait']
EOF
  if ! kubectl_admin -n "$NAMESPACE" wait --for=condition=Ready "pod/$pod" --timeout="${TIMEOUT}s" >/dev/null; then
    kubectl_admin -n "$NAMESPACE" describe pod "$pod" >&2 || true
    arbiter_die "the smoke-test pod did not become Ready (see its description above; logs in $LOGS)"
  fi
  out=$(kubectl_admin -n "$NAMESPACE" exec "$pod" -- sh -c 'echo exec-ok') ||
    arbiter_die "kubectl exec into the smoke-test pod failed (logs in $LOGS)"
  [ "$out" = exec-ok ] || arbiter_die "kubectl exec into the smoke-test pod printed '$out', not exec-ok"
  kubectl_admin -n "$NAMESPACE" delete pod "$pod" --grace-period=1 --wait=true >/dev/null
}
