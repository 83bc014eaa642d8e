#!/usr/bin/env bash
# `make run`: a local control plane, the operator and the demo, in one command. Ctrl-C stops everything.
# What it prints is what the operator found: the profiles, the classes it made, the admission warning and the
# findings (status, the operator's Events, PolicyReports), printed again whenever they change. The operator's own log is in a
# file (named below).
set -euo pipefail
state=${1:-.state/dev-cluster}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mw=.venv/bin/mountwarden
log() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

operator_pid=
cleanup() {
  # Stop everything even when Ctrl-C comes again, the terminal is gone, or the output's reader died
  # (make run | tee): a write that fails must not end the script before the control plane is down.
  set +e
  trap - EXIT
  trap '' INT TERM HUP PIPE
  log "stopping the operator and the control plane" 2>/dev/null
  if [ -n "$operator_pid" ]; then kill "$operator_pid" 2>/dev/null; wait "$operator_pid" 2>/dev/null; fi
  "$mw" dev-cluster down --state-dir "$state" >/dev/null 2>&1
  echo "stopped." 2>/dev/null
  exit 0
}
trap cleanup INT TERM HUP EXIT

"$mw" dev-cluster down --state-dir "$state" >/dev/null 2>&1 || true  # a previous run killed hard
log "starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)"
"$mw" dev-cluster up --state-dir "$state"
export KUBECONFIG=$root/$state/kubeconfig
export PATH=${MOUNTWARDEN_TESTBIN_DIR:?run through make run}:$PATH

log "installing mountwarden's CRDs, and the wgpolicyk8s.io PolicyReport CRDs (as Kyverno would)"
kubectl apply --server-side -f crds/ -f hack/policyreport-crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s -f crds/ -f hack/policyreport-crds/ >/dev/null

log "starting the operator (its log: $state/operator.log)"
"$mw" operator --kubeconfig "$KUBECONFIG" --policy-reports >"$state/operator.log" 2>&1 &
operator_pid=$!

log "applying examples/: two consumers of one EFS file system, each with its own mount contract"
kubectl apply -f examples/
kubectl wait --for=condition=Ready --timeout=120s storageprofiles --all >/dev/null

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

found() {
  echo "StorageProfiles (a consumer pattern each) and the StorageClass carrying their options:"
  kubectl get storageprofiles -o custom-columns='PROFILE:.metadata.name,POLICY:.spec.cachePolicy,CLASS:.status.storageClassName,VERSION:.status.version,READY:.status.conditions[?(@.type=="Ready")].reason,COMPLIANT:.status.conditions[?(@.type=="Compliant")].reason,CREDITS:.status.credits.state'
  echo
  echo "Their versioned StorageClasses:"
  kubectl get storageclasses -l mountwarden.io/profile -o custom-columns='CLASS:.metadata.name,SUPERSEDED-BY:.metadata.annotations.mountwarden\.io/superseded-by,MOUNT-OPTIONS:.mountOptions'
  echo
  echo "Compliance and credits, as each profile's status says them:"
  kubectl get storageprofiles -o jsonpath='{range .items[*]}  {.metadata.name}: {.status.conditions[?(@.type=="Compliant")].message}{"\n"}    credits: {.status.credits.message}{"\n"}{end}'
  echo
  echo "What the operator said (its Events on profiles and pods, oldest first):"
  kubectl get events -A --field-selector source=kopf --sort-by=.metadata.creationTimestamp \
    -o custom-columns='KIND:.involvedObject.kind,NAME:.involvedObject.name,TYPE:.type,REASON:.reason,MESSAGE:.message' |
    { IFS= read -r header && echo "$header"; tail -n 8; }
  echo
  echo "Findings as PolicyReports (one per namespace, one cluster-wide):"
  kubectl get policyreports,clusterpolicyreports -A 2>&1 | sed 's/^No resources found.*/  none: no pod mounts a volume here (kwok nodes have no \/proc), so nothing has drifted yet/'
}

log "what the operator found (printed again whenever it changes)"
echo "try, in another terminal:  export KUBECONFIG=$KUBECONFIG PATH=$MOUNTWARDEN_TESTBIN_DIR:\$PATH"
echo "    kubectl patch sprof upload-staging --type merge -p '{\"spec\":{\"cachePolicy\":\"strict\"}}'"
echo "Ctrl-C stops everything."
last=
while kill -0 "$operator_pid" 2>/dev/null; do
  now=$(found 2>&1 || true)
  if [ "$now" != "$last" ]; then
    printf '\n\033[1m--- %s\033[0m\n%s\n' "$(date +%H:%M:%S)" "$now"
    last=$now
  fi
  sleep 3
done
log "the operator exited; the end of its log:"
tail -n 20 "$state/operator.log"
