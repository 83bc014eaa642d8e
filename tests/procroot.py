"""Assemble a proc root, the files the node agent reads, from real procfs samples.

The mountstats blocks are real captures (tests/fixtures/procfs/SOURCES.md and the
shared set's SOURCES.md say whose): only their mount points are rewritten, to the
kubelet paths of the pod volumes a test asks for. The mountinfo is synthesized
to match them line for line: same mount points, fstype and source, super options
derived from the ``opts:`` line as the kernel prints them (without the attribute
cache times at their defaults, with ``addr=``), and chosen superblocks, so that
some volumes share one and some do not. Mounts that share a superblock share its
statistics too, as in the kernel: they get one cloned block each, with the same
counters.

GPL samples are read from the shared directory beside the repository at run time
and written only into the directory assembled (a temporary one); never copy them
into the repository. Asking for more volumes than a sample has NFS mounts clones
its blocks in turn, which is how a benchmark gets 250 volumes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.samples import sample_path

#: MIT: 4 NFS mounts, /A (v3, nolock), /B (v4.0), /C (v3), /D (v4.2), and 26 other devices.
TELEGRAF = "mountstats-nfs3-nfs40-nfs42-telegraf.txt"
#: GPL (shared set only): 10 NFSv3 mounts over rdma with nconnect=8, 8 xprt lines each.
RDMA_NCONNECT = "mountstats-nfs3-rdma-nconnect8-pcp-el8.7.txt"
#: GPL (shared set only): one NFSv4.2 krb5p mount whose ACCESS queue counter wrapped.
KRB5P_WRAPPED = "mountstats-nfs42-krb5p-pcp.txt"
DEFAULT_LOCKS = "locks-procfs-rs.txt"
DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"

_DEVICE_LINE = re.compile(r"device (?P<device>.*?) mounted on (?P<mount_point>.*?) with fstype (?P<fstype>\S+)(?P<rest>.*)")
#: nfs_show_mount_options() leaves these out of /proc/mounts and mountinfo at their defaults.
_HIDDEN_DEFAULTS = {"acregmin": "3", "acregmax": "60", "acdirmin": "30", "acdirmax": "60"}
#: Minor numbers of the synthesized superblocks: other devices get small ones, NFS ones start here.
_FIRST_NFS_MINOR = 100




def pod_uid(name: str) -> str:
    """A stable, UUID-shaped pod UID for a test's pod name (real UIDs come from the API server)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"mountwarden-test-pod/{name}"))


@dataclass(frozen=True)
class Mount:
    """One network mount to put in the proc root.

    ``plugin``: csi, nfs or csi-staging (kubelet paths of pod volumes), subpath (a
    container's subPath bind of a pod volume) or host (``volume`` is then the mount
    point, e.g. /mnt/efs). Mounts with the same ``superblock`` label share one
    superblock; without a label a mount gets its own. ``sample_mount`` picks the
    sample's NFS mount to clone by its mount point ("/D"); by default they are
    taken in turn.
    """

    volume: str
    pod_uid: str | None = None
    plugin: str = "csi"
    superblock: str | None = None
    sample_mount: str | None = None
    driver: str = "efs.csi.aws.com"
    container: str = "app"

    def mount_point(self, kubelet_root: str) -> str:
        root = kubelet_root.rstrip("/")
        if self.plugin == "csi":
            return f"{root}/pods/{self.pod_uid}/volumes/kubernetes.io~csi/{self.volume}/mount"
        if self.plugin == "nfs":
            return f"{root}/pods/{self.pod_uid}/volumes/kubernetes.io~nfs/{self.volume}"
        if self.plugin == "csi-staging":
            handle_hash = hashlib.sha256(self.volume.encode()).hexdigest()
            return f"{root}/plugins/kubernetes.io/csi/{self.driver}/{handle_hash}/globalmount"
        if self.plugin == "subpath":
            return f"{root}/pods/{self.pod_uid}/volume-subpaths/{self.volume}/{self.container}/0"
        if self.plugin == "host":
            return self.volume
        raise ValueError(f"unknown plugin {self.plugin!r}")


