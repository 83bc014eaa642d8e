"""The Kubernetes reads and writes a rollout needs: PVs, pods, their workloads, HPAs, disruption budgets and
node reports.

Everything is read straight from the API (no informer cache): a restart decided
on a stale view of a pod template could restart a workload twice. Reads are
limited to the namespaces of the profile's claims, and the kinds actually
needed there. A replica is removed only through the Eviction API, so that
PodDisruptionBudgets hold.
"""

import json
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import msgspec
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters.kube import TransientApiError, transient_errors
from mountwarden.adapters.pods import ListMetadata, rollout_pods_of_page
from mountwarden.adapters.rest import Rest, path
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.nodemountreport import UnreadableReport, read_node_report
from mountwarden.core.networkstorage import PROVISIONED_BY
from mountwarden.core.node.report import NodeReport
from mountwarden.core.rollout import (
    APPLIED_VERSION_ANNOTATION,
    PREVIOUS_OPTIONS_ANNOTATION,
    Autoscaler,
    DisruptionBudget,
    PatchVolume,
    Pod,
    ReleaseVolume,
    RemountPod,
    RestartWorkload,
    Volume,
    Workload,
    WorkloadRef,
    World,
    controller_of,
)
from mountwarden.core.storageclass import ADOPTED_BY_ANNOTATION

logger = logging.getLogger(__name__)

#: Pods per page of a namespace's pod list: what a rollout tick holds of the raw list at a time (some 7 MiB of
#: JSON). Most namespaces are one page, so a tick makes no more requests than with one list; a namespace of
#: 10,000 pods (bench/scale_100k.py) is five pages instead of one 35 MiB answer.
POD_PAGE_SIZE = 2000
#: PVs per page of a rollout's PV list: 5,000 PVs are 7.8 MB of JSON in one answer, held at once beside their
#: decoding; a page of 1,000 is a fifth of that, for four more requests a tick at 5,000 PVs.
PV_PAGE_SIZE = 1000
#: Where the API serves each kind a rollout restarts, and each it reads: (apiVersion, plural).
RESTARTED = {
    "Deployment": ("apps/v1", "deployments"),
    "StatefulSet": ("apps/v1", "statefulsets"),
    "DaemonSet": ("apps/v1", "daemonsets"),
}
KINDS = {
    **RESTARTED,
    "ReplicaSet": ("apps/v1", "replicasets"),
    "Job": ("batch/v1", "jobs"),
    "HorizontalPodAutoscaler": ("autoscaling/v2", "horizontalpodautoscalers"),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets"),
}


@dataclass(frozen=True)
class RefusedEviction:
    """The Eviction API refused to evict a replica: the next tick decides again from the budgets it reads."""

    namespace: str
    pod: str
    #: The API's own words, naming the PodDisruptionBudget.
    message: str

    def __str__(self) -> str:
        return f"the eviction of pod {self.namespace}/{self.pod} was refused: {self.message}"


def _refusal(error: ApiException) -> str:
    """The message of a refused eviction, with its DisruptionBudget cause (which names the budget)."""
    try:
        status = json.loads(error.body or "{}")
    except ValueError:
        return error.reason or str(error.status)
    causes = [cause.get("message", "") for cause in (status.get("details") or {}).get("causes") or []]
    return " ".join([status.get("message") or error.reason or "", *causes]).strip()


# -- the PVs a rollout reads, kept only as far as Volume, CandidateVolume and NetworkVolume read them --
# A whole PV list decoded with json.loads is some 6 KiB of dicts per PV (managed fields, every annotation):
# 32 MiB for 5,000, held while the tick reads every namespace; 9 MiB decoded here (tracemalloc, 2026-12-04).


class _Annotations(msgspec.Struct, omit_defaults=True):
    applied_version: str | None = msgspec.field(default=None, name=APPLIED_VERSION_ANNOTATION)
    previous_options: str | None = msgspec.field(default=None, name=PREVIOUS_OPTIONS_ANNOTATION)
    adopted_by: str | None = msgspec.field(default=None, name=ADOPTED_BY_ANNOTATION)
    provisioned_by: str | None = msgspec.field(default=None, name=PROVISIONED_BY)


class _VolumeMetadata(msgspec.Struct, omit_defaults=True):
    name: str
    resourceVersion: str | None = None
    labels: dict[str, str] | None = None
    annotations: _Annotations | None = None


class _ClaimRef(msgspec.Struct, omit_defaults=True):
    namespace: str | None = None
    name: str | None = None


class _NfsSource(msgspec.Struct, omit_defaults=True):
    server: str | None = None
    path: str | None = None


class _CsiSource(msgspec.Struct, omit_defaults=True):
    driver: str | None = None
    volumeHandle: str | None = None
    volumeAttributes: dict[str, str] | None = None


class _VolumeSpec(msgspec.Struct, omit_defaults=True):
    storageClassName: str | None = None
    mountOptions: list[str] | None = None
    claimRef: _ClaimRef | None = None
    nfs: _NfsSource | None = None
    csi: _CsiSource | None = None


