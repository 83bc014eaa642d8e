"""A node's NFS client, simulated as the kernel lab measured it, and the /proc it prints.

`NodeKernel` follows the rules measured in the kernel lab (docs/reference/kernel-behaviour.md,
kernel_facts.json), and tests/kernel/test_simulator_replay.py replays the same mount sequences
in the lab and here and compares what both print:

- a mount joins an existing superblock when it goes through the same NFS client (server
  address, version, transport), is of the same file system (what the server names by its fsid:
  two paths of one export share; EFS is one file system per DNS name), neither says
  nosharecache, and the options the kernel compares are equal
  (mountwarden.core.options.normalize.superblock_key: NFSv3 compares nolock/local_lock, NFSv4
  ignores them); it then runs with the superblock's options, which its first mount set;
- a superblock lives while any mount holds it, and the NFS client while any superblock uses it;
  nconnect and max_connect are the client's, fixed by its first mount;
- the per-mount VFS flags (ro, nosuid, nodev, noexec, the atime flags) stay each mount's own;
- mountinfo and mountstats print the options as fs/nfs/super.c does: in its order, mountinfo
  without the attribute-cache times at their defaults, neither with cto, lookupcache=all, lock
  or sharecache, NFSv4 with local_lock=none whatever was asked.

`ProcRootSimulator` drives one NodeKernel per kwok node from the API (a pod's NFS volume is
mounted, with its PV's options of that moment, once the pod has started; it is unmounted once the
pod object is gone, as a real kubelet removes it only after unmounting its volumes) and writes
each node's proc root (``<root>/<node>/1/mountinfo``, ``1/mountstats``, ``locks``,
``sys/kernel/osrelease``) plus, for the volumes asked for, a process holding a SQLite lock. Real
`mountwarden agent` processes scan those proc roots (e2e); tests/nodesim.py runs the agent's own
code over them in-process.
"""

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes

from mountwarden.core.options.normalize import (
    canonical_sort,
    kernel_io_size,
    normalize,
    superblock_key,
    with_kernel_defaults,
)
from mountwarden.core.options.syntax import parse_option_tokens
from mountwarden.core.options.table import ATTRIBUTE_CACHE_TIMES, OptionValue

KERNEL_RELEASE = "6.1.0-57-amd64"
KUBELET_ROOT = "/var/lib/kubelet"
#: The lab's knfsd and EFS both offer 1 MiB (kernel lab: max_block_size).
SERVER_MAX_IO = 1024 * 1024
#: SQLite's SHARED lock range: a reader holds it for as long as its transaction is open.
SQLITE_SHARED = "1073741826 1073742335"
_BASE_MOUNTINFO = ("1 0 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
                   "22 1 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw\n")
#: nfs_show_mount_options() leaves these out of mountinfo at their defaults (mountstats prints them).
_AC_DEFAULTS = {"acregmin": 3, "acregmax": 60, "acdirmin": 30, "acdirmax": 60}
#: The flags nfs_show_mount_options() prints, in its order (fs/nfs/super.c, nfs_info[]).
_PRINTED_FLAGS = ("soft", "softerr", "softreval", "posix", "nocto", "noac", "nolock", "noacl", "nordirplus",
                  "nosharecache", "noresvport")
