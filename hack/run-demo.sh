#!/usr/bin/env bash
# `make run`: a local control plane, the operator and the demo, in one command. Ctrl-C stops everything.
set -euo pipefail
state=${1:-.state/dev-cluster}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mw=.venv/bin/mountwarden
log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

operator_pid=
cleanup() {
  trap - INT TERM EXIT
  log "stopping the operator and the control plane"
  [ -n "$operator_pid" ] && kill "$operator_pid" 2>/dev/null && wait "$operator_pid" 2>/dev/null
  "$mw" dev-cluster down --state-dir "$state" || true
}
trap cleanup INT TERM EXIT

"$mw" dev-cluster down --state-dir "$state" >/dev/null 2>&1 || true  # a previous run killed hard
log "starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)"
"$mw" dev-cluster up --state-dir "$state"
export KUBECONFIG=$root/$state/kubeconfig
export PATH=${MOUNTWARDEN_TESTBIN_DIR:?run through make run}:$PATH

log "installing the CRDs"
kubectl apply --server-side -f crds/
kubectl wait --for=condition=Established --timeout=60s -f crds/ >/dev/null

log "starting the operator (log: $state/operator.log)"
"$mw" operator --kubeconfig "$KUBECONFIG" >"$state/operator.log" 2>&1 &
operator_pid=$!

log "applying examples/: two consumers of one EFS file system"
kubectl apply -f examples/
kubectl wait --for=condition=Ready --timeout=120s storageprofiles --all

log "what the operator made of them"
kubectl get storageprofiles,storageclasses
echo
kubectl get storageclass importer-scratch-v1 -o jsonpath='{.metadata.name}: {.mountOptions}{"\n"}'
kubectl get storageclass upload-staging-v1 -o jsonpath='{.metadata.name}: {.mountOptions}{"\n"}'
echo
log "a PVC that keeps SQLite on the importer's NFS class: the admission webhook warns at apply time"
kubectl create namespace data --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl label namespace data team=data --overwrite >/dev/null
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: importer-db
  namespace: data
  labels: {app: importer, mountwarden.io/contents: sqlite}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: importer-scratch-v1
  resources: {requests: {storage: 5Gi}}
YAML
echo
log "try it: export KUBECONFIG=$KUBECONFIG PATH=$MOUNTWARDEN_TESTBIN_DIR:\$PATH"
echo "    kubectl patch sprof upload-staging --type merge -p '{\"spec\":{\"cachePolicy\":\"strict\"}}'"
echo "    kubectl get sprof,sc"
log "operator log follows; Ctrl-C stops everything"
tail -n +1 -f "$state/operator.log" &
wait "$operator_pid"
