"""Experiments on the real kernel: what the NFS client does with mount options, measured.

Each experiment mounts the VM's own export through independent NFS clients (one network
namespace each: its own nfs_client, superblocks, caches and connections) and reads back
what the kernel did from /proc. The facts the kernel gives the same on every run are measured
in one round trip (a Program of guest/measure.py's steps), which also reads /proc a second
way, as plain text and stat() in the VM, to check the parsers against (RawCheck). The kernel
tests (tests/kernel) assert on the results and compare them with the facts file, and
`mountwarden lab measure` (make kernel-facts) writes them to it
(mountwarden/core/options/kernel_facts.json), the file the docs and `options presets` quote.
"""

from __future__ import annotations

import itertools
import json
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from mountwarden.core.procfs.locks import parse_locks
from mountwarden.core.procfs.mountinfo import MountinfoEntry, parse_mountinfo
from mountwarden.core.procfs.mountstats import MountstatsDevice, parse_mountstats
from mountwarden.lab.vm import GUEST_DIR, LabError, LabVM, start_nfs_server

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


# -- programs: mount sequences run in the VM in one go, read back raw ------------------------------

#: The guest's side of a program (standard library only: nothing of mountwarden's parsers).
MEASURE_SCRIPT = f"{GUEST_DIR}/measure.py"
#: Values that differ from run to run (addresses of the client namespace, the mountd port): the facts keep
#: their role, so that the file is the same wherever nothing changed.
VOLATILE_OPTIONS = {"clientaddr": "<client>", "addr": "<server>", "mountaddr": "<server>", "mountport": "<mountd>"}


def stable_options(tokens: Iterable[str]) -> list[str]:
    """Options as printed, with the run's addresses and ports replaced by their role."""
    return [f"{name}={VOLATILE_OPTIONS[name]}" if (name := token.partition("=")[0]) in VOLATILE_OPTIONS else token
            for token in tokens]


def _token_text(tokens) -> list[str]:
    return [name if value is None else f"{name}={value}" for name, value in tokens]


@dataclass(frozen=True)
class RawCheck:
    """One value read twice from the same capture: by plain text (or stat()) in the VM, and by the parsers."""

    what: str
    where: str
    raw: object
    parsed: object

    @property
    def agrees(self) -> bool:
        return self.raw == self.parsed

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CapturedMount:
    """A mount point's lines of /proc/1/mountinfo and blocks of /proc/1/mountstats, as printed, and its stat()."""

    mount_point: str
    mountinfo: tuple[str, ...]
    mountstats: tuple[str, ...]
    stat_device: str
    xprt_lines: tuple[int, ...]

    @classmethod
    def from_result(cls, mount_point: str, captured: Mapping) -> CapturedMount:
        return cls(mount_point, tuple(captured["mountinfo"]), tuple(captured["mountstats"]), captured["stat_device"],
                   tuple(captured["xprt_lines"]))

    @property
    def mounted(self) -> bool:
        return bool(self.mountinfo)

    @property
    def entry(self) -> MountinfoEntry:
        """The mount on top at this point (the last line: a later mount hides an earlier one)."""
        return parse_mountinfo("\n".join(self.mountinfo) + "\n").mounts[-1]

    @property
    def stats(self) -> MountstatsDevice:
        return parse_mountstats("\n".join(self.mountstats) + "\n").devices[-1]

    @property
    def mountstats_options(self) -> list[str]:
        return _token_text(self.stats.opts)

    @property
    def mountinfo_options(self) -> list[str]:
        """Per-mount options, then the superblock's, as the facts keep them."""
        return _token_text(self.entry.mount_option_tokens) + _token_text(self.entry.super_option_tokens)

    def raw_checks(self) -> list[RawCheck]:
        """The parsers against the raw reading: the device (stat()) and the transports (xprt: lines counted)."""
        if not self.mounted:
            return []
        return [RawCheck("device", self.mount_point, self.stat_device, self.entry.major_minor),
                RawCheck("transports", self.mount_point, self.xprt_lines[-1] if self.xprt_lines else None,
                         self.stats.xprt_count),
                RawCheck("mountinfo lines", self.mount_point, len(self.mountinfo),
                         len(parse_mountinfo("\n".join(self.mountinfo) + "\n").mounts)),
                RawCheck("mountstats blocks", self.mount_point, len(self.mountstats),
                         len(parse_mountstats("\n".join(self.mountstats) + "\n").devices))]