#: Options the kernel accepts and keeps nowhere it prints (kernel lab): nothing to simulate.
_INVISIBLE = frozenset({"dirsync", "lazytime", "intr", "context", "namlen"})
#: The mount's own VFS flags (fs/proc_namespace.c, mnt_opts[], in order after ro/rw).
_MOUNT_FLAGS = ("nosuid", "nodev", "noexec", "noatime", "nodiratime", "relatime")
#: Operations per protocol in a mountstats block, in the kernel's order (a lab capture each).
def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_OPERATIONS = {
    "4": _words("NULL READ WRITE COMMIT OPEN OPEN_CONFIRM OPEN_NOATTR OPEN_DOWNGRADE CLOSE SETATTR FSINFO RENEW "
          "SETCLIENTID SETCLIENTID_CONFIRM LOCK LOCKT LOCKU ACCESS GETATTR LOOKUP LOOKUP_ROOT REMOVE RENAME LINK "
          "SYMLINK CREATE PATHCONF STATFS READLINK READDIR SERVER_CAPS DELEGRETURN GETACL SETACL FS_LOCATIONS "
          "RELEASE_LOCKOWNER SECINFO FSID_PRESENT EXCHANGE_ID CREATE_SESSION DESTROY_SESSION SEQUENCE "
          "GET_LEASE_TIME RECLAIM_COMPLETE LAYOUTGET GETDEVICEINFO LAYOUTCOMMIT LAYOUTRETURN SECINFO_NO_NAME "
          "TEST_STATEID FREE_STATEID GETDEVICELIST BIND_CONN_TO_SESSION DESTROY_CLIENTID SEEK ALLOCATE DEALLOCATE "
          "LAYOUTSTATS CLONE COPY OFFLOAD_CANCEL LOOKUPP LAYOUTERROR COPY_NOTIFY GETXATTR SETXATTR LISTXATTRS "
          "REMOVEXATTR READ_PLUS"),
    "3": _words("NULL GETATTR SETATTR LOOKUP ACCESS READLINK READ WRITE CREATE MKDIR SYMLINK MKNOD REMOVE RMDIR RENAME "
          "LINK READDIR READDIRPLUS FSSTAT FSINFO PATHCONF COMMIT"),
}


class MountRefused(Exception):
    """The kernel (or mount.nfs) would refuse these options: the kubelet's mount fails."""


def server_address(server: str) -> str:
    """The address a server name resolves to: itself if it is one, else one of TEST-NET-1 (RFC 5737)."""
    parts = server.split(".")
    if len(parts) == 4 and all(part.isdigit() for part in parts):
        return server
    return f"192.0.2.{1 + hashlib.sha256(server.encode()).digest()[0] % 254}"


def one_file_system_per_server(server: str, _path: str) -> str:
    """EFS: every path of one DNS name is one file system (one fsid), so all of them can share a superblock."""
    return server


@dataclass
class Client:
    """An nfs_client: what the first mount of a server through it asked of the connections."""

    key: tuple[str, str, str, str]
    nconnect: int
    max_connect: int
    superblocks: list["Superblock"] = field(default_factory=list)


@dataclass
class Superblock:
    device: tuple[int, int]
    client: Client
    file_system: str
    #: What the kernel holds for it, set by its first mount (canonical names; see kernel_view()).
    held: dict[str, OptionValue]
    mounts: list["Mount"] = field(default_factory=list)

    @property
    def major_minor(self) -> str:
        return f"{self.device[0]}:{self.device[1]}"


@dataclass
class Mount:
    mount_id: int
    mount_point: str
    source: str
    superblock: Superblock
    #: ro and the VFS flags that are the mount's own.
    read_only: bool
    flags: tuple[str, ...]
    #: Scans of the node since the mount was made: mountstats' age, in the simulator's ticks.
    age: int = 0


def kernel_view(asked: Mapping[str, OptionValue], *, noac: bool, server_max: int,
                highest_v4: str) -> dict[str, OptionValue]:
    """The options a new superblock gets from its first mount's (canonical names), as the kernel holds them.

    Sizes as negotiated, versions as mount.nfs settles them, what NFSv4 ignores dropped, the defaults
    filled in: superblock_key() compares these, and _options() prints them as the kernel does.
    """
    version = str(asked.get("vers", "4"))
    if version == "4":
        version = highest_v4  # mount.nfs negotiates the highest minor version both sides speak
    v3 = version == "3"
    held: dict[str, OptionValue] = with_kernel_defaults({name: value for name, value in asked.items()
                                                         if name not in ("lock", "local_lock", "acl")})
    held["vers"] = version
    for name in ("rsize", "wsize"):
        held[name] = kernel_io_size(int(asked[name]), server_max) if name in asked else server_max
    if noac:
        held["ac"] = False  # NFS_MOUNT_NOAC: printed, and compared, apart from the times and sync it implies
    # NFSv4 ignores nolock, local_lock and noacl (kernel lab); NFSv3's nolock means local_lock=all.
    if v3:
        held["lock"] = asked.get("lock", True)
        held["local_lock"] = "all" if held["lock"] is False else asked.get("local_lock", "none")
        held["acl"] = asked.get("acl", True)
        held.setdefault("mountproto", "udp")
    else:
        held["local_lock"] = "none"
    return canonical_sort(held)


