"""Experiments on the real kernel: what the NFS client does with mount options, measured.

Each experiment mounts the VM's own export through independent NFS clients (one network
namespace each: its own nfs_client, superblocks, caches and connections) and reads back
what the kernel did from /proc. The kernel tests (tests/kernel) assert on the results,
and `mountwarden lab measure` writes them to the file the docs and `options presets`
quote (mountwarden/core/options/kernel_facts.json).
"""

from __future__ import annotations

import itertools
import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from mountwarden.core.procfs.mountinfo import parse_mountinfo
from mountwarden.core.procfs.mountstats import MountstatsDevice, parse_mountstats
from mountwarden.lab.vm import GUEST_DIR, LabVM, start_nfs_server

EXPORT = "/srv/export"
SECOND_EXPORT = "/srv/export2"
EXPORTS = (EXPORT, SECOND_EXPORT)
#: The AWS-recommended EFS options (amazon-efs-utils and the EFS user guide's "Recommended NFS mount options").
EFS_LIKE = "vers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport"
COHERENCE_SECONDS = 8.0


@dataclass(frozen=True)
class Client:
    """An independent NFS client: a network namespace whose server address is ``server``."""

    namespace: str
    server: str


@dataclass
class Lab:
    """A booted VM with the NFS server running, and the clients and mounts made in it."""

    vm: LabVM
    _indexes: Iterable[int] = field(default_factory=lambda: itertools.count(1))
    _mounts: Iterable[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def start(cls, vm: LabVM, *, max_block_size: int = 1024 * 1024) -> Lab:
        start_nfs_server(vm, max_block_size=max_block_size, exports=EXPORTS)
        return cls(vm)

    def client(self) -> Client:
        index = next(self._indexes)
        if index > 250:
            raise RuntimeError("the lab has room for 250 clients per VM")
        name = f"client{index}"
        server = self.vm.run(["sh", f"{GUEST_DIR}/netns.sh", name, str(index)], timeout=60).stdout.strip()
        return Client(name, server)

    def mount(self, options: str, client: Client | None = None, *, export: str = EXPORT,
              at: str | None = None, check: bool = True) -> str:
        """Mount ``export`` with ``options`` through ``client`` (a new one if None); return the mount point."""
        client = client or self.client()
        where = at or f"/mnt/lab/m{next(self._mounts)}"
        command = (f"mkdir -p {shlex.quote(where)} && nsenter --net=/run/netns/{client.namespace} "
                   f"mount -t nfs -o {shlex.quote(options)} {client.server}:{export} {shlex.quote(where)}")
        self.vm.run(command, timeout=120, check=check)
        return where

    def bind(self, source: str, target: str) -> None:
        self.vm.run(f"mkdir -p {shlex.quote(target)} && mount --bind {shlex.quote(source)} {shlex.quote(target)}")

    def mountinfo_entry(self, mount_point: str):
        mounts = parse_mountinfo(self.vm.read_text("/proc/1/mountinfo")).mounts
        return next(entry for entry in mounts if entry.mount_point == mount_point)

    def mountstats(self, mount_point: str) -> MountstatsDevice:
        devices = parse_mountstats(self.vm.read_text("/proc/1/mountstats")).devices
        return next(device for device in devices if device.mount_point == mount_point)

    def mountstats_options(self, mount_point: str) -> list[str]:
        return [name if value is None else f"{name}={value}" for name, value in self.mountstats(mount_point).opts]

    def mountinfo_options(self, mount_point: str) -> list[str]:
        entry = self.mountinfo_entry(mount_point)
        return [name if value is None else f"{name}={value}" for name, value in entry.super_option_tokens]

    def workload(self, *args: str, timeout: float = 300.0) -> dict:
        return self.vm.run(["python3", f"{GUEST_DIR}/workload.py", *args], timeout=timeout).json()


# -- superblocks ----------------------------------------------------------------------------------

#: (first mount, second mount): the second differs from the first in one option.
SHARING_CASES: tuple[tuple[str, str], ...] = (
    ("timeo=100", "timeo=600"),
    ("retrans=2", "retrans=5"),
    ("noresvport", "resvport"),
    ("nconnect=4", "nconnect=2"),
    ("nolock", "lock"),
    ("local_lock=all", "local_lock=none"),
    ("noatime", "relatime"),
    ("nosuid", "suid"),
    ("acregmax=3", "acregmax=60"),
    ("actimeo=0", "actimeo=60"),
    ("noac", "actimeo=0"),
    ("lookupcache=none", "lookupcache=all"),
    ("lookupcache=positive", "lookupcache=all"),
    ("nocto", "cto"),
    ("sync", "async"),
    ("ro", "rw"),
    ("soft", "hard"),
    ("rsize=65536", "rsize=1048576"),
    ("nordirplus", "rdirplus"),
    ("sharecache", "nosharecache"),
    ("vers=3,nolock", "vers=3,lock"),
    ("vers=3,local_lock=all", "vers=3,local_lock=none"),
)


@dataclass(frozen=True)
class SharingOutcome:
    first: str
    second: str
    shared: bool
    #: What the second mount runs with, by mountstats (the superblock's options when shared).
    second_effective: list[str]
    second_mountinfo: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def measure_superblock_sharing(lab: Lab, cases: Sequence[tuple[str, str]] = SHARING_CASES) -> list[SharingOutcome]:
    outcomes = []
    for first, second in cases:
        client = lab.client()
        version = "" if first.startswith("vers=") else "vers=4.1,"
        a = lab.mount(f"{version}{first}", client)
        b = lab.mount(f"{version}{second}", client)
        shared = lab.mountinfo_entry(a).major_minor == lab.mountinfo_entry(b).major_minor
        entry = lab.mountinfo_entry(b)
        per_mount = [name if value is None else f"{name}={value}" for name, value in entry.mount_option_tokens]
        outcomes.append(SharingOutcome(first, second, shared, lab.mountstats_options(b),
                                       per_mount + lab.mountinfo_options(b)))
    return outcomes


# -- nconnect -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NconnectOutcome:
    asked: list[int]
    #: Transports (xprt: lines in mountstats) of each mount, in mount order.
    transports: list[int]
    #: nconnect= as mountstats prints it for each mount.
    printed: list[int | None]

    def to_dict(self) -> dict:
        return asdict(self)


def measure_nconnect(lab: Lab, asked: Sequence[int] = (4, 2, 8)) -> NconnectOutcome:
    """One client, one mount per value, each of a different export (no superblock to share)."""
    client = lab.client()
    points = []
    for index, value in enumerate(asked):
        export = EXPORTS[index % 2]
        points.append(lab.mount(f"vers=4.1,nconnect={value},nosharecache", client, export=export))
    transports, printed = [], []
    for point in points:
        stats = lab.mountstats(point)
        transports.append(stats.xprt_count)
        options = dict(stats.opts)
        printed.append(int(options["nconnect"]) if options.get("nconnect") else None)
    return NconnectOutcome(list(asked), transports, printed)


# -- rsize/wsize -------------------------------------------------------------------------------

IO_SIZES = (516096, 1000, 512, 1048577, 2097152, 4095, 65536)


@dataclass(frozen=True)
class IoSizeOutcome:
    asked: int
    server_max: int
    rsize: int
    wsize: int

    def to_dict(self) -> dict:
        return asdict(self)


def measure_io_sizes(lab: Lab, sizes: Sequence[int] = IO_SIZES) -> list[IoSizeOutcome]:
    server_max = int(lab.vm.read_text("/proc/fs/nfsd/max_block_size"))
    client = lab.client()
    outcomes = []
    for size in sizes:
        point = lab.mount(f"vers=4.1,rsize={size},wsize={size},nosharecache", client)
        options = dict(lab.mountstats(point).opts)
        outcomes.append(IoSizeOutcome(size, server_max, int(options["rsize"]), int(options["wsize"])))
    return outcomes


# -- what mountinfo and mountstats print ---------------------------------------------------------


@dataclass(frozen=True)
class PrintedOptions:
    asked: str
    mountinfo: list[str]
    mountstats: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def measure_printed_options(lab: Lab, option_sets: Mapping[str, str]) -> dict[str, PrintedOptions]:
    client = lab.client()
    printed = {}
    for name, options in option_sets.items():
        point = lab.mount(f"{options},nosharecache", client)
        printed[name] = PrintedOptions(options, lab.mountinfo_options(point), lab.mountstats_options(point))
    return printed


# -- locks --------------------------------------------------------------------------------------

_LOCK_PROBE = """
import fcntl, subprocess, sys
first, second = sys.argv[1], sys.argv[2]
held = open(first, "w")
fcntl.lockf(held, fcntl.LOCK_EX)
probe = ("import fcntl, sys\\nf = open(sys.argv[1], 'r+')\\ntry:\\n    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\\n"
         "    print('granted')\\nexcept OSError:\\n    print('refused')")
print(subprocess.run([sys.executable, "-c", probe, second], capture_output=True, text=True).stdout.strip())
"""


@dataclass(frozen=True)
class LockOutcome:
    version: str
    options: str
    #: Whether a second client could take a lock the first client holds (it must not).
    second_client_granted: bool
    effective_lock_options: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def measure_locking(lab: Lab, cases: Sequence[tuple[str, str]] = (("4.1", "nolock"), ("4.1", "local_lock=all"),
                                                                   ("3", "nolock"), ("4.1", "lock"))) -> list[LockOutcome]:
    outcomes = []
    for index, (version, options) in enumerate(cases):
        a = lab.mount(f"vers={version},{options}")
        b = lab.mount(f"vers={version},{options}")
        name = f"lockprobe-{index}"
        result = lab.vm.run(["python3", "-c", _LOCK_PROBE, f"{a}/{name}", f"{b}/{name}"], timeout=120)
        printed = [option for option in lab.mountstats_options(a)
                   if option.startswith(("local_lock", "nolock", "lock"))]
        outcomes.append(LockOutcome(version, options, result.stdout.strip() == "granted", printed))
    return outcomes


# -- cost and staleness per set of options -------------------------------------------------------


def measure_cost(lab: Lab, options: str) -> dict:
    """RPC counts of the cost workloads on a fresh client mounting with ``options``.

    The files are made through another client (the preset may be read-only).
    """
    return lab.workload("cost", lab.mount(EFS_LIKE), lab.mount(options))


def measure_coherence(lab: Lab, options: str, seconds: float = COHERENCE_SECONDS) -> dict:
    """Worst staleness readers mounting with ``options`` see while a writer on another client appends.

    The writer is another consumer with the AWS-recommended options (a read-only preset cannot
    write, and what a reader sees depends on the reader's options).
    """
    writer = lab.mount(EFS_LIKE)
    stat_reader, open_reader = lab.mount(options), lab.mount(options)
    return lab.workload("coherence", writer, stat_reader, open_reader, str(seconds), timeout=seconds + 120)


def measure_negative_lookups(lab: Lab, options: str, seconds: float = COHERENCE_SECONDS) -> dict:
    """How long a file another client creates stays invisible to readers whose earlier lookup failed.

    A failed lookup can leave a negative entry in the reader's cache (lookupcache=all): the
    name then stays "missing" until the directory's attributes expire (acdirmin..acdirmax).
    """
    writer = lab.mount(EFS_LIKE)
    stat_reader, open_reader = lab.mount(options), lab.mount(options)
    return lab.workload("negative", writer, stat_reader, open_reader, str(seconds), timeout=seconds + 120)


def to_json(value) -> str:
    def default(item):
        return item.to_dict() if hasattr(item, "to_dict") else str(item)

    return json.dumps(value, indent=2, default=default, sort_keys=True)


# -- everything, for the facts file -------------------------------------------------------------


def preset_mount_options(preset: str) -> str:
    """What a StorageProfile on EFS with this preset mounts: the AWS baseline under the preset."""
    from mountwarden.core.options.presets import EFS_PROVISIONER
    from mountwarden.core.policy import resolve_policy

    return ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=preset).mount_options)