@dataclass
class Program:
    """Steps of guest/measure.py: built here, run in the VM in one round trip, decoded here."""

    lab: Lab
    steps: list[dict] = field(default_factory=list)

    def _step(self, **step) -> int:
        self.steps.append(step)
        return len(self.steps) - 1

    def mount(self, client: Client, options: str, *, export: str = EXPORT, at: str | None = None) -> tuple[str, int]:
        """Mount ``export`` through ``client`` at ``at`` (a new mount point if None); (the mount point, the step)."""
        where = at or f"/mnt/lab/m{next(self.lab._mounts)}"
        return where, self._step(op="mount", client=client.namespace, source=f"{client.server}:{export}",
                                 options=options, at=where)

    def umount(self, *points: str) -> int:
        return self._step(op="umount", at=list(points))

    def client_gone(self, client: Client) -> int:
        return self._step(op="client_gone", client=client.namespace, timeout=120)

    def capture(self, *points: str) -> int:
        return self._step(op="capture", at=list(points))

    def lock_probe(self, first: str, second: str) -> int:
        return self._step(op="lock_probe", first=first, second=second)

    def delegation_probe(self, at: str) -> int:
        return self._step(op="delegation_probe", at=at)

    def kernel(self) -> int:
        return self._step(op="kernel")

    def run(self, timeout: float = 3600.0) -> list[dict]:
        results = self.lab.vm.run(["python3", MEASURE_SCRIPT], input=json.dumps(self.steps), timeout=timeout).json()
        failed = [(self.steps[index], result["error"]) for index, result in enumerate(results)
                  if result.get("error") and self.steps[index]["op"] != "mount"]
        if failed:
            raise LabError(f"the lab's measurement failed: {failed}")
        return results


def _captured(results: list[dict], step: int, point: str) -> CapturedMount:
    return CapturedMount.from_result(point, results[step][point])


#: A decoder of a program's results, and the raw checks it made on the way.
Decoded = tuple[object, list[RawCheck]]


# -- superblocks ----------------------------------------------------------------------------------