class NodeKernel:
    """One node's NFS client state: its mounts, superblocks and clients, and the /proc it prints."""

    def __init__(self, *, file_system_of: Callable[[str, str], str] = one_file_system_per_server,
                 server_max: int = SERVER_MAX_IO, highest_v4: str = "4.1", client_address: str = "198.51.100.7",
                 mountd_port: int = 20048, first_minor: int = 50) -> None:
        self.file_system_of = file_system_of
        self.server_max = server_max
        self.highest_v4 = highest_v4
        self.client_address = client_address
        self.mountd_port = mountd_port
        self.first_minor = first_minor
        self.clients: list[Client] = []
        self.mounts: list[Mount] = []

    # -- the kernel's rules --------------------------------------------------------------------

    def mount(self, source: str, options: str | Iterable[str] | None, mount_point: str) -> Mount:
        """mount -t nfs -o OPTIONS SOURCE MOUNT_POINT, as the kernel lab measured it."""
        parsed = normalize(options)
        if parsed.errors:
            raise MountRefused("; ".join(problem.message for problem in parsed.errors))
        asked = {name: value for name, value in parsed.options.items() if name not in _INVISIBLE}
        noac = [name for name, _ in parse_option_tokens(options) if name in ("ac", "noac")][-1:] == ["noac"]
        server, _, path = source.partition(":")
        held = kernel_view(asked, noac=noac, server_max=self.server_max, highest_v4=self.highest_v4)
        client = self._client(server, held, asked)
        file_system = self.file_system_of(server, path)
        superblock = None
        if held.get("sharecache", True):  # nosharecache: never an existing superblock, nor later a shared one
            key = superblock_key(held)
            superblock = next((existing for existing in client.superblocks
                               if existing.file_system == file_system and existing.held.get("sharecache", True)
                               and superblock_key(existing.held) == key), None)
        if superblock is None:
            superblock = Superblock((0, self._free(s.device[1] for c in self.clients for s in c.superblocks)),
                                    client, file_system, held)
            client.superblocks.append(superblock)
        flags = tuple(flag for flag in _MOUNT_FLAGS if _mount_flag(asked, flag))
        mount = Mount(self._free((m.mount_id for m in self.mounts), first=100), mount_point, source, superblock,
                      bool(asked.get("ro")) or bool(superblock.held.get("ro")), flags)
        superblock.mounts.append(mount)
        self.mounts.append(mount)
        return mount

    def umount(self, mount_point: str) -> None:
        """The mount on top at ``mount_point`` goes; its superblock with its last mount, the client with its last."""
        mount = next(m for m in reversed(self.mounts) if m.mount_point == mount_point)
        self.mounts.remove(mount)
        superblock = mount.superblock
        superblock.mounts.remove(mount)
        if not superblock.mounts:
            superblock.client.superblocks.remove(superblock)
            if not superblock.client.superblocks:
                self.clients.remove(superblock.client)

    def _client(self, server: str, held: Mapping[str, OptionValue], asked: Mapping[str, OptionValue]) -> Client:
        # nfs_match_client: the address (and port), the version and minor version, the transport.
        key = (server_address(server), str(held["vers"]), "tcp", str(held.get("port") or ""))
        found = next((client for client in self.clients if client.key == key), None)
        if found is None:
            found = Client(key, int(asked.get("nconnect", 0)), int(asked.get("max_connect", 1)))
            self.clients.append(found)
        return found

    def _free(self, used: Iterable[int], first: int | None = None) -> int:
        """The lowest number not in use, as the kernel's ida hands out anonymous minors and mount IDs."""
        taken = set(used)
        number = self.first_minor if first is None else first
        while number in taken:
            number += 1
        return number

    def tick(self) -> None:
        for mount in self.mounts:
            mount.age += 1

    # -- /proc, as the kernel prints it ------------------------------------------------------------

    def mountinfo(self) -> str:
        lines = [_BASE_MOUNTINFO.rstrip("\n")]
        for mount in self.mounts:
            per_mount = ",".join(["ro" if mount.read_only else "rw", *mount.flags])
            fstype = "nfs" if str(mount.superblock.held["vers"]) == "3" else "nfs4"
            lines.append(f"{mount.mount_id} 1 {mount.superblock.major_minor} / {mount.mount_point} {per_mount} "
                         f"shared:{mount.mount_id} - {fstype} {mount.source} {self.super_options(mount.superblock)}")
        return "\n".join(lines) + "\n"

    def super_options(self, superblock: Superblock) -> str:
        """mountinfo's last field: the superblock's flags, nfs_show_mount_options() without defaults, addr=."""
        server = superblock.client.key[0]
        return ",".join([*self._options(superblock, show_defaults=False), f"addr={server}"])

    def mountstats_options(self, superblock: Superblock) -> str:
        """mountstats' opts: line: nfs_show_mount_options() with every default."""
        return ",".join(self._options(superblock, show_defaults=True))

    def _options(self, superblock: Superblock, *, show_defaults: bool) -> list[str]:
        """nfs_show_mount_options() (fs/nfs/super.c, Linux 6.1), after the superblock's ro/rw and sync."""
        held, client = superblock.held, superblock.client
        version = str(held["vers"])
        printed = ["ro" if held.get("ro") else "rw"]
        if held.get("sync"):
            printed.append("sync")
        printed += [f"vers={version}", f"rsize={held['rsize']}", f"wsize={held['wsize']}"]
        if held.get("bsize"):
            printed.append(f"bsize={held['bsize']}")
        printed.append("namlen=255")
        printed += [f"{name}={held[name]}" for name in ATTRIBUTE_CACHE_TIMES
                    if show_defaults or held[name] != _AC_DEFAULTS[name]]
        if not (held.get("soft") or held.get("softerr")):
            printed.append("hard")
        flags = {"soft": held.get("soft"), "softerr": held.get("softerr"), "softreval": held.get("softreval"),
                 "posix": held.get("posix"), "nocto": held.get("cto") is False, "noac": held.get("ac") is False,
                 "nolock": held.get("lock") is False, "noacl": held.get("acl") is False,
                 "nordirplus": held.get("rdirplus") is False, "nosharecache": held.get("sharecache") is False,
                 "noresvport": held.get("resvport") is False}
        printed += [flag for flag in _PRINTED_FLAGS if flags[flag]]
        printed.append("proto=tcp")
        if client.nconnect:
            printed.append(f"nconnect={client.nconnect}")
        port = held.get("port")
        if version != "3":
            if client.max_connect > 1:
                printed.append(f"max_connect={client.max_connect}")
            if port not in (None, 2049):
                printed.append(f"port={port}")
        elif port:
            printed.append(f"port={port}")
        printed += [f"timeo={held['timeo']}", f"retrans={held['retrans']}", "sec=sys"]
        if version == "3":
            printed += [f"mountaddr={client.key[0]}", "mountvers=3", f"mountport={self.mountd_port}",
                        f"mountproto={held['mountproto']}"]
        else:
            printed.append(f"clientaddr={self.client_address}")
        if held.get("fsc"):
            printed.append("fsc")
        if held.get("lookupcache", "all") != "all":
            printed.append("lookupcache=none" if held["lookupcache"] == "none" else "lookupcache=pos")
        printed.append(f"local_lock={held['local_lock']}")
        if held.get("write", "lazy") != "lazy":
            printed.append(f"write={held['write']}")
        return printed

    def mountstats(self) -> str:
        blocks = [_ROOT_STATS]
        for mount in self.mounts:
            blocks.append(self._block(mount))
        return "".join(blocks)

    def _block(self, mount: Mount) -> str:
        superblock = mount.superblock
        version = str(superblock.held["vers"])
        major = version.split(".")[0]
        fstype = "nfs" if major == "3" else "nfs4"
        lines = [f"device {mount.source} mounted on {mount.mount_point} with fstype {fstype} statvers=1.1",
                 f"\topts:\t{self.mountstats_options(superblock)}", f"\tage:\t{mount.age}"]
        if major == "4":
            lines.append("\timpl_id:\tname='',domain='',date='0,0'")
            lines.append("\tcaps:\tcaps=0xc003c0bf,wtmult=512,dtsize=1048576,bsize=0,namlen=255")
            lines.append("\tnfsv4:\tbm0=0xfdffbfff,bm1=0x40fdbe3e,bm2=0x803,acl=0x3,sessions,pnfs=not configured,"
                         "lease_time=10,lease_expired=0")
        else:
            lines.append("\tcaps:\tcaps=0xf,wtmult=4096,dtsize=1048576,bsize=0,namlen=255")
        lines += ["\tsec:\tflavor=1,pseudoflavor=1", "\tevents:\t" + "0 " * 27, "\tbytes:\t" + "0 " * 8,
                  f"\tRPC iostats version: 1.1  p/v: 100003/{major} (nfs)"]
        lines += ["\txprt:\ttcp 0 0 2 0 0 132 132 0 132 0 2 0 0"] * max(1, superblock.client.nconnect)
        lines.append("\tper-op statistics")
        lines += [f"\t{name:>12}: 0 0 0 0 0 0 0 0 0" for name in _OPERATIONS[major]]
        return "\n".join(lines) + "\n\n"


