"""Read the NFS sockets that processes hold themselves (mountwarden.core.node.userspace decides what they are).

Two things are found this way: the pods' processes that talk NFS over sockets of their own (userspace
clients), and the EFS TLS tunnels with the mount target each is connected to (where a TLS mount's bytes
go, for the zone check).

Each network namespace's TCP table is read once (/proc/<pid>/net/tcp of any of its processes); only
when a connection to an NFS port or an EFS tunnel port is there are the namespace's processes'
descriptors read, to find who holds it. Reading another
process's ns/net and fd links needs the same access as the SQLite scan (CAP_SYS_PTRACE for other users'
processes), so it runs with it.
"""

from dataclasses import dataclass

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.api.nodemountreport import TlsTunnelReport, UserspaceNfsClient
from mountwarden.core.node.userspace import (
    LOOPBACK,
    SocketOwner,
    is_nfs_endpoint,
    tls_tunnels,
    userspace_clients,
)
from mountwarden.core.procfs.tcp import TcpSocket


@dataclass(frozen=True)
class NfsSockets:
    clients: list[UserspaceNfsClient]
    tunnels: list[TlsTunnelReport]


def _tunnel_socket(socket: TcpSocket) -> bool:
    return socket.state == "LISTEN" and socket.local_address in LOOPBACK


def scan_nfs_sockets(proc: ProcRoot) -> NfsSockets:
    pids_of: dict[str, list[int]] = {}
    for pid, _ in proc.user_processes():
        namespace = proc.net_namespace(pid)
        if namespace is not None:
            pids_of.setdefault(namespace, []).append(pid)
    sockets, owners = [], {}
    for pids in pids_of.values():
        table = [s for s in proc.net_tcp(pids[0]).sockets if s.inode]
        connections = [s for s in table if is_nfs_endpoint(s)]
        if not connections:
            continue
        candidates = connections + [s for s in table if _tunnel_socket(s)]
        sockets += candidates
        wanted = {f"socket:[{s.inode}]": s.inode for s in candidates}
        for pid in pids:
            held = [wanted[target] for target in proc.open_files(pid).values() if target in wanted]
            if held:
                cgroup = proc.cgroup(pid)
                pod = cgroup.pod if cgroup is not None else None
                owner = SocketOwner(pid, proc.command(pid) or "?", pod.pod_uid if pod else None,
                                    pod.container_id if pod else None)
                owners.update(dict.fromkeys(held, owner))
    clients = [UserspaceNfsClient(pid=c.pid, command=c.command, pod_uid=c.pod_uid, container_id=c.container_id,
                                  remote=c.remote, message=c.message)
               for c in userspace_clients(sockets, owners)]
    tunnels = [TlsTunnelReport(local_port=t.local_port, remote_address=t.remote_address, pid=t.pid, command=t.command)
               for t in tls_tunnels(sockets, owners)]
    return NfsSockets(clients, tunnels)
