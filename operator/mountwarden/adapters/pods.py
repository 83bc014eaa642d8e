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

import msgspec

from mountwarden.adapters.watches import Entries, ReducedPage, ReducedWatch
from mountwarden.core.rollout import Pod, WorkloadRef, parse_time
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


# -- the wire form, decoded only as far as a placement reads it ------------------------------------
# A pod's JSON is some 3.5 KiB (managed fields, status, the token volume); a placement reads a few
# dozen bytes of it. Decoding into these structs skips the rest without building it: 40 pages of
# 500 such pods took 0.14 s, against 1.1 s with json.loads (2 CPUs, 2026-12-04). The first list of
# the pods was most of the operator's time to Ready (bench/results/scale.json). Field names are
# the API's.


class _OwnerReference(msgspec.Struct):
    kind: str | None = None
    name: str | None = None
    controller: bool | None = None


class _Labels(msgspec.Struct):
    pod_template_hash: str | None = msgspec.field(default=None, name="pod-template-hash")


class _Metadata(msgspec.Struct):
    uid: str
    name: str
    namespace: str = ""
    labels: _Labels | None = None
    ownerReferences: list[_OwnerReference] | None = None
    deletionTimestamp: str | None = None


class _Claim(msgspec.Struct):
    claimName: str


class _Present(msgspec.Struct):
    """An object of which only its being there counts: none of its fields is kept."""


class _Volume(msgspec.Struct):
    persistentVolumeClaim: _Claim | None = None
    nfs: _Present | None = None
    csi: _Present | None = None


class _Spec(msgspec.Struct):
    nodeName: str | None = None
    volumes: list[_Volume] | None = None


class _Pod(msgspec.Struct):
    metadata: _Metadata
    spec: _Spec | None = None


class ListMetadata(msgspec.Struct):
    """A list's metadata as the API server sends it: what a paged reader needs."""

    resourceVersion: str = ""
    continue_token: str | None = msgspec.field(default=None, name="continue")


class _PodList(msgspec.Struct):
    metadata: ListMetadata
    items: list[_Pod] | None = None


_POD_LIST = msgspec.json.Decoder(_PodList)


def _placement_of(pod: _Pod) -> PodPlacement | None:
    metadata, spec = pod.metadata, pod.spec or _Spec()
    volumes = spec.volumes or []
    claims = tuple(sorted({v.persistentVolumeClaim.claimName for v in volumes if v.persistentVolumeClaim}))
    if not claims and not any(v.nfs is not None or v.csi is not None for v in volumes):
        return None
    node = spec.nodeName
    controller = next((ref for ref in metadata.ownerReferences or () if ref.controller), None)
    workload = workload_of(controller and controller.kind, controller and controller.name, metadata.name,
                           metadata.labels.pod_template_hash if metadata.labels else None)
    # Namespaces and nodes repeat across thousands of pods: one string each.
    return PodPlacement(metadata.uid, sys.intern(metadata.namespace), metadata.name,
                        sys.intern(node) if node else None, tuple(sys.intern(c) for c in claims),
                        metadata.deletionTimestamp, controller is not None, sys.intern(workload))


# -- the pods a rollout reads: every field of core.rollout.Pod, and nothing else -----------------------------
# A rollout tick lists whole namespaces; decoded with json.loads, a namespace of 2,000 pods was 34 MiB of
# dicts for an instant (4 MiB decoded here; tracemalloc, 2026-12-04), and the C heap keeps what it once held.


class _Condition(msgspec.Struct):
    type: str | None = None
    status: str | None = None


class _RolloutMetadata(msgspec.Struct):
    uid: str
    name: str
    namespace: str = ""
    labels: dict[str, str] | None = None
    ownerReferences: list[_OwnerReference] | None = None
    deletionTimestamp: str | None = None


class _NamedVolume(msgspec.Struct):
    name: str
    persistentVolumeClaim: _Claim | None = None