class _VolumeStatus(msgspec.Struct, omit_defaults=True):
    phase: str | None = None


class _PersistentVolume(msgspec.Struct, omit_defaults=True):
    metadata: _VolumeMetadata
    spec: _VolumeSpec | None = None
    status: _VolumeStatus | None = None


class _VolumeList(msgspec.Struct):
    metadata: ListMetadata | None = None
    items: list[_PersistentVolume] | None = None


_VOLUME_LIST = msgspec.json.Decoder(_VolumeList)


def slim_volumes_of_page(data: bytes | bytearray) -> tuple[list[dict], str | None]:
    """A page of a PV list as the API server sent it, each PV with only the fields the rollout's readers read (wire
    form), and the token of the next page (None at the last)."""
    page = _VOLUME_LIST.decode(data)
    token = page.metadata.continue_token if page.metadata else None
    return [msgspec.to_builtins(pv) for pv in page.items or ()], token


def _items(listed: Mapping, kind: str) -> list[dict]:
    # List items carry no kind; Workload.from_object needs it.
    return [{**item, "kind": kind} for item in listed["items"]]


class ClusterWorkloads:
    """One profile's rollout world, read from the cluster, and the writes that move it on."""

    def __init__(self, client: ApiClient, *, pod_page_size: int = POD_PAGE_SIZE, pv_page_size: int = PV_PAGE_SIZE,
                 ) -> None:
        self.pod_page_size = pod_page_size
        self.pv_page_size = pv_page_size
        self.rest = Rest(client)

    def read(self, lineage: Collection[str], *, with_reports: bool,
             also: Callable[[Sequence[Mapping]], Collection[str]] | None = None,
             pod_name_of: Callable[[str], str | None] | None = None) -> World:
        """The PVs of the classes in ``lineage`` (and those ``also`` picks from the listed PVs, by name: the ones a
        profile adopts) and everything that mounts them.

        ``pod_name_of`` names the other pods that may hold a mount (the operator's PodPlacements.name_of); without
        it, the names of every other pod listed are kept."""
        volumes = self._volumes(lineage, also)
        pods: list[Pod] = []
        workloads: list[Workload] = []
        parents: dict[WorkloadRef, WorkloadRef | None] = {}
        autoscalers: list[Autoscaler] = []
        budgets: list[DisruptionBudget] = []
        names: dict[str, str] | None = {} if pod_name_of is None else None
        claims: dict[str, set[str]] = {}
        for volume in volumes:
            if volume.claim:
                claims.setdefault(volume.claim[0], set()).add(volume.claim[1])
        for namespace in sorted(claims):
            found = self._namespace(namespace, claims[namespace], with_budgets=with_reports, names=names)
            pods.extend(found.pods)
            workloads.extend(found.workloads)
            parents.update(found.parents)
            autoscalers.extend(found.autoscalers)
            budgets.extend(found.budgets)
        reports = self._reports() if with_reports and volumes else {}
        return World(volumes, tuple(pods), tuple(workloads), parents, tuple(autoscalers), reports, tuple(budgets),
                     pod_name_of=names.get if names is not None else pod_name_of)

    def _volumes(self, lineage: Collection[str], also: Callable[[Sequence[Mapping]], Collection[str]] | None,
                 ) -> tuple[Volume, ...]:
        """The PVs of the classes in ``lineage`` and those ``also`` picks, listed in pages. Without ``also`` only
        the lineage's PVs are kept from each page; ``also`` is handed every PV (slim, some 2 KiB each: 7 to 10 MiB
        at 5,000), let go here, before the namespaces' pod pages are read."""

        def in_lineage(pv: Mapping) -> bool:
            return (pv.get("spec") or {}).get("storageClassName") in lineage

        pvs: list[dict] = []
        token = None
        while True:
            with transient_errors():
                page, token = slim_volumes_of_page(self.rest.raw(
                    "GET", path("v1", "persistentvolumes"), query={"limit": self.pv_page_size, "continue": token}))
            pvs.extend(page if also is not None else filter(in_lineage, page))
            if not token:
                break
        picked = set(also(pvs)) if also is not None else set()
        return tuple(Volume.from_object(pv) for pv in pvs if in_lineage(pv) or pv["metadata"]["name"] in picked)

    def _mounting(self, namespace: str, claims: AbstractSet[str], names: dict[str, str] | None) -> list[Pod]:
        """The namespace's pods that mount one of ``claims``, listed in pages; the names of the others in ``names``.

        Every pod of the namespace was kept (about 800 bytes each), though only those of the profile's claims count.
        The pages of one list are one snapshot of the namespace."""
        kept: list[Pod] = []
        token = None
        while True:
            with transient_errors():
                listed = self.rest.raw("GET", path("v1", "pods", namespace=namespace),
                                       query={"limit": self.pod_page_size, "continue": token})
            page, token = rollout_pods_of_page(listed)
            for pod in page:
                if not claims.isdisjoint(pod.claims):
                    kept.append(pod)
                elif names is not None:
                    names[pod.uid] = f"{pod.namespace}/{pod.name}"
            if not token:
                return kept

    def _namespace(self, namespace: str, claims: AbstractSet[str], *, with_budgets: bool,
                   names: dict[str, str] | None) -> World:
        with transient_errors():
            # Workloads before pods: a workload whose status says its old replicas are gone was written after
            # they were marked for deletion, so a pod list read after it shows them terminating, not live.
            workloads = [
                Workload.from_object(obj)
                for kind in ("Deployment", "StatefulSet", "DaemonSet")
                for obj in _items(self._list(namespace, kind), kind)
            ]
            pods = self._mounting(namespace, claims, names)
            owner_kinds = {pod.owner.kind for pod in pods if pod.owner}
            parents: dict[WorkloadRef, WorkloadRef | None] = {}
            if "ReplicaSet" in owner_kinds:
                parents.update(self._parents(self._list(namespace, "ReplicaSet"), "ReplicaSet"))
            if "Job" in owner_kinds:
                parents.update(self._parents(self._list(namespace, "Job"), "Job"))
            autoscalers: list[Autoscaler] = []
            if any(workload.replicas == 0 for workload in workloads):
                autoscalers = [Autoscaler.from_object(obj) for obj in _items(
                    self._list(namespace, "HorizontalPodAutoscaler"), "HorizontalPodAutoscaler")]
            budgets: list[DisruptionBudget] = []
            if with_budgets and pods:  # only a rollout that moves pods evicts any
                budgets = [DisruptionBudget.from_object(obj) for obj in _items(
                    self._list(namespace, "PodDisruptionBudget"), "PodDisruptionBudget")]
        return World((), tuple(pods), tuple(workloads), parents, tuple(autoscalers), budgets=tuple(budgets))

    def _list(self, namespace: str, kind: str) -> dict:
        return self.rest.get(path(*KINDS[kind], namespace=namespace))

    @staticmethod
    def _parents(listed: Mapping, kind: str) -> dict[WorkloadRef, WorkloadRef | None]:
        return {
            WorkloadRef(kind, obj["metadata"]["namespace"], obj["metadata"]["name"]): controller_of(obj)
            for obj in _items(listed, kind)
        }

    def _reports(self) -> dict[str, NodeReport]:
        with transient_errors():
            listed = self.rest.get(path(f"{GROUP}/{VERSION}", REPORTS))
        reports = {}
        for obj in listed["items"]:
            try:
                report = read_node_report(obj["metadata"]["name"], obj.get("spec") or {})
            except UnreadableReport:
                continue  # no verdict from it: its replicas wait as for a missing report
            reports[report.node] = report
        return reports

    def perform(self, actions: Iterable[PatchVolume | RestartWorkload | RemountPod | ReleaseVolume],
                ) -> list[RefusedEviction]:
        """In order; the first failure stops the rest (the next tick decides again from the world), and says how
        many went in before it (TransientApiError.performed).

        Returns the evictions the API refused (a PodDisruptionBudget changed since the world was read).
        """
        refused = []
        for performed, action in enumerate(actions):
            try:
                if isinstance(action, PatchVolume | ReleaseVolume):
                    self.patch_volume(action)
                elif isinstance(action, RestartWorkload):
                    self.restart(action)
                elif (refusal := self.remount(action)) is not None:
                    refused.append(refusal)
            except TransientApiError as error:
                error.performed = performed
                raise
        return refused

    def patch_volume(self, action: PatchVolume | ReleaseVolume) -> None:
        with transient_errors():
            self.rest.patch(path("v1", "persistentvolumes", action.name), action.body())

    def restart(self, action: RestartWorkload) -> None:
        with transient_errors():
            self.rest.patch(path(*RESTARTED[action.ref.kind], action.ref.name, namespace=action.ref.namespace),
                            action.body())

    def remount(self, action: RemountPod) -> RefusedEviction | None:
        """Evict the replica if it is still the one judged (same UID); the refusal when the API refuses.

        404: already gone. 409: the UID precondition failed, a new pod has the name
        (a StatefulSet's): either way the replica judged is gone. 429: a
        PodDisruptionBudget allows no disruption now; 500 with a budget message:
        more than one budget covers the pod (eviction.go refuses both with these codes).
        """
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": action.name, "namespace": action.namespace},
                    "deleteOptions": {"preconditions": {"uid": action.uid}}}
        with transient_errors():
            try:
                self.rest.post(path("v1", "pods", action.name, namespace=action.namespace, subresource="eviction"),
                               eviction)
            except ApiException as error:
                if error.status in (404, 409):
                    return None
                if error.status == 429 or (error.status == 500 and "DisruptionBudget" in (error.body or "")):
                    refusal = RefusedEviction(action.namespace, action.name, _refusal(error))
                    logger.info(str(refusal))
                    return refusal
                raise
        return None