#: The first blocks of every node's mountstats: the root and /proc, which are not NFS.
_ROOT_STATS = ("device /dev/vda mounted on / with fstype ext4\n"
               "device proc mounted on /proc with fstype proc\n")


def _mount_flag(asked: Mapping[str, OptionValue], flag: str) -> bool:
    if flag == "relatime":
        return not asked.get("noatime") and not asked.get("strictatime")
    if flag in ("nosuid", "nodev", "noexec"):
        return asked.get(flag.removeprefix("no")) is False
    return bool(asked.get(flag))


# -- the kwok nodes' kernels, driven from the API ---------------------------------------------------


@dataclass
class NodeState:
    kernel: NodeKernel
    #: (pod UID, PV name) -> mount point of the pod's mounted volumes.
    volumes: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Mount failures, as the kubelet would report them in the pod's events.
    refused: dict[tuple[str, str], str] = field(default_factory=dict)
    written: object = None


class ProcRootSimulator:
    """Start with .start(), stop with .stop(); .errors collects what went wrong in the thread."""

    def __init__(self, api_client: kubernetes.client.ApiClient, nodes: Sequence[str], root: Path, *,
                 sqlite_volumes: Iterable[str] = frozenset(), interval: float = 0.3,
                 file_system_of: Callable[[str, str], str] = one_file_system_per_server) -> None:
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.root = Path(root)
        self.sqlite_volumes = set(sqlite_volumes)
        self.nodes = {name: NodeState(NodeKernel(file_system_of=file_system_of,
                                                 client_address=f"198.51.100.{10 + index}"))
                      for index, name in enumerate(nodes)}
        self.interval = interval
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="procsim", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def proc_root(self, node: str) -> Path:
        return self.root / node

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as error:  # keep simulating; the tests see the errors
                self.errors.append(error)
            self._stop.wait(self.interval)

    def tick(self) -> None:
        # Pods first, then their claims and PVs: a PV read after the pod was seen has every change made before the
        # pod was created, as the kubelet's read at mount time has. Read the other way round, a replica created by
        # a restart could be mounted with the options its PV had before the patch that preceded the restart (a
        # loaded CI run: the rollout then rightly paused on a superblock no real node would have made).
        pods = [pod for pod in self.core.list_pod_for_all_namespaces().items if pod.spec.node_name in self.nodes]
        claims = {(c.metadata.namespace, c.metadata.name): c.spec.volume_name
                  for c in self.core.list_persistent_volume_claim_for_all_namespaces().items}
        volumes = {pv.metadata.name: pv for pv in self.core.list_persistent_volume().items}
        present = {pod.metadata.uid for pod in pods}
        for state in self.nodes.values():
            state.kernel.tick()
            # A real kubelet deletes a pod object only once it has unmounted the pod's volumes.
            for key in [key for key in state.volumes if key[0] not in present]:
                state.kernel.umount(state.volumes.pop(key))
        # Oldest first, so that of two pods that appear in one tick the older mounts first.
        for pod in sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name)):
            if pod.status.start_time is None or pod.metadata.deletion_timestamp is not None:
                continue  # the kubelet mounts volumes once it has taken the pod on, and not while it stops it
            state = self.nodes[pod.spec.node_name]
            for volume in pod.spec.volumes or []:
                if volume.persistent_volume_claim is None:
                    continue
                pv = volumes.get(claims.get((pod.metadata.namespace, volume.persistent_volume_claim.claim_name)))
                key = (pod.metadata.uid, pv.metadata.name) if pv is not None else None
                if pv is None or pv.spec.nfs is None or key in state.volumes or key in state.refused:
                    continue
                # The in-tree NFS plugin's directory is named after the PV (the pod's volume spec name).
                point = f"{KUBELET_ROOT}/pods/{pod.metadata.uid}/volumes/kubernetes.io~nfs/{pv.metadata.name}"
                try:
                    state.kernel.mount(f"{pv.spec.nfs.server}:{pv.spec.nfs.path}", pv.spec.mount_options, point)
                except MountRefused as error:
                    state.refused[key] = str(error)
                    continue
                state.volumes[key] = point
        for name, state in self.nodes.items():
            self._write(name, state)

    def _write(self, name: str, state: NodeState) -> None:
        kernel = state.kernel
        # Rewritten when the mount table changes (mountstats' ages and counters move on in between, unread).
        mounts = [(m.mount_id, m.mount_point, m.superblock.major_minor) for m in kernel.mounts]
        if state.written == mounts:
            return
        directory = self.proc_root(name)
        (directory / "1").mkdir(parents=True, exist_ok=True)
        (directory / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
        locks = [self._sqlite_lock(directory, number, mount) for number, mount in
                 enumerate((m for m in kernel.mounts if m.mount_point.rsplit("/", 1)[-1] in self.sqlite_volumes),
                           start=1)]
        _atomic(directory / "sys" / "kernel" / "osrelease", KERNEL_RELEASE + "\n")
        _atomic(directory / "locks", "".join(locks))
        _atomic(directory / "1" / "mountstats", kernel.mountstats())
        _atomic(directory / "1" / "mountinfo", kernel.mountinfo())  # last: the agent wakes on its change
        state.written = mounts
        self.written(name, state)

    def written(self, name: str, state: NodeState) -> None:
        """Called once a node's proc root changed (nodesim scans it then)."""

    def _sqlite_lock(self, directory: Path, number: int, mount: Mount) -> str:
        """A process of the pod holding a SQLite read lock on the volume, and its cgroup."""
        pid = 7000 + number
        major, minor = mount.superblock.device
        pod_uid = mount.mount_point.split("/pods/", 1)[1].split("/", 1)[0]
        (directory / str(pid)).mkdir(exist_ok=True)
        cgroup = ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
                  f"{pod_uid.replace('-', '_')}.slice/cri-containerd-{'a' * 64}.scope\n")
        (directory / str(pid) / "cgroup").write_text(cgroup)
        return f"{number}: POSIX  ADVISORY  READ  {pid} {major:02x}:{minor:02x}:4242 {SQLITE_SHARED}\n"


def _atomic(path: Path, text: str) -> None:
    # An agent may read at any moment: never let it see half a file.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)
