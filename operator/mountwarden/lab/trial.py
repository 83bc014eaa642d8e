"""`mountwarden lab try`: what a real kernel makes of mount options.

In a fresh VM, the export is mounted once per options string, in the order given, at
the kubelet's in-tree NFS layout (so the node agent's own scan treats each mount as a
pod volume); then mountwarden's scan of the live /proc reports, for each mount, what it
asked for, what is in effect (mountstats), what mountinfo shows, its superblock and the
earlier mount it shares it with, its transports, and the findings. A mount the kernel
refuses is reported with mount.nfs's and the kernel's own words.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mountwarden.lab.livescan import mount_point
from mountwarden.lab.vm import GUEST_IO, GUEST_PYTHON_ENV, LabVM, start_nfs_server

SERVER_EXPORT = "127.0.0.1:/srv/export"
PROC_FILES = {"mountinfo": "/proc/self/mountinfo", "mountstats": "/proc/self/mountstats", "locks": "/proc/locks"}


@dataclass
class TriedMount:
    index: int
    asked: str
    mount_point: str
    mounted: bool
    error: str | None = None
    effective: list[str] = field(default_factory=list)
    mountinfo_options: list[str] = field(default_factory=list)
    superblock: str | None = None
    shares_superblock_with: int | None = None
    transports: int | None = None
    findings: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "index": self.index, "asked": self.asked, "mount_point": self.mount_point, "mounted": self.mounted,
            "error": self.error, "effective": self.effective, "mountinfo_options": self.mountinfo_options,
            "superblock": self.superblock, "shares_superblock_with": self.shares_superblock_with,
            "transports": self.transports, "findings": self.findings,
        }


@dataclass
class Trial:
    kernel: str
    server_max_io: int
    mounts: list[TriedMount]
    boot_seconds: float | None = None

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "server_max_io": self.server_max_io,
                "mounts": [mount.to_dict() for mount in self.mounts]}

    @property
    def refused(self) -> list[TriedMount]:
        return [mount for mount in self.mounts if not mount.mounted]

    @property
    def has_findings(self) -> bool:
        return any(mount.findings for mount in self.mounts)


def try_options(
    vm: LabVM,
    options: Sequence[str],
    *,
    server_max_io: int = 1024 * 1024,
    out: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Trial:
    progress("starting the NFS server")
    start_nfs_server(vm, max_block_size=server_max_io)
    offered = int(vm.read_text("/proc/fs/nfsd/max_block_size").strip())
    mounts = []
    for index, asked in enumerate(options):
        progress(f"mount {index}: -o {asked}")
        mounts.append(_mount(vm, index, asked))
    mounted = {mount.mount_point: mount for mount in mounts if mount.mounted}
    if mounted:
        progress("scanning the live /proc")
        scanned = vm.run(["python3", "-m", "mountwarden.lab.livescan"], input=json.dumps(
            {mount.mount_point: mount.asked for mount in mounted.values()}), timeout=300,
            env=GUEST_PYTHON_ENV).json()["mounts"]
        first_by_superblock: dict[str, int] = {}
        for mount in mounts:
            seen = scanned.get(mount.mount_point)
            if seen is None:
                continue
            mount.effective = seen["effective"]
            mount.mountinfo_options = seen["mountinfo_options"]
            mount.superblock = seen["superblock"]
            mount.transports = seen["transports"]
            mount.findings = seen["findings"]
            mount.shares_superblock_with = first_by_superblock.setdefault(mount.superblock, mount.index)
            if mount.shares_superblock_with == mount.index:
                mount.shares_superblock_with = None
    if out is not None:
        _keep_proc_files(vm, out)
    return Trial(kernel=vm.kernel_release, server_max_io=offered, mounts=mounts, boot_seconds=vm.boot_seconds)


def _mount(vm: LabVM, index: int, asked: str) -> TriedMount:
    where = mount_point(index)
    # dmesg is cleared first so that the kernel's own complaint about this mount can be quoted.
    script = (f"mkdir -p {shlex.quote(where)} && dmesg --clear && "
              f"mount -t nfs -o {shlex.quote(asked)} {SERVER_EXPORT} {shlex.quote(where)}; "
              "rc=$?; dmesg --notime --level=err,warn,notice,info | grep -i -E 'nfs|rpc|mount' >&2; exit $rc")
    result = vm.run(script, timeout=120, check=False)
    if result.ok:
        return TriedMount(index, asked, where, mounted=True)
    error = " ".join(line.strip() for line in result.stderr.splitlines() if line.strip())
    if result.timed_out:
        error = f"the mount did not finish in 120 s. {error}".strip()
    return TriedMount(index, asked, where, mounted=False, error=error or f"mount exited {result.rc}")


def _keep_proc_files(vm: LabVM, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    copies = " && ".join(f"cat {source} > {GUEST_IO}/{name}" for name, source in PROC_FILES.items())
    vm.run(f"{copies} && dmesg > {GUEST_IO}/dmesg", timeout=60)
    for name in (*PROC_FILES, "dmesg"):
        (out / name).write_bytes((vm.io_dir / name).read_bytes())
