"""The pods of the agent's node: who each mounted volume belongs to, told in the report.

A mount path names only the pod's UID. The agent watches the pods bound to its own node
(a list and watch with the field selector ``spec.nodeName=<node>``, so the API server sends
it its node's pods and no others) and writes each volume's pod name, namespace, controller
and claim into its report. The operator then needs no copy of every pod in the cluster to
say whose mount drifted.

The watch runs in a thread of its own and calls ``on_change`` with the UID of a pod that
comes, goes, or changes what a report says about it (its controller), so that a report
already showing its mounts follows at once. A PV-backed volume's directory is the PV's name: its claim is the
pod's claim bound to that PV, read once per claim (a bound claim never changes its volume).
"""

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import kubernetes
from kubernetes.client import ApiClient, ApiException

from mountwarden.adapters.rest import Rest, path, watcher
from mountwarden.core.workload import workload_of

log = logging.getLogger(__name__)

#: Seconds per watch request (the API server ends it; a new one resumes from the last resourceVersion).
WATCH_SECONDS = 300
#: Seconds to wait after a failed list or watch before trying again.
RETRY_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class NodePod:
    uid: str
    name: str
    namespace: str
    #: Kind/name of its controller (a ReplicaSet for a Deployment's pods), None for a bare pod.
    owner: str | None
    #: The pod's volume name -> the claim it mounts, for its PVC volumes.
    claims: Mapping[str, str] = field(default_factory=dict)
    #: Kind/name of its workload (core/workload.py: a Deployment rather than its ReplicaSet), as /metrics labels it.
    workload: str = ""

    @staticmethod
    def from_object(pod: Mapping) -> "NodePod":
        """From the pod as the API server sends it (JSON)."""
        metadata = pod["metadata"]
        controller = next((ref for ref in metadata.get("ownerReferences") or [] if ref.get("controller")), None)
        owner = f"{controller['kind']}/{controller['name']}" if controller is not None else None
        claims = {volume["name"]: volume["persistentVolumeClaim"]["claimName"] for volume in _volumes(pod)
                  if volume.get("persistentVolumeClaim") is not None}
        workload = workload_of(controller and controller["kind"], controller and controller["name"], metadata["name"],
                               (metadata.get("labels") or {}).get("pod-template-hash"))
        return NodePod(metadata["uid"], metadata["name"], metadata["namespace"], owner, claims, workload)


def _volumes(pod: Mapping) -> list[dict]:
    return (pod.get("spec") or {}).get("volumes") or []


def mounts_volumes(pod: Mapping) -> bool:
    """Whether a pod can hold a network mount the report shows: a claim or an in-line NFS volume."""
    return any(volume.get("persistentVolumeClaim") is not None or volume.get("nfs") is not None
               for volume in _volumes(pod))


class NodePods:
    """This node's pods that mount volumes, kept current by a watch; ``describe`` answers from memory."""

    def __init__(self, api_client: ApiClient, node_name: str, on_change: Callable[[str], None], *,
                 watch_seconds: int = WATCH_SECONDS) -> None:
        self.node_name = node_name
        self.on_change = on_change
        self.watch_seconds = watch_seconds
        #: Lists taken (one at the start, one after each failed watch) and watch requests ended in order: a
        #: healthy follower lists once however long it runs.
        self.lists = 0
        self.watches_ended = 0
        self.bookmarks = 0
        self._rest = Rest(api_client)
        self._pods: dict[str, NodePod] = {}
        #: (namespace, claim) -> the PV it is bound to.
        self._claim_volumes: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: kubernetes.watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name="node-pods", daemon=True)
        self.synced = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=10)

    def get(self, uid: str) -> NodePod | None:
        with self._lock:
            return self._pods.get(uid)

    def claim_of(self, pod: NodePod, volume_name: str) -> str | None:
        """The claim through which ``pod`` mounts the volume the kubelet named ``volume_name``."""
        if volume_name in pod.claims:  # the pod's own name for the volume
            return pod.claims[volume_name]
        for claim in pod.claims.values():  # the PV's name: find the claim bound to it
            if self._volume_of(pod.namespace, claim) == volume_name:
                return claim
        return None

    def _volume_of(self, namespace: str, claim: str) -> str | None:
        key = (namespace, claim)
        with self._lock:
            if key in self._claim_volumes:
                return self._claim_volumes[key]
        try:
            claimed = self._rest.get(path("v1", "persistentvolumeclaims", claim, namespace=namespace))
            volume = (claimed.get("spec") or {}).get("volumeName")
        except ApiException as error:
            log.debug("cannot read claim %s/%s (%s): its volume is reported without it", namespace, claim, error.reason)
            return None
        if volume:
            with self._lock:
                self._claim_volumes[key] = volume
        return volume

    # -- the watch -------------------------------------------------------------------------------

    def _run(self) -> None:
        selector = f"spec.nodeName={self.node_name}"
        while not self._stop.is_set():
            try:
                listed = self._rest.get(path("v1", "pods"), query={"fieldSelector": selector})
                self.lists += 1
                self._replace({pod["metadata"]["uid"]: NodePod.from_object(pod) for pod in listed["items"]
                               if mounts_volumes(pod)})
                self.synced.set()
                self._follow(selector, listed["metadata"]["resourceVersion"])
            except Exception as error:  # the API server away, 410 Gone: list again after a pause
                if self._stop.is_set():
                    return
                log.warning("watching the pods of node %s failed (%s): listing them again in %.0f s",
                            self.node_name, error, RETRY_SECONDS)
                self._stop.wait(RETRY_SECONDS)

    def _follow(self, selector: str, resource_version: str) -> None:
        while not self._stop.is_set():
            self._watch = watcher()
            for event in self._rest.watch(self._watch, path("v1", "pods"), resource_version=resource_version,
                                          timeout_seconds=self.watch_seconds, query={"fieldSelector": selector}):
                pod = event["object"]
                # A bookmark's version (it carries only metadata) is where the next watch resumes, so that no
                # relist follows a quiet node's watch.
                resource_version = pod["metadata"]["resourceVersion"]
                if event["type"] == "BOOKMARK":
                    self.bookmarks += 1
                    continue
                if event["type"] == "DELETED" or not mounts_volumes(pod):
                    self._apply(pod["metadata"]["uid"], None)
                else:
                    self._apply(pod["metadata"]["uid"], NodePod.from_object(pod))
            self.watches_ended += 1

    def _replace(self, pods: dict[str, NodePod]) -> None:
        with self._lock:
            before, self._pods = self._pods, pods
        for uid in {uid for uid in before.keys() | pods.keys() if before.get(uid) != pods.get(uid)}:
            self.on_change(uid)

    def _apply(self, uid: str, pod: NodePod | None) -> None:
        with self._lock:
            before = self._pods.get(uid)
            if pod is None:
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = pod
        if before != pod:
            self.on_change(uid)
