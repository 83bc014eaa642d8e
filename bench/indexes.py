"""What the operator's indexes hold per pod, PV and claim: the memory a large cluster costs, object by object.

    .venv/bin/python bench/indexes.py [--pods 20000] [--pvs 5000]

The pods, PVs and claims of scale.py's cluster (4 pods per claim, 10 namespaces, 100 nodes),
in the wire form the API server sends (managed fields, status, the token volume), are listed
in pages of 500 through the operator's own page reducers into its own watches
(mountwarden.handlers.indexes.cluster_watches, without a cluster: ``load``). tracemalloc
counts what stays allocated once they are filed: index_bytes_per_pod, _per_pv and
_per_claim are the Python heap's share; the process's RSS adds the interpreter's free lists
and the C heap's fragmentation (scale.py and scale_100k.py measure that). Writes
bench/results/indexes.json. Figures, not assertions.
"""

import argparse
import gc
import json
import sys
import tracemalloc
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from mountwarden.adapters.watches import PAGE_SIZE  # noqa: E402
from mountwarden.handlers.indexes import cluster_watches  # noqa: E402

RESULTS = ROOT / "bench" / "results"
NAMESPACES = 10
NODES = 100
NOW = "2026-12-04T10:00:00Z"


def managed(manager: str, fields: dict, subresource: str | None = None) -> dict:
    entry = {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": NOW, "fieldsType": "FieldsV1",
             "fieldsV1": fields}
    return {**entry, "subresource": subresource} if subresource else entry


def pod(index: int, pvs: int) -> dict:
    claim = f"scale-pv-{index % pvs:05d}"
    return {
        "metadata": {"name": f"scale-pod-{index:06d}", "namespace": f"scale-{index % pvs % NAMESPACES}",
                     "uid": str(uuid.uuid4()), "resourceVersion": str(100000 + index), "creationTimestamp": NOW,
                     "managedFields": [managed("python", {"f:spec": {"f:containers": {}, "f:volumes": {}}}),
                                       managed("kwok", {"f:status": {"f:conditions": {}, "f:phase": {}}}, "status")]},
        "spec": {"nodeName": f"node-{index % NODES}", "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                 "serviceAccountName": "default", "schedulerName": "default-scheduler",
                 "containers": [{"name": "app", "image": "registry.invalid/app:1", "imagePullPolicy": "IfNotPresent",
                                 "terminationMessagePath": "/dev/termination-log",
                                 "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}},
                             {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                                 {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                                 {"configMap": {"name": "kube-root-ca.crt",
                                                "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                  "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {"phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "startTime": NOW,
                   "qosClass": "BestEffort",
                   "conditions": [{"type": kind, "status": "True", "lastTransitionTime": NOW}
                                  for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]},
    }


def pv(index: int) -> dict:
    name = f"scale-pv-{index:05d}"
    return {
        "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": str(index), "creationTimestamp": NOW,
                     "finalizers": ["kubernetes.io/pv-protection"],
                     "managedFields": [managed("python", {"f:spec": {"f:claimRef": {}, "f:nfs": {}}})]},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem",
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": f"scale-{index % 5}-v1",
                 "mountOptions": ["nfsvers=4.1", "hard"], "nfs": {"server": "nfs.bench", "path": f"/{name}"},
                 "claimRef": {"kind": "PersistentVolumeClaim", "namespace": f"scale-{index % NAMESPACES}",
                              "name": name, "uid": str(uuid.uuid4())}},
        "status": {"phase": "Bound"},
    }


def claim(index: int, bound: bool) -> dict:
    name = f"scale-pv-{index:05d}"
    return {
        "metadata": {"name": name, "namespace": f"scale-{index % NAMESPACES}", "uid": str(uuid.uuid4())},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": f"scale-{index % 5}-v1", "volumeName": name,
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound" if bound else "Pending"},
    }


def pages(objects: list[dict]) -> list[bytes]:
    return [json.dumps({"metadata": {"resourceVersion": "1"}, "items": objects[start:start + PAGE_SIZE]}).encode()
            for start in range(0, len(objects), PAGE_SIZE)]


def held_bytes(watch, listed: list[bytes]) -> int:
    """Bytes that stay allocated once ``listed`` is filed in ``watch``, as its list would file it."""
    gc.collect()
    tracemalloc.start()
    objects: dict = {}
    for data in listed:
        entries, _, _ = watch.reduce_page(data)
        objects.update(entries)
    watch.load(objects)
    del objects, entries
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--pvs", type=int, default=5000, help="as many claims, one in ten of them not bound yet")
    args = parser.parse_args()
    watches = cluster_watches(client=None)
    listed_pods = pages([pod(index, args.pvs) for index in range(args.pods)])
    listed_pvs = pages([pv(index) for index in range(args.pvs)])
    listed_claims = pages([claim(index, bound=index % 10 != 0) for index in range(args.pvs)])
    pods = held_bytes(watches.pods, listed_pods)
    pvs = held_bytes(watches.volumes, listed_pvs)
    claims = held_bytes(watches.claims, listed_claims)
    result = {
        "summary": {
            "pods": args.pods, "pvs": args.pvs, "claims": args.pvs,
            "pod_wire_bytes": round(sum(map(len, listed_pods)) / args.pods),
            "index_bytes_per_pod": round(pods / args.pods),
            "index_bytes_per_pv": round(pvs / args.pvs),
            "index_bytes_per_claim": round(claims / args.pvs),
            "index_mib": round((pods + pvs + claims) / 2**20, 1),
        },
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "indexes.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
