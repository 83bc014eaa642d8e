"""Userspace NFS clients: a pod's process that talks NFS over a socket of its own, with no kernel mount behind it.

The kernel NFS client's transports are sockets no process holds (inode 0 in /proc/net/tcp, no
/proc/<pid>/fd link), so an established connection to the NFS port held by a pod's process is an NFS
client in user space (libnfs and its tools, a language's NFS library). mountwarden audits mounts: such
a client has none, so its options, its caching and its server's health are beyond what mountwarden can
check, and none of its findings can speak for it (the NFS client benchmark among the studies this project
was built from measured such a client: in user space, over TLS).

EFS mounted over TLS: mount.efs points the kernel at a local tunnel (stunnel or efs-proxy) on 127.0.0.1,
ports 20049 to 21049 by default (amazon-efs-utils, efs-utils.conf port_range_lower_bound and
port_range_upper_bound); the tunnel process holds the connection to port 2049 on the kernel's behalf and
is not a client. A pod's process connected to the tunnel's port is a userspace client through it.

The tunnel's own sockets say where a TLS mount's bytes really go (``tls_tunnels``): the process that
listens on the mount's local port (its ``port=``) holds the connection to the mount target on 2049.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mountwarden.core.findings import Finding, Reason, Severity
from mountwarden.core.procfs.tcp import TcpSocket

NFS_PORT = 2049
EFS_TUNNEL_PORTS = range(20049, 21050)
#: The processes of efs-utils' TLS tunnel: they carry the kernel's own NFS traffic.
TUNNEL_COMMANDS = frozenset({"stunnel", "stunnel4", "stunnel5", "efs-proxy"})
LOOPBACK = frozenset({"127.0.0.1", "::1"})

REMEDY = ("Mount the share as a volume (a PersistentVolumeClaim of a StorageProfile's class) so that its options are "
          "declared and checked on the node; or accept that this client is outside mountwarden's audit and "
          "configure its caching and timeouts in the application.")


def is_nfs_endpoint(socket: TcpSocket) -> bool:
    """An established connection to an NFS server, or to an EFS TLS tunnel's local port."""
    if socket.state != "ESTABLISHED":
        return False
    return socket.remote_port == NFS_PORT or (socket.remote_address in LOOPBACK
                                              and socket.remote_port in EFS_TUNNEL_PORTS)


@dataclass(frozen=True, slots=True)
class SocketOwner:
    """The process holding a socket, and its pod (from its cgroup)."""

    pid: int
    command: str
    pod_uid: str | None = None
    container_id: str | None = None


@dataclass(frozen=True, slots=True)
class UserspaceClient:
    pid: int
    command: str
    pod_uid: str
    container_id: str | None
    remote: str
    #: namespace/name, when the agent knows the pod.
    pod: str | None = None

    @property
    def through_tunnel(self) -> bool:
        return not self.remote.endswith(f":{NFS_PORT}")

    @property
    def message(self) -> str:
        what = "an EFS TLS tunnel" if self.through_tunnel else "an NFS server"
        return (f"process {self.pid} ({self.command}) of pod {self.pod or self.pod_uid} talks NFS to {what} at {self.remote} "
                "over a socket of its own, with no kernel NFS mount: a client in user space, whose options, "
                "caching and server health mountwarden cannot audit.")

    def finding(self) -> Finding:
        return Finding(Reason.USERSPACE_NFS_CLIENT, Severity.WARNING, self.message, REMEDY,
                       evidence={"pid": str(self.pid), "command": self.command, "remote": self.remote})


def userspace_clients(sockets: Iterable[TcpSocket], owners: Mapping[int, SocketOwner]) -> list[UserspaceClient]:
    """The NFS connections that pods' processes hold themselves; ``owners`` maps a socket inode to its process."""
    found = {}
    for socket in sockets:
        owner = owners.get(socket.inode) if socket.inode else None
        if (owner is None or owner.pod_uid is None or owner.command in TUNNEL_COMMANDS
                or not is_nfs_endpoint(socket)):
            continue
        found[(owner.pid, socket.remote)] = UserspaceClient(owner.pid, owner.command, owner.pod_uid,
                                                            owner.container_id, socket.remote)
    return sorted(found.values(), key=lambda client: (client.pod_uid, client.pid, client.remote))


@dataclass(frozen=True, slots=True)
class TlsTunnel:
    """An EFS TLS tunnel: the local port a mount talks to, and the server address the tunnel is connected to."""

    local_port: int
    remote_address: str
    pid: int
    command: str


def tls_tunnels(sockets: Iterable[TcpSocket], owners: Mapping[int, SocketOwner]) -> list[TlsTunnel]:
    """Each tunnel process's loopback listening ports, paired with the one server it is connected to on 2049.

    A process connected to several servers at once cannot say which listener goes where: it is left out.
    """
    ports: dict[SocketOwner, set[int]] = defaultdict(set)
    servers: dict[SocketOwner, set[str]] = defaultdict(set)
    for socket in sockets:
        owner = owners.get(socket.inode) if socket.inode else None
        if owner is None or owner.command not in TUNNEL_COMMANDS:
            continue
        if socket.state == "LISTEN" and socket.local_address in LOOPBACK:
            ports[owner].add(socket.local_port)
        elif socket.state == "ESTABLISHED" and socket.remote_port == NFS_PORT:
            servers[owner].add(socket.remote_address)
    found = [TlsTunnel(port, next(iter(servers[owner])), owner.pid, owner.command)
             for owner, listening in ports.items() if len(servers.get(owner, ())) == 1 for port in listening]
    return sorted(found, key=lambda tunnel: tunnel.local_port)