class _RolloutSpec(msgspec.Struct):
    nodeName: str | None = None
    volumes: list[_NamedVolume] | None = None


class _Status(msgspec.Struct):
    phase: str | None = "Pending"
    startTime: str | None = None
    conditions: list[_Condition] | None = None


class _RolloutPod(msgspec.Struct):
    metadata: _RolloutMetadata
    spec: _RolloutSpec | None = None
    status: _Status | None = None


class _RolloutPodList(msgspec.Struct):
    metadata: ListMetadata | None = None
    items: list[_RolloutPod] | None = None


_ROLLOUT_POD_LIST = msgspec.json.Decoder(_RolloutPodList)


def _rollout_pod(pod: _RolloutPod) -> Pod:
    metadata, spec, status = pod.metadata, pod.spec or _RolloutSpec(), pod.status or _Status()
    controller = next((ref for ref in metadata.ownerReferences or () if ref.controller), None)
    return Pod(
        namespace=metadata.namespace,
        name=metadata.name,
        uid=metadata.uid,
        node=spec.nodeName,
        phase=status.phase,
        ready=any(c.type == "Ready" and c.status == "True" for c in status.conditions or ()),
        terminating=bool(metadata.deletionTimestamp),
        started_at=parse_time(status.startTime),
        claims={v.persistentVolumeClaim.claimName: v.name for v in spec.volumes or () if v.persistentVolumeClaim},
        owner=WorkloadRef(controller.kind, metadata.namespace, controller.name) if controller else None,
        labels=dict(metadata.labels or {}),
    )


def rollout_pods_of_page(data: bytes | bytearray) -> tuple[list[Pod], str | None]:
    """A page of a pod list as the API server sent it, each pod as a rollout reads it (core.rollout.Pod), and the
    token of the next page (None at the last)."""
    page = _ROLLOUT_POD_LIST.decode(data)
    return [_rollout_pod(pod) for pod in page.items or ()], page.metadata.continue_token if page.metadata else None


def placement(pod: Mapping) -> PodPlacement | None:
    """The fields kept of a pod (its wire form, decoded), or None when it mounts nothing a report could show."""
    return _placement_of(msgspec.convert(pod, _Pod))


def placements_of_list(data: bytes | bytearray) -> list[PodPlacement]:
    """The placements of the pods of a whole pod list, as the API server sent it (those kept of something)."""
    return [found for pod in _POD_LIST.decode(data).items or () if (found := _placement_of(pod)) is not None]


def placement_entries(found: PodPlacement | None) -> Entries:
    if found is None:
        return {}
    return {"pods_by_uid": {found.uid: found},
            "pods_by_claim": {(found.namespace, claim): found for claim in found.claims}}


def pod_entries(pod: Mapping) -> Entries:
    """What a pod files: its placement by UID, and under each claim it mounts."""
    return placement_entries(placement(pod))


def pod_page_entries(data: bytes | bytearray) -> ReducedPage:
    """What a page of a pod list files, by UID (the pods' list is decoded this way, not through ``pod_entries``)."""
    page = _POD_LIST.decode(data)
    entries = {pod.metadata.uid: placement_entries(_placement_of(pod)) for pod in page.items or ()}
    return entries, page.metadata.continue_token, page.metadata.resourceVersion


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

    def name_of(self, uid: str) -> str | None:
        """"namespace/name" of a pod kept here (one that can hold a mount), None for one unknown here."""
        pod = self.get(uid)
        return f"{pod.namespace}/{pod.name}" if pod is not None else None

    def node_of(self, uid: str) -> str | None:
        """The node a pod is scheduled on, "" while it is not; None for a pod unknown here (gone, or mounting nothing)."""
        pod = self.get(uid)
        return (pod.node or "") if pod is not None else None

    def of_claim(self, namespace: str, claim: str) -> list[PodPlacement]:
        return list(self._by_claim.get((namespace, claim), ()))
