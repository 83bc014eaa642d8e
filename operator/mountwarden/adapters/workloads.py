"""The Kubernetes reads and writes a rollout needs: PVs, pods, their workloads, HPAs and node reports.

Everything is read straight from the API (no informer cache): a restart decided
on a stale view of a pod template could restart a workload twice. Reads are
limited to the namespaces of the profile's claims, and the kinds actually
needed there.
"""

import json
from collections.abc import Collection, Iterable

import kubernetes
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters.kube import transient_errors
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.core.nodereport import NodeReport, UnreadableReport
from mountwarden.core.rollout import (
    Autoscaler,
    PatchVolume,
    Pod,
    RemountPod,
    RestartWorkload,
    Volume,
    Workload,
    WorkloadRef,
    World,
    controller_of,
)


def _items(response, kind: str) -> list[dict]:
    # List items carry no kind; Workload.from_object needs it.
    return [{**item, "kind": kind} for item in json.loads(response.data)["items"]]


class ClusterWorkloads:
    """One profile's rollout world, read from the cluster, and the writes that move it on."""

    def __init__(self, client: ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.batch = kubernetes.client.BatchV1Api(client)
        self.autoscaling = kubernetes.client.AutoscalingV2Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    def read(self, lineage: Collection[str], *, with_reports: bool) -> World:
        """The PVs of the classes in ``lineage`` and everything that mounts them."""
        with transient_errors():
            pvs = _items(self.core.list_persistent_volume(_preload_content=False), "PersistentVolume")
        volumes = tuple(Volume.from_object(pv) for pv in pvs if (pv.get("spec") or {}).get("storageClassName")
                        in lineage)
        pods: list[Pod] = []
        workloads: list[Workload] = []
        parents: dict[WorkloadRef, WorkloadRef | None] = {}
        autoscalers: list[Autoscaler] = []
        for namespace in sorted({volume.claim[0] for volume in volumes if volume.claim}):
            found = self._namespace(namespace)
            pods.extend(found.pods)
            workloads.extend(found.workloads)
            parents.update(found.parents)
            autoscalers.extend(found.autoscalers)
        reports = self._reports() if with_reports and volumes else {}
        return World(volumes, tuple(pods), tuple(workloads), parents, tuple(autoscalers), reports)

    def _namespace(self, namespace: str) -> World:
        with transient_errors():
            pods = [Pod.from_object(obj) for obj in _items(
                self.core.list_namespaced_pod(namespace, _preload_content=False), "Pod")]
            workloads = [
                Workload.from_object(obj)
                for kind, lister in (("Deployment", self.apps.list_namespaced_deployment),
                                     ("StatefulSet", self.apps.list_namespaced_stateful_set),
                                     ("DaemonSet", self.apps.list_namespaced_daemon_set))
                for obj in _items(lister(namespace, _preload_content=False), kind)
            ]
            owner_kinds = {pod.owner.kind for pod in pods if pod.owner}
            parents: dict[WorkloadRef, WorkloadRef | None] = {}
            if "ReplicaSet" in owner_kinds:
                parents.update(self._parents(self.apps.list_namespaced_replica_set(namespace, _preload_content=False),
                                             "ReplicaSet"))
            if "Job" in owner_kinds:
                parents.update(self._parents(self.batch.list_namespaced_job(namespace, _preload_content=False), "Job"))
            autoscalers: list[Autoscaler] = []
            if any(workload.replicas == 0 for workload in workloads):
                autoscalers = [Autoscaler.from_object(obj) for obj in _items(
                    self.autoscaling.list_namespaced_horizontal_pod_autoscaler(namespace, _preload_content=False),
                    "HorizontalPodAutoscaler")]
        return World((), tuple(pods), tuple(workloads), parents, tuple(autoscalers))

    @staticmethod
    def _parents(response, kind: str) -> dict[WorkloadRef, WorkloadRef | None]:
        return {
            WorkloadRef(kind, obj["metadata"]["namespace"], obj["metadata"]["name"]): controller_of(obj)
            for obj in _items(response, kind)
        }

    def _reports(self) -> dict[str, NodeReport]:
        with transient_errors():
            listed = json.loads(self.custom.list_cluster_custom_object(
                GROUP, VERSION, REPORTS, _preload_content=False).data)
        reports = {}
        for obj in listed["items"]:
            try:
                report = NodeReport.from_object(obj)
            except UnreadableReport:
                continue  # no verdict from it: its replicas wait as for a missing report
            reports[report.node] = report
        return reports

    def perform(self, actions: Iterable[PatchVolume | RestartWorkload | RemountPod]) -> None:
        """In order; the first failure stops the rest (the next tick decides again from the world)."""
        for action in actions:
            if isinstance(action, PatchVolume):
                self.patch_volume(action)
            elif isinstance(action, RestartWorkload):
                self.restart(action)
            else:
                self.remount(action)

    def patch_volume(self, action: PatchVolume) -> None:
        with transient_errors():
            self.core.patch_persistent_volume(action.name, action.body())

    def restart(self, action: RestartWorkload) -> None:
        patchers = {
            "Deployment": self.apps.patch_namespaced_deployment,
            "StatefulSet": self.apps.patch_namespaced_stateful_set,
            "DaemonSet": self.apps.patch_namespaced_daemon_set,
        }
        with transient_errors():
            patchers[action.ref.kind](action.ref.name, action.ref.namespace, action.body())

    def remount(self, action: RemountPod) -> None:
        """Delete the replica if it is still the one judged (same UID).

        404: already gone. 409: the UID precondition failed, a new pod has the name
        (a StatefulSet's): either way the replica judged is gone.
        """
        options = kubernetes.client.V1DeleteOptions(preconditions=kubernetes.client.V1Preconditions(uid=action.uid))
        with transient_errors():
            try:
                self.core.delete_namespaced_pod(action.name, action.namespace, body=options)
            except ApiException as error:
                if error.status not in (404, 409):
                    raise