#: (first mount, second mount): the second differs from the first in one option; an empty side mounts with
#: none. Without a vers= of their own both are NFSv4.1, as EFS mounts. Every option of nfs(5) a StorageClass or a
#: PV can carry that the lab can serve, pair by pair (those it cannot are in NOT_MEASURED, with why).
SHARING_CASES: tuple[tuple[str, str], ...] = (
    # the transport and the client
    ("timeo=100", "timeo=600"),
    ("retrans=2", "retrans=5"),
    ("noresvport", "resvport"),
    ("nconnect=4", "nconnect=2"),
    ("max_connect=4", "max_connect=1"),
    ("trunkdiscovery", "notrunkdiscovery"),
    ("vers=4.2", "vers=4.1"),
    ("xprtsec=tls", "xprtsec=none"),
    # locks: NFSv4 ignores nolock and local_lock
    ("nolock", "lock"),
    ("local_lock=all", "local_lock=none"),
    # the mount's own VFS flags
    ("noatime", "relatime"),
    ("strictatime", "relatime"),
    ("nodiratime", ""),
    ("nosuid", "suid"),
    ("nodev", "dev"),
    ("noexec", "exec"),
    # the superblock's VFS flags
    ("ro", "rw"),
    ("sync", "async"),
    ("dirsync", ""),
    ("lazytime", ""),
    # caches
    ("acregmin=1", "acregmin=3"),
    ("acregmax=3", "acregmax=60"),
    ("acdirmin=10", "acdirmin=30"),
    ("acdirmax=10", "acdirmax=60"),
    ("actimeo=0", "actimeo=60"),
    ("noac", "actimeo=0"),
    ("lookupcache=none", "lookupcache=all"),
    ("lookupcache=positive", "lookupcache=all"),
    ("nocto", "cto"),
    ("fsc", "nofsc"),
    ("nordirplus", "rdirplus"),
    ("sharecache", "nosharecache"),
    # failures and writes
    ("soft", "hard"),
    ("softerr", "hard"),
    ("soft,softreval", "soft"),
    ("write=eager", "write=lazy"),
    ("write=wait", "write=lazy"),
    ("intr", "nointr"),
    # sizes, names and the rest
    ("rsize=65536", "rsize=1048576"),
    ("wsize=65536", "wsize=1048576"),
    ("bsize=8192", ""),
    ("namlen=100", ""),
    ("posix", "noposix"),
    ("noacl", "acl"),
    ("migration", "nomigration"),
    ("context=system_u:object_r:nfs_t:s0", ""),
    # NFSv3: locks stay local with nolock and local_lock, and the MOUNT protocol's options
    ("vers=3,timeo=100", "vers=3,timeo=600"),
    ("vers=3,nolock", "vers=3,lock"),
    ("vers=3,local_lock=all", "vers=3,local_lock=none"),
    ("vers=3,local_lock=flock", "vers=3,local_lock=none"),
    ("vers=3,local_lock=posix", "vers=3,local_lock=none"),
    ("vers=3,posix", "vers=3,noposix"),
    ("vers=3,noacl", "vers=3,acl"),
    ("vers=3,port=2049", "vers=3"),  # a different NFSv4 port would be another server: the lab has one
    ("vers=3,mountproto=tcp", "vers=3,mountproto=udp"),
)

#: What every `make test` measures again of the table (make kernel-facts measures it all): one or more pairs of
#: each class, an option the later mount takes from the superblock (timeo; nconnect, the client's; bsize), a flag
#: each mount keeps (nosuid), one NFSv4 ignores (nolock), options that give a superblock of its own, and NFSv3's
#: locks, which it compares.
LIVE_SHARING_CASES: tuple[tuple[str, str], ...] = (
    ("timeo=100", "timeo=600"),
    ("nconnect=4", "nconnect=2"),
    ("bsize=8192", ""),
    ("nosuid", "suid"),
    ("nolock", "lock"),
    ("acregmax=3", "acregmax=60"),
    ("lookupcache=positive", "lookupcache=all"),
    ("sync", "async"),
    ("soft", "hard"),
    ("sharecache", "nosharecache"),
    ("posix", "noposix"),
    ("vers=3,nolock", "vers=3,lock"),
)

#: Options of the table that no case measures, and why: what the lab cannot serve, or what is not an option of
#: the NFS client's behaviour. A unit test checks that every option the kernel sees is in one or the other.
NOT_MEASURED: dict[str, str] = {
    "sec": "only sec=sys: Kerberos flavours need a KDC, and the lab's export (like EFS) accepts AUTH_SYS only",
    "proto": "TCP only: NFSv4 refuses UDP and the lab's server offers no UDP or RDMA transport",
    "rdma": "no RDMA device in the lab (proto=rdma)",
    "udp": "the lab's server offers no UDP transport (proto=udp)",
    "tcp": "the default transport (proto=tcp): every case uses it",
    "addr": "the server's address names another server, not a behaviour",
    "clientaddr": "the client's callback address, chosen by mount.nfs",
    "mountaddr": "the NFSv3 mountd's address names another server",
    "mountport": "the NFSv3 mountd's port: rpcbind's (mountproto is measured)",
    "mountvers": "knfsd's MOUNT protocol offers version 3 only",
    "minorversion": "the old spelling of vers=4.N (vers=4.2 against vers=4.1 is measured)",
    "fscontext": "an SELinux context like context= (measured); the lab's kernel enforces no LSM",
    "defcontext": "an SELinux context like context= (measured); the lab's kernel enforces no LSM",
    "rootcontext": "an SELinux context like context= (measured); the lab's kernel enforces no LSM",
    "seclabel": "printed by the kernel for labelled file systems, not asked for",
}


