"""A node's pod volumes on network filesystems, as the kernel really has them (checked in core/node/check.py).

Inputs are the node's parsed mountinfo and mountstats (of one process in the
host's mount namespace, normally pid 1). Mountinfo says what is mounted where and
on which superblock; mountstats adds, for NFS, the attribute-cache times mountinfo
leaves out when they are the defaults, and the RPC counters (neither prints options
at their defaults such as cto or lookupcache=all: those are filled in here; what each
prints was measured in the kernel lab, docs/reference/kernel-behaviour.md). Neither is
keyed here by device or mount point alone: the same device and mount point can appear
twice (a mount over a mount), so the n-th mountstats block of a mount point belongs to
the n-th mountinfo line of that mount point (both files walk the same mount list in
the same order).

Two kernel facts shape the result, both measured in the kernel lab (tests/kernel):

- Mounts with the same superblock (``major:minor``) share one set of options. The
  kernel gives a later mount through the same client the existing superblock when
  the options it compares are equal (ro, sync, rsize/wsize, the ac* times,
  lookupcache, cto, hard/soft, rdirplus...), and does not compare timeo, retrans,
  resvport or nconnect: a later mount that differs only in those silently runs
  with the first mount's values. ``nosharecache`` opts out, at a cost nfs(5) calls a
  data risk: cached copies of one file on one client can get out of sync.
- Mounts to the same server share one NFS client, and ``nconnect`` is fixed by
  the first of them (fs/nfs/client.c, nfs_match_client: version, transport,
  address and port, TLS policy); a later mount's nconnect is ignored.
"""

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

from mountwarden.core.node.kubelet import KubeletPlugin, KubeletVolume, is_subpath_mount, parse_volume_path
from mountwarden.core.options.normalize import (
    NormalizedOptions,
    layer,
    normalize,
    with_kernel_defaults,
)
from mountwarden.core.options.syntax import format_option
from mountwarden.core.options.table import OptionValue
from mountwarden.core.procfs.mountinfo import MountinfoEntry, MountinfoResult
from mountwarden.core.procfs.mountstats import (
    NFS_FSTYPES,
    WRAPPED_COUNTER_FLOOR,
    MountstatsDevice,
    MountstatsResult,
    RpcOperationStats,
)

DEFAULT_NETWORK_FSTYPES = ("nfs", "nfs4")

#: Sources that are a local tunnel, not the server: efs-utils mounts 127.0.0.1:/ through stunnel/efs-proxy.
_LOOPBACK_SERVERS = frozenset({"127.0.0.1", "localhost", "::1"})


class OptionsSource(StrEnum):
    """Where a volume's effective options were read (the values of the report's ``optionsSource``)."""

    MOUNTSTATS = "mountstats"  # every option the kernel applies, printed with its defaults
    MOUNTINFO = "mountinfo"  # the superblock's options, printed without most defaults: filled in here


@dataclass(frozen=True, slots=True)
class OperationTotals:
    """One RPC operation's totals since the mount was made; a wrapped counter is None."""

    ops: int
    errors: int | None
    rtt_ms: int | None
    execute_ms: int | None
    queue_ms: int | None
    bytes_sent: int | None = None
    bytes_received: int | None = None

    @property
    def avg_rtt_ms(self) -> float | None:
        return _average(self.rtt_ms, self.ops)

    @property
    def avg_execute_ms(self) -> float | None:
        return _average(self.execute_ms, self.ops)

    @property
    def avg_queue_ms(self) -> float | None:
        return _average(self.queue_ms, self.ops)


def _average(total: int | None, ops: int) -> float | None:
    return total / ops if total is not None and ops else None


