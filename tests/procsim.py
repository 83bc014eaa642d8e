"""A kernel simulator for end-to-end tests: writes each kwok node's /proc, for real agents to read.

tests/nodesim.py stands in for the kernel and the agent together; this one stands in
for the kernel only. It keeps the same mount rules (a pod's NFS volume is mounted
with its PV's options of that moment; pods of one export on one node share a
superblock while the first is alive) and writes them as a proc root per node,
``<root>/<node>/1/mountinfo`` and ``1/mountstats`` (blocks cloned from a real
capture, tests/fixtures/procfs, with their options and mount points rewritten),
plus ``locks`` and a process holding SQLite locks on the volumes asked for. Real
`mountwarden agent` processes then scan these proc roots and write the reports.
"""

from pathlib import Path

from tests.nodesim import Node, NodeSimulator, SimulatedMount
from tests.procroot import TELEGRAF, _blocks
from tests.samples import sample_path

from mountwarden.core.options.normalize import NormalizedOptions, normalize, with_kernel_defaults

#: SQLite's SHARED lock range: a reader holds it for as long as its transaction is open.
SQLITE_SHARED = "1073741826 1073742335"
_BASE_MOUNTINFO = ("1 0 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
                   "2 1 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw\n")
#: Attribute-cache times at their defaults are left out of mountinfo, as the kernel does.
_HIDDEN_DEFAULTS = {"acregmin": 3, "acregmax": 60, "acdirmin": 30, "acdirmax": 60}


class ProcRootSimulator(NodeSimulator):
    """NodeSimulator's mounts, written as proc roots under ``root`` instead of as reports."""

    def __init__(self, api_client, nodes: list[str], root: Path, *, sqlite_volumes: set[str] = frozenset(),
                 interval: float = 0.3) -> None:
        super().__init__(api_client, nodes, interval=interval)
        self.root = root
        self.sqlite_volumes = set(sqlite_volumes)
        self._template = next(block for block in _blocks(sample_path(TELEGRAF).read_text()) if block.is_nfs
                              and block.mount_point == "/D")

    def proc_root(self, node: str) -> Path:
        return self.root / node

    def _write(self, name: str, node: Node) -> None:
        mounts = sorted(node.mounts.values(), key=lambda m: m.mount_point)
        if node.written == [id(m.superblock) for m in mounts] + [m.mount_point for m in mounts]:
            return
        directory = self.proc_root(name)
        (directory / "1").mkdir(parents=True, exist_ok=True)
        mountinfo, mountstats, locks = [_BASE_MOUNTINFO.rstrip("\n")], [], []
        for index, mount in enumerate(mounts):
            options = normalize(mount.superblock.options, observed=True).options
            effective = with_kernel_defaults({**options, "vers": options.get("vers", "4.1")})
            mountinfo.append(f"{100 + index} 1 {mount.superblock.device} / {mount.mount_point} rw,relatime "
                             f"shared:{100 + index} - nfs4 {mount.server}:{mount.path} {self._super(effective)}")
            mountstats.append(self._block(mount, effective))
            if mount.volume in self.sqlite_volumes:
                locks.append(self._sqlite_lock(directory, len(locks) + 1, mount))
        self._atomic(directory / "1" / "mountinfo", "\n".join(mountinfo) + "\n")
        self._atomic(directory / "1" / "mountstats", "\n".join(mountstats) + "\n")
        self._atomic(directory / "locks", "".join(locks))
        node.written = [id(m.superblock) for m in mounts] + [m.mount_point for m in mounts]

    @staticmethod
    def _super(effective: dict) -> str:
        shown = {name: value for name, value in effective.items() if _HIDDEN_DEFAULTS.get(name) != value}
        return ",".join([*NormalizedOptions(shown).mount_options, "addr=192.0.2.10"])

    def _block(self, mount: SimulatedMount, effective: dict) -> str:
        opts = ",".join(NormalizedOptions(effective).mount_options)
        lines = self._template.moved_to(mount.mount_point).split("\n")
        lines[0] = lines[0].replace(self._template.device, f"{mount.server}:{mount.path}")
        return "\n".join(f"\topts:\t{opts}" if line.strip().startswith("opts:") else line for line in lines)

    def _sqlite_lock(self, directory: Path, number: int, mount: SimulatedMount) -> str:
        """A process of the pod holding a SQLite read lock on the volume, and its cgroup."""
        pid = 7000 + number
        major, minor = (int(part) for part in mount.superblock.device.split(":"))
        (directory / str(pid)).mkdir(exist_ok=True)
        cgroup = ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
                  f"{mount.pod_uid.replace('-', '_')}.slice/cri-containerd-{'a' * 64}.scope\n")
        (directory / str(pid) / "cgroup").write_text(cgroup)
        return f"{number}: POSIX  ADVISORY  READ  {pid} {major:02x}:{minor:02x}:4242 {SQLITE_SHARED}\n"

    @staticmethod
    def _atomic(path: Path, text: str) -> None:
        # An agent may read at any moment: never let it see half a file.
        partial = path.with_suffix(".partial")
        partial.write_text(text)
        partial.replace(path)