def former_preset_mount_options(preset: str) -> str:
    """What a profile on EFS mounted with a deprecated preset before it was redefined."""
    from mountwarden.core.options.presets import DEPRECATED, EFS_PROVISIONER, CachePolicy
    from mountwarden.core.policy import resolve_policy

    former = DEPRECATED[CachePolicy(preset)].former_options
    return ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=None, mount_options=former).mount_options)


def measure_presets(lab: Lab, presets: Mapping[str, str], *, seconds: float = COHERENCE_SECONDS,
                    progress=lambda _: None) -> dict[str, dict]:
    """Cost, staleness and negative lookups of each named set of mount options."""
    measured = {}
    for preset, options in presets.items():
        progress(f"preset {preset}: cost, coherence and negative lookups")
        measured[preset] = {"options": options, "cost": measure_cost(lab, options),
                            "coherence": measure_coherence(lab, options, seconds),
                            "negative_lookups": measure_negative_lookups(lab, options, seconds)}
    return measured


def measure_all(lab: Lab, *, progress=lambda _: None) -> dict:
    """Every experiment, as the facts file holds them."""
    from mountwarden.core.options.presets import DEPRECATED, PRESETS

    progress("superblock sharing")
    sharing = measure_superblock_sharing(lab)
    progress("nconnect")
    nconnect = measure_nconnect(lab)
    progress("rsize/wsize")
    io_sizes = measure_io_sizes(lab)
    progress("printed options")
    printed = measure_printed_options(lab, {name: preset_mount_options(name) for name in PRESETS})
    progress("locks")
    locking = measure_locking(lab)
    presets = measure_presets(lab, {str(name): preset_mount_options(name) for name in PRESETS}, progress=progress)
    former = measure_presets(lab, {str(name): former_preset_mount_options(name) for name in DEPRECATED},
                             progress=progress)
    return json.loads(to_json({
        "kernel": lab.vm.kernel_release,
        "server": {"max_block_size": io_sizes[0].server_max if io_sizes else None, "delegations": False},
        "coherence_seconds": COHERENCE_SECONDS,
        "superblock_sharing": sharing,
        "nconnect": nconnect,
        "io_sizes": io_sizes,
        "printed_options": printed,
        "locking": locking,
        "presets": presets,
        "former_presets": former,
    }))
