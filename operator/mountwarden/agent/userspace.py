"""Find the pods' processes that talk NFS over sockets of their own (mountwarden.core.node.userspace decides).

Each network namespace's TCP table is read once (/proc/<pid>/net/tcp of any of its processes); only
when a connection to an NFS port or an EFS tunnel port is there are the namespace's processes'
descriptors read, to find who holds it. Reading another process's ns/net and fd links needs the same
access as the SQLite scan (CAP_SYS_PTRACE for other users' processes), so it runs with it.
"""

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.api.nodemountreport import UserspaceNfsClient
from mountwarden.core.node.userspace import SocketOwner, is_nfs_endpoint, userspace_clients


def scan_userspace_clients(proc: ProcRoot) -> list[UserspaceNfsClient]:
    pids_of: dict[str, list[int]] = {}
    for pid in proc.pids():
        namespace = proc.net_namespace(pid)
        if namespace is not None:
            pids_of.setdefault(namespace, []).append(pid)
    sockets, owners = [], {}
    for pids in pids_of.values():
        candidates = [s for s in proc.net_tcp(pids[0]).sockets if s.inode and is_nfs_endpoint(s)]
        if not candidates:
            continue
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
    return [UserspaceNfsClient(pid=c.pid, command=c.command, pod_uid=c.pod_uid, container_id=c.container_id,
                               remote=c.remote, message=c.message)
            for c in userspace_clients(sockets, owners)]