def asked_options(options: str) -> str:
    """What a case's side mounts with: NFSv4.1 unless it names a version."""
    if options.startswith("vers="):
        return options
    return f"vers=4.1,{options}" if options else "vers=4.1"


@dataclass(frozen=True)
class SharingOutcome:
    first: str
    second: str
    #: Whether the two mounts share a superblock (None: the kernel refused one of them).
    shared: bool | None
    #: What the second mount runs with, by mountstats (the superblock's options when shared).
    second_effective: list[str]
    second_mountinfo: list[str]
    #: mount(8)'s words when the kernel refused a mount ("first: ..." or "second: ...").
    refused: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def plan_superblock_sharing(program: Program, cases: Sequence[tuple[str, str]] = SHARING_CASES):
    """Each case through one client, one after the other: both mounts, read back, unmounted, the client gone."""
    client = program.lab.client()
    planned = []
    for first, second in cases:
        a, mount_a = program.mount(client, asked_options(first))
        b, mount_b = program.mount(client, asked_options(second))
        captured = program.capture(a, b)
        program.umount(a, b)
        program.client_gone(client)
        planned.append((first, second, a, b, mount_a, mount_b, captured))

    def decode(results: list[dict]) -> Decoded:
        outcomes, checks = [], []
        for first, second, a, b, mount_a, mount_b, captured in planned:
            refused = "; ".join(f"{side}: {results[step]['error']}" for side, step in
                                (("first", mount_a), ("second", mount_b)) if not results[step]["mounted"])
            if refused:
                outcomes.append(SharingOutcome(first, second, None, [], [], refused))
                continue
            one, two = _captured(results, captured, a), _captured(results, captured, b)
            checks += one.raw_checks() + two.raw_checks()
            checks.append(RawCheck("shared superblock", f"{first} | {second}", one.stat_device == two.stat_device,
                                   one.entry.major_minor == two.entry.major_minor))
            outcomes.append(SharingOutcome(first, second, one.entry.major_minor == two.entry.major_minor,
                                           stable_options(two.mountstats_options),
                                           stable_options(two.mountinfo_options)))
        return outcomes, checks

    return decode


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


def plan_nconnect(program: Program, asked: Sequence[int] = (4, 2, 8)):
    """One client, one mount per value, of alternating exports with nosharecache (no superblock to share)."""
    client = program.lab.client()
    points = [program.mount(client, f"vers=4.1,nconnect={value},nosharecache", export=EXPORTS[index % 2])[0]
              for index, value in enumerate(asked)]
    captured = program.capture(*points)
    program.umount(*points)
    program.client_gone(client)

    def decode(results: list[dict]) -> Decoded:
        mounts = [_captured(results, captured, point) for point in points]
        printed = [int(value) if (value := dict(mount.stats.opts).get("nconnect")) else None for mount in mounts]
        return (NconnectOutcome(list(asked), [mount.stats.xprt_count for mount in mounts], printed),
                [check for mount in mounts for check in mount.raw_checks()])

    return decode


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


