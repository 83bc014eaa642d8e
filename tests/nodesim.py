"""A node simulator for tests: writes the NodeMountReports the mountwarden agent would write on kwok nodes.

kwok nodes have no kubelet and no NFS client, so nothing is mounted. This
simulator stands in for the kernel and the agent together:

- a pod's NFS volume is "mounted" when the simulator first sees the pod started
  on its node, with the PV's ``spec.mountOptions`` of that moment (a later patch
  of the PV does not change a mount that exists);
- pods of one export (server:path) on one node share a superblock when the options
  the kernel compares are equal, as the kernel lab measured (core.options.superblock_key:
  a later pod whose options differ only in timeo, retrans, resvport or nconnect gets
  the first mount's superblock and its values; any other difference gets its own).
  Only the first mount's lifetime is simulated: once it is gone, a new pod gets a
  fresh superblock even if later pods still hold the old one;
- each node's report lists every such mount with its superblock and the other
  mount points that share it, and is rewritten whenever that changes.

It runs as a background thread of the test process and never touches a pod.
"""

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

import kubernetes

from mountwarden.core.options.normalize import NormalizedOptions, normalize, superblock_key

GROUP, VERSION, PLURAL = "mountwarden.io", "v1alpha1", "nodemountreports"
AGENT_VERSION = "nodesim"


@dataclass
class Superblock:
    device: str
    options: list[str]
    #: UID of the pod whose mount created it: later mounts join it while that pod is alive.
    first_pod: str


@dataclass
class SimulatedMount:
    pod_uid: str
    volume: str
    server: str
    path: str
    superblock: Superblock

    @property
    def mount_point(self) -> str:
        return f"/var/lib/kubelet/pods/{self.pod_uid}/volumes/kubernetes.io~nfs/{self.volume}"


@dataclass
class Node:
    mounts: dict[tuple[str, str], SimulatedMount] = field(default_factory=dict)
    written: list[dict] | None = None


class NodeSimulator:
    """Start with .start(), stop with .stop(); .errors collects what went wrong in the thread."""

    def __init__(self, api_client: kubernetes.client.ApiClient, nodes: list[str], interval: float = 0.3) -> None:
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.nodes = {name: Node() for name in nodes}
        self.interval = interval
        self.errors: list[BaseException] = []
        self._devices = 50
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nodesim", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as error:  # keep simulating; the tests see the errors
                self.errors.append(error)
            self._stop.wait(self.interval)

    def tick(self) -> None:
        volumes = {pv.metadata.name: pv for pv in self.core.list_persistent_volume().items}
        claims = {(c.metadata.namespace, c.metadata.name): c.spec.volume_name
                  for c in self.core.list_persistent_volume_claim_for_all_namespaces().items}
        pods = [pod for pod in self.core.list_pod_for_all_namespaces().items if pod.spec.node_name in self.nodes]
        alive = {pod.metadata.uid for pod in pods}
        for node in self.nodes.values():
            node.mounts = {key: mount for key, mount in node.mounts.items() if mount.pod_uid in alive}
        # Oldest first, so that of two pods that appear in one tick the older mounts first.
        for pod in sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name)):
            if pod.status.start_time is None:
                continue  # the kubelet mounts volumes once it has taken the pod on
            node = self.nodes[pod.spec.node_name]
            for volume in pod.spec.volumes or []:
                if volume.persistent_volume_claim is None:
                    continue
                pv = volumes.get(claims.get((pod.metadata.namespace, volume.persistent_volume_claim.claim_name)))
                if pv is None or pv.spec.nfs is None or (pod.metadata.uid, pv.metadata.name) in node.mounts:
                    continue
                node.mounts[(pod.metadata.uid, pv.metadata.name)] = self._mount(node, pod, pv, alive)
        for name, node in self.nodes.items():
            self._write(name, node)

    def _mount(self, node: Node, pod, pv, alive: set[str]) -> SimulatedMount:
        server, path = pv.spec.nfs.server, pv.spec.nfs.path
        asked = normalize(pv.spec.mount_options or []).options
        shared = next((m.superblock for m in node.mounts.values()
                       if (m.server, m.path) == (server, path) and m.superblock.first_pod in alive
                       and superblock_key(normalize(m.superblock.options).options) == superblock_key(asked)), None)
        if shared is None:
            self._devices += 1
            shared = Superblock(f"0:{self._devices}", NormalizedOptions(asked).mount_options, pod.metadata.uid)
        return SimulatedMount(pod.metadata.uid, pv.metadata.name, server, path, shared)

    def _write(self, name: str, node: Node) -> None:
        mounts = sorted(node.mounts.values(), key=lambda m: m.mount_point)
        volumes = [
            {
                "podUid": mount.pod_uid,
                "volumeName": mount.volume,
                "plugin": "nfs",
                "mountPoint": mount.mount_point,
                "fstype": "nfs4",
                "source": f"{mount.server}:{mount.path}",
                "server": mount.server,
                "export": mount.path,
                "superblock": mount.superblock.device,
                "effectiveOptions": list(mount.superblock.options),
                "optionsSource": "mountinfo",
                "sharedWith": [other.mount_point for other in mounts
                               if other is not mount and other.superblock is mount.superblock],
                "serverMounts": sum(other.server == mount.server for other in mounts),
                "connections": 1,
            }
            for mount in mounts
        ]
        if volumes == node.written:
            return
        spec = {
            "nodeName": name,
            "scanTime": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "agentVersion": AGENT_VERSION,
            "networkFstypes": ["nfs", "nfs4"],
            "volumes": volumes,
        }
        try:
            self.custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {"spec": spec})
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise
            self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeMountReport", "metadata": {"name": name},
                "spec": spec,
            })
        node.written = volumes
