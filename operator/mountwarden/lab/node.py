"""A real Kubernetes node: the lab VM running containerd, runc, the CNI plugins and a kubelet.

The kubelet is built from the same k8s.io/kubernetes source as the local control plane
(hack/nodebin, shared into the VM read-only at /mnt/lab-bin); containerd, runc and the CNI
plugins are Debian's, in the node image. The VM reaches the host's API server, and nothing
else, through QEMU's user network restricted to one forward: the guest's 10.0.2.100:6443 is
the host's loopback port of the API server (a `socat` per connection, started by QEMU). Pods
mount real NFS from the kernel NFS server beside the kubelet (exports under /srv/export).

The chart's pods run here from mountwarden's own image (`import_image`: `make image`'s archive,
shared read-only at /mnt/lab-images), and need two paths a real cluster has: to the API server
through the `kubernetes` Service (no kube-proxy runs here: its ClusterIP is on the node's
loopback, forwarded by socat; no CoreDNS either: dnsmasq answers its names and no other), and
from the API server to pod IPs and the kubelet (webhooks, logs). The host's API server cannot route into the VM, as the control planes of many managed
clusters cannot route to pod IPs: like theirs (Konnectivity), its egress selector sends its
`cluster` traffic through a proxy, here tinyproxy in the VM (HTTP CONNECT), which QEMU forwards
from one loopback port of the host.

`RealNode(...).start()` boots the VM, starts the NFS server and the node, and returns once
the kubelet runs; `wait_ready` (with a Kubernetes client, in the caller) is the caller's.
"""

from __future__ import annotations

import base64
import json
import shlex
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mountwarden.lab.image import LAB_MODULES, LAB_PACKAGES, RECIPES, ImageRecipe, LabImage
from mountwarden.lab.oci import write_image
from mountwarden.lab.vm import GUEST_DIR, LabError, LabVM, start_nfs_server

#: A shell and coreutils (busybox), and sqlite3, from the VM's own Debian files (pods use imagePullPolicy: Never).
TOOLS_IMAGE = "mountwarden.local/lab-tools:1"
NODE = ImageRecipe(
    "node",
    (*LAB_PACKAGES, "containerd", "runc", "containernetworking-plugins", "busybox-static", "socat", "tinyproxy",
     "dnsmasq-base"),
    (*LAB_MODULES, "virtio_net", "overlay", "bridge"),
    tools_image=TOOLS_IMAGE,
    dir_env="MOUNTWARDEN_NODE_IMAGE_DIR",
)
RECIPES[NODE.name] = NODE
NODE_NAME = "lab-node-0"
#: QEMU's user network: the guest, its gateway, and the address forwarded to the host's API server.
NODE_IP, GATEWAY, API_SERVER_IN_GUEST = "10.0.2.15", "10.0.2.2", "10.0.2.100"
API_PORT_IN_GUEST = 6443
POD_CIDR = "10.88.0.0/16"
PAUSE_IMAGE = "mountwarden.local/pause:lab"
#: The NFS server's exports on the node (the PersistentVolumes' nfs.server is the node's loopback).
NFS_EXPORTS = ("/srv/export", "/srv/export2")
NFS_SERVER = "127.0.0.1"
KUBELET_LOG = "/var/log/kubelet.log"
#: The `kubernetes` Service's ClusterIP (the first of the service range), which the pods' in-cluster clients dial.
KUBERNETES_SERVICE_IP = "10.0.0.1"
#: The cluster's DNS, as the kubelet tells pods: it knows the `kubernetes` Service's names (kopf dials
#: kubernetes.default.svc) and nothing else.
CLUSTER_DNS_IP = "10.0.0.10"
#: Where the API server's cluster traffic enters the VM (mutual TLS, socat, in front of tinyproxy on the next port
#: of the loopback), and the ports it may reach there: the operator's webhook and the kubelet.
PROXY_PORT_IN_GUEST = 3128
PROXIED_PORTS = (9443, 10250)
#: Where the host's built images are shared in the VM (read-only), for `ctr images import`.
GUEST_IMAGES = "/mnt/lab-images"


#: The chart, as `dev-cluster up --real-node` installs it on the node (mountwarden's own image, imported).
CHART = Path(__file__).resolve().parents[3] / "charts" / "mountwarden"
CHART_RELEASE, CHART_NAMESPACE = "mountwarden", "mountwarden"