@dataclass(frozen=True)
class Process:
    """A /proc/<pid> directory: cgroup, maps and stat text, and open files as fd -> target links."""

    pid: int
    cgroup: str | None = None
    maps: str | None = None
    fds: dict[int, str] = field(default_factory=dict)
    stat: str | None = None


@dataclass
class AssembledProcRoot:
    path: Path
    kubelet_root: str
    #: Mount point -> superblock ("0:101") of every network mount, in mount-table order.
    superblocks: dict[str, str]
    #: Mount point -> the sample block it was cloned from (its original mount point).
    cloned_from: dict[str, str]

    def mount_point(self, mount: Mount) -> str:
        return mount.mount_point(self.kubelet_root)


@dataclass
class _Block:
    device: str
    mount_point: str
    fstype: str
    text: str  # the whole block, device line first

    @property
    def is_nfs(self) -> bool:
        return self.fstype in ("nfs", "nfs4")

    @property
    def opts(self) -> list[str]:
        for line in self.text.split("\n")[1:]:
            label, _, value = line.strip().partition(":")
            if label == "opts":
                return [token.strip() for token in value.split(",") if token.strip()]
        return []

    def moved_to(self, mount_point: str) -> str:
        first, newline, rest = self.text.partition("\n")
        match = _DEVICE_LINE.fullmatch(first)
        assert match is not None, first
        return f"device {match['device']} mounted on {mount_point} with fstype {match['fstype']}{match['rest']}{newline}{rest}"


def _blocks(text: str) -> list[_Block]:
    """The sample's device blocks, verbatim (a block runs to the next ``device`` line)."""
    blocks: list[_Block] = []
    for line in text.split("\n"):
        match = _DEVICE_LINE.fullmatch(line.rstrip())
        if line.startswith("device") and match is not None:
            blocks.append(_Block(match["device"], match["mount_point"], match["fstype"], line))
        elif blocks:
            blocks[-1].text += "\n" + line
    for block in blocks:
        block.text = block.text.rstrip("\n")
    return blocks


def _server_address(block: _Block) -> str:
    """What the kernel prints as addr=: the source's address, else mountaddr, else a documentation address."""
    server = block.device.rpartition(":")[0].strip("[]")
    try:
        return str(ipaddress.ip_address(server))
    except ValueError:
        pass
    for token in block.opts:
        name, _, value = token.partition("=")
        if name == "mountaddr":
            return value
    digest = hashlib.sha256(server.encode()).digest()
    return f"192.0.2.{1 + digest[0] % 254}"  # TEST-NET-1 (RFC 5737)


def super_options(block: _Block) -> str:
    """Mountinfo's super options for an NFS block: its opts without hidden defaults, plus addr=."""
    kept = [token for token in block.opts if _HIDDEN_DEFAULTS.get(token.partition("=")[0]) != token.partition("=")[2]]
    return ",".join([*kept, f"addr={_server_address(block)}"])


def _mountinfo_line(mount_id: int, minor: int, mount_point: str, per_mount: str, fstype: str, source: str, super_options: str) -> str:
    # Parent 1 and a peer group per mount: the agent reads neither, real tables have both.
    return f"{mount_id} 1 0:{minor} / {mount_point} {per_mount} shared:{mount_id} - {fstype} {source} {super_options}"