def plan_io_sizes(program: Program, sizes: Sequence[int] = IO_SIZES):
    client = program.lab.client()
    points = [program.mount(client, f"vers=4.1,rsize={size},wsize={size},nosharecache")[0] for size in sizes]
    captured = program.capture(*points)
    kernel = program.kernel()
    program.umount(*points)
    program.client_gone(client)

    def decode(results: list[dict]) -> Decoded:
        server_max = results[kernel]["max_block_size"]
        mounts = [_captured(results, captured, point) for point in points]
        outcomes = []
        for size, mount in zip(sizes, mounts, strict=True):
            options = dict(mount.stats.opts)
            outcomes.append(IoSizeOutcome(size, server_max, int(options["rsize"]), int(options["wsize"])))
        return outcomes, [check for mount in mounts for check in mount.raw_checks()]

    return decode


# -- what mountinfo and mountstats print ---------------------------------------------------------


@dataclass(frozen=True)
class PrintedOptions:
    asked: str
    mountinfo: list[str]
    mountstats: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def plan_printed_options(program: Program, option_sets: Mapping[str, str]):
    client = program.lab.client()
    points = {name: program.mount(client, f"{options},nosharecache")[0] for name, options in option_sets.items()}
    captured = program.capture(*points.values())
    program.umount(*points.values())
    program.client_gone(client)

    def decode(results: list[dict]) -> Decoded:
        printed, checks = {}, []
        for name, point in points.items():
            mount = _captured(results, captured, point)
            super_options = _token_text(mount.entry.super_option_tokens)
            printed[name] = PrintedOptions(option_sets[name], stable_options(super_options),
                                           stable_options(mount.mountstats_options))
            checks += mount.raw_checks()
        return printed, checks

    return decode


# -- locks and delegations ------------------------------------------------------------------------

LOCK_CASES: tuple[tuple[str, str], ...] = (("4.1", "nolock"), ("4.1", "local_lock=all"), ("3", "nolock"),
                                           ("4.1", "lock"))


@dataclass(frozen=True)
class LockOutcome:
    version: str
    options: str
    #: Whether a second client could take a lock the first client holds (it must not).
    second_client_granted: bool
    effective_lock_options: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def plan_locking(program: Program, cases: Sequence[tuple[str, str]] = LOCK_CASES):
    """Two clients mount with the same options; the first holds an exclusive lock, the second tries to take it."""
    first_client, second_client = program.lab.client(), program.lab.client()
    planned = []
    for index, (version, options) in enumerate(cases):
        a = program.mount(first_client, f"vers={version},{options}")[0]
        b = program.mount(second_client, f"vers={version},{options}")[0]
        name = f"lockprobe-{a.rsplit('/', 1)[-1]}-{index}"
        probe = program.lock_probe(f"{a}/{name}", f"{b}/{name}")
        captured = program.capture(a)
        program.umount(a, b)
        program.client_gone(first_client)
        program.client_gone(second_client)
        planned.append((version, options, a, probe, captured))

    def decode(results: list[dict]) -> Decoded:
        outcomes, checks = [], []
        for version, options, a, probe, captured in planned:
            mount = _captured(results, captured, a)
            printed = [option for option in mount.mountstats_options
                       if option.startswith(("local_lock", "nolock", "lock"))]
            found = results[probe]
            outcomes.append(LockOutcome(version, options, found["granted"], printed))
            checks += mount.raw_checks() + _lock_checks(found, mount)
        return outcomes, checks

    return decode


def _lock_checks(probe: Mapping, mount: CapturedMount) -> list[RawCheck]:
    """The file's /proc/locks lines, by plain text in the VM and by the parser; the client's on its superblock."""
    lines = list(probe["lock_lines"])
    parsed = parse_locks("\n".join(lines) + "\n").locks
    where = f"{mount.mount_point} inode {probe['inode']}"
    return [RawCheck("lock lines", where, len(lines), len(parsed)),
            RawCheck("lock devices", where, sorted(_raw_lock_device(line) for line in lines),
                     sorted(lock.major_minor for lock in parsed)),
            RawCheck("client lock on the mount's superblock", where, True, mount.stat_device in
                     {lock.major_minor for lock in parsed})]


