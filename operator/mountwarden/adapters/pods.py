"""Where each pod runs and which claims it mounts: all the operator keeps of the cluster's pods.

Compliance needs, for every claim of a profile, the pods that mount it and their nodes;
a node report's pods must be checked against the node they are really scheduled on (an
agent speaks only of its own node's pods); Events name a pod by namespace and name; a pod
being deleted whose volume stays mounted is stuck (StuckTerminating). That is a few fields
per pod, reduced from each pod as it arrives (mountwarden.adapters.watches) and nothing else
of it is held. Only pods that mount a claim, an in-line NFS volume or an in-line CSI volume
are kept: no other can hold a volume a report shows or a profile governs (and a mount of a pod
not kept here is taken for one whose pod is gone: OrphanedMount).
"""

import sys
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from mountwarden.adapters.watches import Entries, ReducedWatch
from mountwarden.core.workload import workload_of

#: The indexes the pods file (see pod_entries).
POD_INDEXES = ("pods_by_uid", "pods_by_claim")


class PodPlacement(NamedTuple):
    uid: str
    namespace: str
    name: str
    #: None until the scheduler has bound it.
    node: str | None
    #: The claims it mounts (in its namespace).
    claims: tuple[str, ...]
    #: metadata.deletionTimestamp while it is being deleted: the end of its grace period.
    deleting_at: str | None = None
    #: Whether a controller (a ReplicaSet, a StatefulSet...) owns it: one that recreates it once evicted.
    controlled: bool = False
    #: Kind/name of its workload (core/workload.py), as metrics label it.
    workload: str = ""


def placement(pod: Mapping) -> PodPlacement | None:
    """The fields kept of a pod (its wire form), or None when it mounts nothing a report could show."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    volumes = spec.get("volumes") or []
    claims = tuple(sorted({v["persistentVolumeClaim"]["claimName"] for v in volumes if v.get("persistentVolumeClaim")}))
    if not claims and not any(v.get("nfs") or v.get("csi") for v in volumes):
        return None
    node = spec.get("nodeName")
    controller = next((ref for ref in metadata.get("ownerReferences") or () if ref.get("controller")), None)
    workload = workload_of(controller and controller.get("kind"), controller and controller.get("name"),
                           metadata["name"], (metadata.get("labels") or {}).get("pod-template-hash"))
    # Namespaces and nodes repeat across thousands of pods: one string each.
    return PodPlacement(metadata["uid"], sys.intern(metadata.get("namespace", "")), metadata["name"],
                        sys.intern(node) if node else None, tuple(sys.intern(c) for c in claims),
                        metadata.get("deletionTimestamp"), controller is not None, sys.intern(workload))


def placement_entries(found: PodPlacement | None) -> Entries:
    if found is None:
        return {}
    return {"pods_by_uid": {found.uid: found},
            "pods_by_claim": {(found.namespace, claim): found for claim in found.claims}}


def pod_entries(pod: Mapping) -> Entries:
    """What a pod files: its placement by UID, and under each claim it mounts."""
    return placement_entries(placement(pod))


class PodPlacements:
    """The pods' placements, read from the pods' watch (or, without a cluster, from what ``load`` is given)."""

    def __init__(self, watch: ReducedWatch | None = None) -> None:
        self.watch = watch if watch is not None else ReducedWatch("pods", None, pod_entries, POD_INDEXES)
        self._by_uid = self.watch.indexes["pods_by_uid"]
        self._by_claim = self.watch.indexes["pods_by_claim"]

    @property
    def synced(self):
        return self.watch.synced

    def load(self, pods: Iterable[PodPlacement]) -> None:
        self.watch.load({pod.uid: placement_entries(pod) for pod in pods})

    def workload_of(self, uid: str) -> str:
        """The pod's workload (Kind/name), "" for a pod not kept."""
        pod = self.get(uid)
        return pod.workload if pod is not None else ""

    def get(self, uid: str) -> PodPlacement | None:
        found = self._by_uid.get(uid)
        return found[0] if found else None

    def node_of(self, uid: str) -> str | None:
        """The node a pod is scheduled on, "" while it is not; None for a pod unknown here (gone, or mounting nothing)."""
        pod = self.get(uid)
        return (pod.node or "") if pod is not None else None

    def of_claim(self, namespace: str, claim: str) -> list[PodPlacement]:
        return list(self._by_claim.get((namespace, claim), ()))