@dataclass(frozen=True, slots=True)
class NetworkMount:
    """A mount of a network filesystem and, when the kubelet made it, the pod volume it serves.

    What the SQLite detection needs of a mount; a node scan's ScannedMount gives it as ``network_mount``.
    """

    major: int
    minor: int
    mount_point: str
    fstype: str
    pod_uid: str | None = None
    volume_name: str | None = None

    @property
    def device(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def superblock(self) -> str:
        """``major:minor``, as mountinfo and the server probe name it."""
        return f"{self.major}:{self.minor}"


@dataclass(frozen=True, slots=True)
class ScannedMount:
    """One mount on a network filesystem, whether a pod volume or not (a host mount, a subPath bind), with all
    the scan learned of it."""

    entry: MountinfoEntry
    stats: MountstatsDevice | None
    kubelet: KubeletVolume | None
    is_subpath: bool
    options: dict[str, OptionValue]
    options_source: OptionsSource
    server: str | None
    export: str | None
    client_key: tuple[str, ...]

    @property
    def mount_point(self) -> str:
        return self.entry.mount_point

    @property
    def superblock(self) -> str:
        return self.entry.major_minor

    @property
    def network_mount(self) -> NetworkMount:
        kubelet = self.kubelet
        return NetworkMount(
            self.entry.major, self.entry.minor, self.mount_point, self.entry.fstype,
            kubelet.pod_uid if kubelet else None,
            # A staging mount's directory is a hash: naming it as the volume would mislead.
            kubelet.volume_name if kubelet and kubelet.pod_uid else None,
        )

    @property
    def counts_as_consumer(self) -> bool:
        """A subPath bind is its pod's own volume seen again: never another consumer of anything."""
        return not self.is_subpath


@dataclass(frozen=True, slots=True)
class NodeVolume:
    """A pod volume (or CSI staging mount) on a network filesystem; field names are the report's."""

    pod_uid: str | None
    volume_name: str
    plugin: KubeletPlugin
    driver: str | None
    mount_point: str
    fstype: str
    source: str
    server: str | None
    export: str | None
    superblock: str
    effective_options: tuple[str, ...]
    options_source: OptionsSource
    shared_with: tuple[str, ...]
    nfs_version: str | None
    connections: int | None
    server_mounts: int
    #: Operations that ran, busiest first.
    operations: dict[str, OperationTotals] = field(default_factory=dict)
    #: Seconds since the mount was made (mountstats ``age``): the operations' totals are over this long.
    age_seconds: int | None = None
    #: What a reader should know that the fields cannot say (a TLS tunnel, a wrapped counter left out).
    notes: tuple[str, ...] = ()
    #: The address the kernel talks to: mountinfo's addr= (mountstats' opts line never shows it).
    server_address: str | None = None


@dataclass(frozen=True, slots=True)
class NodeScan:
    volumes: tuple[NodeVolume, ...]
    network_mounts: tuple[ScannedMount, ...]
    skipped_lines: int


def split_source(source: str) -> tuple[str | None, str | None]:
    """``server:/export`` into its parts (``[v6]:/export`` too); (None, None) when it is not that form."""
    if source.startswith("["):
        server, bracket, rest = source[1:].partition("]")
        if bracket and rest.startswith(":/"):
            return server, rest[1:]
        return None, None
    server, colon, export = source.partition(":")
    if colon and server and export.startswith("/"):
        return server, export
    return None, None


def _tokens_as_text(tokens: Iterable[tuple[str, str | None]]) -> list[str]:
    return [format_option(name, value) for name, value in tokens]


@lru_cache(maxsize=4096)
def _observed_items(tokens: tuple[tuple[str, str | None], ...]) -> tuple[tuple[str, OptionValue], ...]:
    return tuple(normalize(_tokens_as_text(tokens), observed=True).options.items())


def _observed(tokens: Iterable[tuple[str, str | None]]) -> dict[str, OptionValue]:
    # Memoized: the pods of one PV on a node print the same option strings, scan after scan.
    return dict(_observed_items(tuple(tokens)))


def effective_options(
    entry: MountinfoEntry, stats: MountstatsDevice | None
) -> tuple[dict[str, OptionValue], OptionsSource]:
    """The options in effect on one mount, kernel defaults included for NFS.

    The superblock's options come from mountstats when it has the mount (it prints
    every option), else from mountinfo. The per-mount flags of mountinfo (ro, nosuid,
    atime) are layered on top: a read-only bind of a read-write superblock is
    read-only, and that is what the pod sees.
    """
    if stats is not None and stats.opts:
        base, source = _observed(stats.opts), OptionsSource.MOUNTSTATS
    else:
        base, source = _observed(entry.super_option_tokens), OptionsSource.MOUNTINFO
    per_mount = _observed(entry.mount_option_tokens)
    read_only = bool(base.get("ro")) or bool(per_mount.get("ro"))
    per_mount.pop("ro", None)
    options = layer(base, per_mount, {"ro": read_only})
    if entry.fstype in NFS_FSTYPES:
        options = with_kernel_defaults(options)
    return options, source


def pair_mountstats(
    mounts: Sequence[MountinfoEntry], devices: Sequence[MountstatsDevice]
) -> list[MountstatsDevice | None]:
    """For each mountinfo line, its mountstats block (or None), matched by mount point and order.

    A pair whose source or fstype disagree is refused: a mount made or removed
    between reading the two files shifts the order, and a wrong block would
    report another mount's options as this one's.
    """
    queues: dict[str, list[MountstatsDevice]] = defaultdict(list)
    for device in reversed(devices):
        queues[device.mount_point].append(device)
    paired: list[MountstatsDevice | None] = []
    for entry in mounts:
        queue = queues.get(entry.mount_point)
        device = queue.pop() if queue else None
        if device is not None and (device.device != entry.source or device.fstype != entry.fstype):
            device = None
        paired.append(device)
    return paired


def _client_key(
    options: Mapping[str, OptionValue], super_options: Mapping[str, OptionValue], server: str | None
) -> tuple[str, ...]:
    """What makes the kernel reuse one NFS client: version, transport, address and port, TLS policy.

    ``addr=`` (the resolved address) is in mountinfo's super options only; the
    source's host name is the fallback, for network filesystems other than NFS.
    """
    address = super_options.get("addr") or server or ""
    port = options.get("port") or 0  # absent and 0 both mean the default port
    return (
        str(options.get("vers", "")),
        str(options.get("proto", "")),
        str(address),
        str(port),
        str(options.get("xprtsec", "")),
    )


def _network_mount(
    entry: MountinfoEntry, stats: MountstatsDevice | None, kubelet_roots: Collection[str]
) -> ScannedMount:
    stats = stats if stats is not None and stats.is_nfs else None
    options, source = effective_options(entry, stats)
    server, export = split_source(entry.source)
    return ScannedMount(
        entry=entry,
        stats=stats,
        kubelet=parse_volume_path(entry.mount_point, kubelet_roots),
        is_subpath=is_subpath_mount(entry.mount_point, kubelet_roots),
        options=options,
        options_source=source,
        server=server,
        export=export,
        client_key=_client_key(options, _observed(entry.super_option_tokens), server),
    )


def _operations(stats: MountstatsDevice | None) -> tuple[dict[str, OperationTotals], list[str]]:
    """Operations that ran, busiest first, with wrapped counters left out and named in notes.

    Counters are unsigned 64-bit and one that went below zero in the kernel shows
    up near 2**64: it is meaningless and does not fit the report's int64 either.
    """
    if stats is None:
        return {}, []
    notes: list[str] = []
    totals: dict[str, OperationTotals] = {}
    active = sorted((op for op in stats.operations.values() if op.ops), key=lambda op: (-op.ops, op.name))
    for op in active:
        if op.ops >= WRAPPED_COUNTER_FLOOR:
            notes.append(f"{op.name}: the ops counter is wrapped (went below zero in the kernel); left out.")
            continue
        kept = {name: _unwrapped(op, name, notes)
                for name in ("errors", "rtt_ms", "execute_ms", "queue_ms", "bytes_sent", "bytes_received")}
        totals[op.name] = OperationTotals(ops=op.ops, **kept)
    return totals, notes


def _unwrapped(op: RpcOperationStats, counter: str, notes: list[str]) -> int | None:
    value = getattr(op, counter)
    if value is not None and value >= WRAPPED_COUNTER_FLOOR:
        notes.append(f"{op.name}: {counter} is a wrapped counter ({value}); left out.")
        return None
    return value


def _tunnel_note(mount: ScannedMount) -> list[str]:
    if mount.server not in _LOOPBACK_SERVERS:
        return []
    port = mount.options.get("port")
    where = f" on port {port}" if port else ""
    return [
        f"{mount.entry.source} is a local TLS tunnel{where} (efs-utils' stunnel or efs-proxy), not the file system: "
        "the mount table does not name the file system; server and export are the tunnel's."
    ]


def scan_node(
    mountinfo: MountinfoResult,
    mountstats: MountstatsResult,
    *,
    network_fstypes: Collection[str] = DEFAULT_NETWORK_FSTYPES,
    kubelet_roots: Collection[str],
) -> NodeScan:
    """Every pod volume on a network filesystem, with options, superblock sharing and RPC totals."""
    paired = pair_mountstats(mountinfo.mounts, mountstats.devices)
    mounts = tuple(
        _network_mount(entry, stats, kubelet_roots)
        for entry, stats in zip(mountinfo.mounts, paired, strict=True)
        if entry.fstype in network_fstypes
    )
    consumers = [mount for mount in mounts if mount.counts_as_consumer]
    by_superblock: dict[str, list[ScannedMount]] = defaultdict(list)
    for mount in consumers:
        by_superblock[mount.superblock].append(mount)
    per_client = Counter(mount.client_key for mount in consumers)

    volumes = [
        _volume(mount, mount.kubelet, by_superblock[mount.superblock], per_client[mount.client_key])
        for mount in consumers
        if mount.kubelet is not None
    ]
    # By mount point for a stable, readable order; the sort is stable, so two mounts on one
    # mount point keep their mount-table order.
    volumes.sort(key=lambda volume: volume.mount_point)
    return NodeScan(
        volumes=tuple(volumes),
        network_mounts=mounts,
        skipped_lines=mountinfo.skipped_lines + mountstats.skipped_lines,
    )


def _volume(
    mount: ScannedMount, kubelet: KubeletVolume, same_superblock: list[ScannedMount], server_mounts: int
) -> NodeVolume:
    operations, counter_notes = _operations(mount.stats)
    connections = mount.stats.xprt_count if mount.stats is not None else 0
    return NodeVolume(
        pod_uid=kubelet.pod_uid,
        volume_name=kubelet.volume_name,
        plugin=kubelet.plugin,
        driver=kubelet.driver,
        mount_point=mount.mount_point,
        fstype=mount.entry.fstype,
        source=mount.entry.source,
        server=mount.server,
        export=mount.export,
        superblock=mount.superblock,
        effective_options=tuple(NormalizedOptions(mount.options).mount_options),
        options_source=mount.options_source,
        shared_with=tuple(sorted({other.mount_point for other in same_superblock if other is not mount})),
        nfs_version=mount.stats.nfs_version if mount.stats is not None else _version(mount.options),
        # No xprt lines (no mountstats block, or none printed) means unknown, not zero connections.
        connections=connections or None,
        server_mounts=server_mounts,
        operations=operations,
        notes=tuple(_tunnel_note(mount) + counter_notes),
        age_seconds=mount.stats.age_seconds if mount.stats is not None else None,
        server_address=str(_observed(mount.entry.super_option_tokens).get("addr") or "") or None,
    )


def _version(options: Mapping[str, OptionValue]) -> str | None:
    version = options.get("vers")
    return str(version) if version is not None else None