def chart_values(image: str, *, operator_replicas: int = 2) -> dict:
    """The chart's values on the real node: the imported image (no registry: never pulled), the operator's
    replicas on this node (the kwok nodes start no container) with time to start under emulation, the agent
    scanning every 5 s."""
    repository, tag = image.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        # Under TCG two replicas and the agent importing at once take minutes to start, and a replica taking a
        # rollout over on a loaded host left its liveness probe unanswered for over a minute (restarted at 62 s).
        "operator": {"nodeSelector": {"kubernetes.io/hostname": NODE_NAME}, "startupSeconds": 900,
                     "livenessSeconds": 300, "replicas": operator_replicas},
        "agent": {"interval": 5},
    }


@dataclass(frozen=True)
class NodeCredentials:
    """The kubelet's client certificate (CN system:node:<name>, O system:nodes) and the cluster's CA."""

    ca_cert: Path
    client_cert: Path
    client_key: Path


def containerd_config() -> str:
    # runc cannot pivot_root away from an initramfs root: NoPivotRoot makes it move the mount instead.
    return f"""version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        NoPivotRoot = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
"""


def cni_config() -> str:
    return json.dumps({
        "cniVersion": "0.4.0", "name": "lab", "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "loopback"},
        ]}, indent=2)


def kubelet_config() -> str:
    # The VM's root is an initramfs (no disk to measure or evict from), its memory small: no evictions,
    # no ephemeral-storage accounting, swap tolerated, and the API kept to this node's needs.
    return json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs", "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "failSwapOn": False, "resolvConf": "/etc/resolv.conf", "clusterDomain": "cluster.local",
        "clusterDNS": [CLUSTER_DNS_IP],
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": "/etc/kubernetes/ca.crt"}},
        "authorization": {"mode": "AlwaysAllow"},
        "evictionHard": {"memory.available": "0%", "nodefs.available": "0%", "imagefs.available": "0%"},
        "localStorageCapacityIsolation": False, "imageGCHighThresholdPercent": 100,
        "serializeImagePulls": False, "podCIDR": POD_CIDR, "maxPods": 50,
        "nodeStatusReportFrequency": "10s", "nodeStatusUpdateFrequency": "5s", "syncFrequency": "10s",
        "fileCheckFrequency": "5s", "volumeStatsAggPeriod": "0s",
    }, indent=2)


def kubeconfig(credentials: NodeCredentials, user: str) -> str:
    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    # The API server's certificate names localhost, not the forwarded guest address.
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {
            "server": f"https://{API_SERVER_IN_GUEST}:{API_PORT_IN_GUEST}", "tls-server-name": "localhost",
            "certificate-authority-data": data(credentials.ca_cert)}}],
        "users": [{"name": user, "user": {"client-certificate-data": data(credentials.client_cert),
                                          "client-key-data": data(credentials.client_key)}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": user}}],
    }, indent=2)


def proxy_config() -> str:
    """tinyproxy: HTTP CONNECT to the webhook and kubelet ports, nothing else, for the TLS end on the loopback."""
    ports = "".join(f"ConnectPort {port}\n" for port in PROXIED_PORTS)
    return (f"Port {PROXY_PORT_IN_GUEST + 1}\nListen 127.0.0.1\nAllow 127.0.0.1\n{ports}Timeout 600\n"
            "MaxClients 100\nLogLevel Connect\nLogFile \"/var/log/tinyproxy.log\"\nPidFile \"/run/tinyproxy.pid\"\n"
            "DisableViaHeader Yes\n")


def network_args(api_port: int, proxy_port: int | None = None) -> list[str]:
    """QEMU's user network, restricted: the guest's API server address forwarded to the host's, and (with
    ``proxy_port``) the host's loopback port of the API server's cluster egress forwarded to the proxy."""
    forwards = [f"guestfwd=tcp:{API_SERVER_IN_GUEST}:{API_PORT_IN_GUEST}-cmd:socat - TCP:127.0.0.1:{api_port}"]
    if proxy_port is not None:
        forwards.append(f"hostfwd=tcp:127.0.0.1:{proxy_port}-{NODE_IP}:{PROXY_PORT_IN_GUEST}")
    return ["-netdev", f"user,id=net0,restrict=on,net=10.0.2.0/24,{','.join(forwards)}",
            "-device", "virtio-net-pci,netdev=net0"]


