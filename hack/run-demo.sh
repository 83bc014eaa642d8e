#!/usr/bin/env bash
# `make run`: a local control plane, the real node with the chart installed on it (the operator's replicas and the
# agent, from the image `make image` built), and the demo, in one command. Ctrl-C stops everything.
# What it prints is what the operator found: the profiles, the classes it made, the admission warning and the
# findings (status, each profile's worst finding by impact, the operator's Events, PolicyReports), printed again
# only when something in them changes (`mountwarden dev-cluster watch`: in place on a terminal, appended otherwise). Without the real node
# (MOUNTWARDEN_DEMO_REAL_NODE=0: no QEMU needed) the operator runs as a process here, its log in a file (named below).
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
real_node=${MOUNTWARDEN_DEMO_REAL_NODE:-1}
# Under emulation the chart's replicas take minutes to start and elect the active one.
ready_timeout=120s
[ "$real_node" = 1 ] && ready_timeout=1800s
if [ "$real_node" = 1 ]; then
  log "starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok) and the" \
      "real node lab-node-0 (the kernel lab VM: containerd, a kubelet, a kernel NFS server; minutes under TCG)"
  "$mw" dev-cluster up --state-dir "$state" --real-node
else
  log "starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)"
  "$mw" dev-cluster up --state-dir "$state"
fi
export KUBECONFIG=$root/$state/kubeconfig
export PATH=${MOUNTWARDEN_TESTBIN_DIR:?run through make run}:$PATH

log "installing mountwarden's CRDs, and the wgpolicyk8s.io PolicyReport CRDs (as Kyverno would)"
kubectl apply --server-side -f crds/ -f hack/policyreport-crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s -f crds/ -f hack/policyreport-crds/ >/dev/null

if [ "$real_node" = 1 ]; then
  # The chart is installed (dev-cluster up --real-node); PolicyReports are opt-in: turn them on now that their CRDs
  # are there. The operator's replicas restart (minutes under emulation) and the active one takes over.
  log "the chart's operator on lab-node-0, with PolicyReports (its log: kubectl logs -n mountwarden" \
      "-l mountwarden.io/active=true)"
  HELM_CONFIG_HOME=$state/helm/config HELM_CACHE_HOME=$state/helm/cache HELM_DATA_HOME=$state/helm/data \
    helm upgrade mountwarden charts/mountwarden -n mountwarden --reuse-values --set policyReports.enabled=true \
    --wait --timeout 30m >/dev/null
else
  log "starting the operator (its log: $state/operator.log)"
  "$mw" operator --kubeconfig "$KUBECONFIG" --policy-reports >"$state/operator.log" 2>&1 &
  operator_pid=$!
fi

log "applying examples/: two consumers of one EFS file system, each with its own mount contract"
kubectl apply -f examples/
kubectl wait --for=condition=Ready --timeout=$ready_timeout storageprofiles --all >/dev/null

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

if [ "$real_node" = 1 ]; then
  log "two pods on the real node mount real NFS (the node's own server): the importer, holding a SQLite" \
      "transaction open; the upload service, whose volume still carries the old shared mount's flags"
  kubectl create namespace web --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl label namespace web team=web --overwrite >/dev/null
  importer_options=$(kubectl get storageclass importer-scratch-v1 -o jsonpath='{.mountOptions}')
  kubectl apply -f - <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: demo-importer}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  storageClassName: importer-scratch-v1
  mountOptions: $importer_options
  nfs: {server: 127.0.0.1, path: /srv/export}
  claimRef: {namespace: data, name: importer-scratch}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: importer-scratch, namespace: data, labels: {app: importer}}
spec: {accessModes: [ReadWriteMany], storageClassName: importer-scratch-v1, volumeName: demo-importer,
       resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: importer, namespace: data}
spec:
  nodeName: lab-node-0
  terminationGracePeriodSeconds: 0
  containers:
  - name: import
    image: mountwarden.local/lab-tools:1
    imagePullPolicy: Never
    command: [/bin/sh, -c, "printf 'CREATE TABLE IF NOT EXISTS rows(x);\\nBEGIN IMMEDIATE;\\nINSERT INTO rows VALUES (1);\\n.shell sleep 1000000\\n' | sqlite3 /scratch/import.db"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  volumes: [{name: scratch, persistentVolumeClaim: {claimName: importer-scratch}}]
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: demo-uploads}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  storageClassName: upload-staging-v1
  mountOptions: [vers=4.1, hard, sync, actimeo=0, lookupcache=none]
  nfs: {server: 127.0.0.1, path: /srv/export2}
  claimRef: {namespace: web, name: upload-staging}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: upload-staging, namespace: web, labels: {app: uploads}}
spec: {accessModes: [ReadWriteMany], storageClassName: upload-staging-v1, volumeName: demo-uploads,
       resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: uploads, namespace: web}
spec:
  nodeName: lab-node-0
  terminationGracePeriodSeconds: 0
  containers:
  - {name: app, image: "mountwarden.local/lab-tools:1", imagePullPolicy: Never, command: [sleep, "1000000"],
     volumeMounts: [{name: staging, mountPath: /staging}]}
  volumes: [{name: staging, persistentVolumeClaim: {claimName: upload-staging}}]
YAML
fi

log "what the operator found (printed again only when it changes: in place on a terminal, one block per change" \
    "otherwise)"
echo "try, in another terminal:  export KUBECONFIG=$KUBECONFIG PATH=$MOUNTWARDEN_TESTBIN_DIR:\$PATH"
echo "    kubectl patch sprof upload-staging --type merge -p '{\"spec\":{\"cachePolicy\":\"strict\"}}'"
echo "Ctrl-C stops everything."
# The view (mountwarden dev-cluster watch) runs until Ctrl-C, or until the operator started here exits.
"$mw" dev-cluster watch --state-dir "$state" ${operator_pid:+--while-pid "$operator_pid"}
log "the operator exited; the end of its log:"
[ -n "$operator_pid" ] && tail -n 20 "$state/operator.log"