def assemble_proc_root(
    directory: Path,
    mounts: Sequence[Mount],
    *,
    sample: str = TELEGRAF,
    kubelet_root: str = DEFAULT_KUBELET_ROOT,
    locks: str | None = DEFAULT_LOCKS,
    processes: Sequence[Process] = (),
    boot_id: str | None = None,
) -> AssembledProcRoot:
    """Write ``directory``/1/mountinfo, 1/mountstats, locks (and pid dirs, boot_id) for ``mounts``.

    The sample's other devices (rootfs, proc, cgroups...) come first, in both files;
    its NFS mounts are replaced by the ones asked for, in the order given.
    """
    blocks = _blocks(sample_path(sample).read_text(encoding="utf-8"))
    others = [block for block in blocks if not block.is_nfs]
    nfs = [block for block in blocks if block.is_nfs]
    if not nfs:
        raise ValueError(f"{sample} has no NFS mount to clone")

    mountstats: list[str] = []
    mountinfo: list[str] = []
    for index, block in enumerate(others):
        mountstats.append(block.text)
        mountinfo.append(_mountinfo_line(20 + index, 20 + index, block.mount_point, "rw,relatime", block.fstype,
                                         block.device, "rw"))

    superblock_minor: dict[str, int] = {}
    superblock_block: dict[str, _Block] = {}
    superblocks: dict[str, str] = {}
    cloned_from: dict[str, str] = {}
    turn = 0
    for index, mount in enumerate(mounts):
        label = mount.superblock or f"own-{index}"
        if label not in superblock_block:
            if mount.sample_mount is not None:
                chosen = [block for block in nfs if block.mount_point == mount.sample_mount]
                if not chosen:
                    raise ValueError(f"{sample} has no NFS mount on {mount.sample_mount}")
                superblock_block[label] = chosen[0]
            else:
                superblock_block[label] = nfs[turn % len(nfs)]
                turn += 1
            superblock_minor[label] = _FIRST_NFS_MINOR + len(superblock_minor)
        block = superblock_block[label]
        mount_point = mount.mount_point(kubelet_root)
        minor = superblock_minor[label]
        per_mount = ("ro" if "ro" in block.opts else "rw") + ",relatime"
        mountstats.append(block.moved_to(mount_point))
        mountinfo.append(_mountinfo_line(200 + index, minor, mount_point, per_mount, block.fstype, block.device,
                                         super_options(block)))
        superblocks[mount_point] = f"0:{minor}"
        cloned_from[mount_point] = block.mount_point

    pid_one = directory / "1"
    pid_one.mkdir(parents=True, exist_ok=True)
    (pid_one / "mountinfo").write_text("\n".join(mountinfo) + "\n", encoding="utf-8")
    (pid_one / "mountstats").write_text("\n".join(mountstats) + "\n", encoding="utf-8")
    if locks is not None:
        (directory / "locks").write_bytes(sample_path(locks).read_bytes())
    for process in processes:
        _write_process(directory, process)
    if boot_id is not None:
        random = directory / "sys" / "kernel" / "random"
        random.mkdir(parents=True, exist_ok=True)
        (random / "boot_id").write_text(boot_id + "\n")
    return AssembledProcRoot(directory, kubelet_root.rstrip("/"), superblocks, cloned_from)


def _write_process(directory: Path, process: Process) -> None:
    pid_dir = directory / str(process.pid)
    pid_dir.mkdir(parents=True, exist_ok=True)
    if process.cgroup is not None:
        (pid_dir / "cgroup").write_text(process.cgroup)
    if process.maps is not None:
        (pid_dir / "maps").write_text(process.maps)
    if process.stat is not None:
        (pid_dir / "stat").write_text(process.stat)
    fd_dir = pid_dir / "fd"
    fd_dir.mkdir(exist_ok=True)
    for number, target in process.fds.items():
        os.symlink(target, fd_dir / str(number))


def scaled_mounts(count: int, *, pods_per_volume: int = 5) -> list[Mount]:
    """``count`` CSI pod volumes: each PV used by ``pods_per_volume`` pods on one superblock (a benchmark's node)."""
    mounts = []
    for index in range(count):
        volume = f"pv-{index // pods_per_volume:04d}"
        mounts.append(Mount(volume, pod_uid=pod_uid(f"pod-{index:04d}"), superblock=volume))
    return mounts