def _raw_lock_device(line: str) -> str:
    """MAJ:MIN (hex in /proc/locks) of a lock line as plain text, in decimal as stat() gives it."""
    where = next(word for word in line.split() if word.count(":") == 2)
    major, minor, _ = where.split(":")
    return f"{int(major, 16)}:{int(minor, 16)}"


def plan_delegations(program: Program):
    """Whether the server grants an NFSv4.1 client a read delegation on a file it opens (EFS grants none)."""
    client = program.lab.client()
    point = program.mount(client, EFS_LIKE)[0]
    probe = program.delegation_probe(point)
    program.umount(point)
    program.client_gone(client)

    def decode(results: list[dict]) -> Decoded:
        found = results[probe]
        granted = bool(found["deleg_lines"])
        return granted, [RawCheck("delegations", point, found["leases_enable"] != "0", granted)]

    return decode


# -- everything deterministic, in one round trip ----------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """The facts the kernel gives the same on every run, as the facts file holds them, and the raw checks."""

    facts: dict
    raw_checks: list[RawCheck]
    seconds: float
    #: Seconds each section took in the VM.
    sections: dict[str, float] = field(default_factory=dict)


def measure_deterministic(lab: Lab, *, sharing_cases: Sequence[tuple[str, str]] = SHARING_CASES,
                          presets: Mapping[str, str] | None = None) -> Measured:
    """Kernel release, server, superblock sharing, nconnect, rsize/wsize, printed options and locks, measured."""
    from mountwarden.core.options.presets import PRESETS

    presets = presets if presets is not None else {str(name): preset_mount_options(name) for name in PRESETS}
    program = Program(lab)
    kernel = program.kernel()
    plans = {"delegations": lambda: plan_delegations(program),
             "superblock_sharing": lambda: plan_superblock_sharing(program, sharing_cases),
             "nconnect": lambda: plan_nconnect(program), "io_sizes": lambda: plan_io_sizes(program),
             "printed_options": lambda: plan_printed_options(program, presets), "locking": lambda: plan_locking(program)}
    decoders, steps = {}, {}
    for name, plan in plans.items():
        first = len(program.steps)
        decoders[name] = plan()
        steps[name] = range(first, len(program.steps))
    started = time.monotonic()
    results = program.run()
    seconds = time.monotonic() - started
    sections = {name: round(sum(results[index]["seconds"] for index in indexes), 1) for name, indexes in steps.items()}
    facts: dict = {}
    checks: list[RawCheck] = []
    for name, decode in decoders.items():
        facts[name], found = decode(results)
        checks += found
    delegations = facts.pop("delegations")
    facts = {"kernel": results[kernel]["release"],
             "server": {"max_block_size": results[kernel]["max_block_size"], "delegations": delegations}, **facts}
    return Measured(json.loads(to_json(facts)), checks, seconds, sections)


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
    """Every experiment, as the facts file holds them, with the day it was measured."""
    from mountwarden.core.options.presets import DEPRECATED, PRESETS

    progress(f"superblock sharing ({len(SHARING_CASES)} cases), nconnect, rsize/wsize, printed options, locks, "
             "delegations")
    measured = measure_deterministic(lab)
    disagreeing = [check for check in measured.raw_checks if not check.agrees]
    if disagreeing:
        raise LabError(f"the parsers read the lab's /proc differently from its raw text: {disagreeing}")
    progress(f"measured in {measured.seconds:.0f} s, {len(measured.raw_checks)} raw readings agreeing")
    presets = measure_presets(lab, {str(name): preset_mount_options(name) for name in PRESETS}, progress=progress)
    former = measure_presets(lab, {str(name): former_preset_mount_options(name) for name in DEPRECATED},
                             progress=progress)
    return json.loads(to_json({
        **measured.facts,
        "measured": datetime.now(UTC).strftime("%Y-%m-%d"),
        "coherence_seconds": COHERENCE_SECONDS,
        "presets": presets,
        "former_presets": former,
    }))