@dataclass
class RealNode:
    image: LabImage
    #: hack/nodebin's output: the kubelet and the pause binary.
    node_binaries: Path
    api_port: int
    credentials: NodeCredentials
    workdir: Path
    name: str = NODE_NAME
    #: The chart's operator (two replicas) and agent, their image unpacked in containerd's tmpfs, and the pods.
    memory_mib: int = 3072
    launcher: Callable[[Sequence[str], Path], object] | None = None
    #: The host's loopback port that the API server's egress selector sends cluster traffic to.
    proxy_port: int | None = None
    #: The proxy's TLS: (the CA its clients' certificates must chain to, its certificate, its key).
    proxy_tls: tuple[Path, Path, Path] | None = None
    #: A directory of built images (mountwarden.lab.appimage's cache), shared read-only at GUEST_IMAGES.
    images_dir: Path | None = None
    vm: LabVM | None = field(default=None, init=False)

    def start(self, progress: Callable[[str], None] = lambda _: None) -> LabVM:
        if shutil.which("socat") is None:
            raise LabError("the real node's network forward needs socat on the host: apt-get install socat "
                           "(hack/lab/host-deps.sh installs it)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "io" / "node"
        config.mkdir(parents=True, exist_ok=True)
        files = {
            "containerd.toml": containerd_config(), "cni.conflist": cni_config(), "kubelet.yaml": kubelet_config(),
            "kubelet.kubeconfig": kubeconfig(self.credentials, f"system:node:{self.name}"),
            "tinyproxy.conf": proxy_config(),
        }
        for name, text in files.items():
            (config / name).write_text(text)
        write_image(config / "pause.tar", PAUSE_IMAGE, ["/pause"], [(str(self.node_binaries / "pause"), "/pause")])
        shutil.copy2(self.credentials.ca_cert, config / "ca.crt")
        if self.proxy_tls is not None:
            for source, name in zip(self.proxy_tls, ("proxy-ca.crt", "proxy.crt", "proxy.key"), strict=True):
                shutil.copy2(source, config / name)
        shares = ["-virtfs", f"local,path={self.node_binaries},mount_tag=lab-bin,security_model=none,readonly=on"]
        if self.images_dir is not None:
            shares += ["-virtfs", f"local,path={self.images_dir},mount_tag=lab-images,security_model=none,readonly=on"]
        self.vm = LabVM(self.image, memory_mib=self.memory_mib, workdir=self.workdir, launcher=self.launcher,
                        extra_args=[*network_args(self.api_port, self.proxy_port), *shares])
        progress(f"booting the real node {self.name} (QEMU, {self.vm.accelerator})")
        self.vm.start()
        progress(f"starting the NFS server on {self.name}")
        start_nfs_server(self.vm, exports=NFS_EXPORTS)
        progress(f"starting containerd and the kubelet on {self.name}")
        mounts = ["lab-bin", *(["lab-images"] if self.images_dir is not None else [])]
        self.vm.run(" && ".join(f"mkdir -p /mnt/{tag} && mount -t 9p -o trans=virtio,version=9p2000.L,ro {tag} "
                                f"/mnt/{tag}" for tag in mounts), timeout=60)
        self.vm.run(["sh", f"{GUEST_DIR}/node-up.sh", self.name, NODE_IP, GATEWAY, KUBERNETES_SERVICE_IP,
                     f"{API_SERVER_IN_GUEST}:{API_PORT_IN_GUEST}", CLUSTER_DNS_IP], timeout=900)
        return self.vm

    def import_image(self, archive: Path, timeout: float = 1800.0) -> str:
        """`ctr images import` an OCI archive from ``images_dir`` into containerd's CRI namespace (no registry).

        Returns what containerd says it imported. Pods use it with imagePullPolicy Never.
        """
        assert self.vm is not None and self.images_dir is not None, "start the node with images_dir first"
        guest_path = f"{GUEST_IMAGES}/{archive.relative_to(self.images_dir)}"
        return self.vm.run(["ctr", "-n", "k8s.io", "images", "import", guest_path], timeout=timeout).stdout

    def kubelet_log(self, lines: int = 40) -> str:
        return self._tail(KUBELET_LOG, lines)

    def _tail(self, path: str, lines: int) -> str:
        if self.vm is None or not self.vm.alive:
            return ""
        try:
            return self.vm.run(f"tail -n {int(lines)} {shlex.quote(path)}", timeout=60, check=False).stdout
        except LabError as error:
            return f"(could not read {path}: {error})"

    def stop(self) -> None:
        if self.vm is not None:
            self.vm.stop()
