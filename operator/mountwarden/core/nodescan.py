"""A node's pod volumes on network filesystems, as the kernel really has them, and their check.

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
from typing import Protocol

from mountwarden.core.compare import INHERITED_THROUGH_SUPERBLOCK, Finding, OriginHints, check
from mountwarden.core.kubelet import KubeletPlugin, KubeletVolume, is_subpath_mount, parse_volume_path
from mountwarden.core.mountactivity import Activity, ProcessSamples, Thresholds, judge, nconnect_has_effect
from mountwarden.core.options import (
    NormalizedOptions,
    Severity,
    format_canonical,
    layer,
    normalize,
    with_kernel_defaults,
)
from mountwarden.core.optionsyntax import format_option
from mountwarden.core.optiontable import OptionValue
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
    """One mount on a network filesystem, whether a pod volume or not (a host mount, a subPath bind)."""

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


@dataclass(frozen=True, slots=True)
class NodeScan:
    volumes: tuple[NodeVolume, ...]
    network_mounts: tuple[NetworkMount, ...]
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
) -> NetworkMount:
    stats = stats if stats is not None and stats.is_nfs else None
    options, source = effective_options(entry, stats)
    server, export = split_source(entry.source)
    return NetworkMount(
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


def _tunnel_note(mount: NetworkMount) -> list[str]:
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
    by_superblock: dict[str, list[NetworkMount]] = defaultdict(list)
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
    mount: NetworkMount, kubelet: KubeletVolume, same_superblock: list[NetworkMount], server_mounts: int
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
    )


def _version(options: Mapping[str, OptionValue]) -> str | None:
    version = options.get("vers")
    return str(version) if version is not None else None


# -- the check of one volume against its contract ---------------------------------------------


class VolumeObservation(Protocol):
    """What the check needs of a volume: a NodeVolume here, or the report's MountedVolume."""

    @property
    def mount_point(self) -> str: ...

    @property
    def superblock(self) -> str: ...

    @property
    def effective_options(self) -> Sequence[str]: ...

    @property
    def shared_with(self) -> Sequence[str]: ...

    @property
    def server(self) -> str | None: ...

    @property
    def connections(self) -> int | None: ...

    @property
    def server_mounts(self) -> int: ...


class VolumeFindingReason(StrEnum):
    OPTION_MISMATCH = "OptionMismatch"  # an option in effect differs from the contract
    UNDECLARED_OPTION = "UndeclaredOption"  # an option nobody declared changes what the mount does
    SUPERBLOCK_SHARED = "SuperblockShared"  # ... and another mount shares the superblock
    NCONNECT_IGNORED = "NconnectIgnored"  # the server's first mount fixed the connection count (or the kernel)
    THROUGHPUT_PLATEAU = "ThroughputPlateau"  # one connection near the per-flow cap, requests queueing
    TRANSPORT_UNHEALTHY = "TransportUnhealthy"  # retransmissions, major timeouts, reconnects
    STUCK_ON_NFS = "StuckOnNFS"  # the pod's processes in uninterruptible sleep in most samples


#: Findings about how a mount is doing, not about its options: they never make a volume drifted.
HEALTH_REASONS = frozenset({VolumeFindingReason.THROUGHPUT_PLATEAU, VolumeFindingReason.TRANSPORT_UNHEALTHY,
                            VolumeFindingReason.STUCK_ON_NFS})


@dataclass(frozen=True, slots=True)
class VolumeFinding:
    reason: VolumeFindingReason
    severity: Severity
    message: str
    remedy: str
    option: str | None = None
    expected: OptionValue | None = None
    actual: OptionValue | None = None
    #: The other mount points involved (sharing the superblock).
    other_mounts: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "reason": str(self.reason),
            "severity": str(self.severity),
            "message": self.message,
            "remedy": self.remedy,
            "option": self.option,
            "expected": self.expected,
            "actual": self.actual,
            "other_mounts": list(self.other_mounts),
        }


@dataclass(frozen=True, slots=True)
class VolumeCheck:
    findings: tuple[VolumeFinding, ...]

    @property
    def compliant(self) -> bool:
        """Compliant means nothing worse than information, as for an option check."""
        return all(finding.severity is Severity.INFO for finding in self.findings)

    def to_dict(self) -> dict:
        return {"compliant": self.compliant, "findings": [finding.to_dict() for finding in self.findings]}


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}

_REMOUNT = (
    "The mount was made with other options: once the PV's mountOptions (or its StorageClass) carry the "
    "declared ones, restart the pod so that the kubelet mounts the volume again."
)


def check_volume(
    volume: VolumeObservation,
    declared: Mapping[str, OptionValue],
    *,
    required: Iterable[str] = (),
    forbidden: Iterable[str] = (),
    pv_mount_options: Sequence[str] | None = None,
    storage_class: str | None = None,
    thresholds: Thresholds | None = None,
    kernel_release: str | None = None,
) -> VolumeCheck:
    """Findings for one volume against its contract: options first, then why they may differ.

    ``declared`` is a canonical option dict (a ResolvedPolicy's ``options``); ``pv_mount_options``, the
    PV's spec.mountOptions when known, tells where an option nobody declared probably came from.
    """
    observed = normalize(list(volume.effective_options), observed=True).options
    origin = OriginHints(
        pv_options=normalize(list(pv_mount_options), observed=True).options if pv_mount_options is not None else None,
        storage_class=storage_class, shared_with=tuple(volume.shared_with))
    option_findings = check(declared, observed, required=required, forbidden=forbidden, origin=origin).findings
    findings = [_option_finding(finding) for finding in option_findings]
    # A shared superblock explains only the options the kernel does not compare when it shares one
    # (kernel lab); any other difference gives a mount a superblock of its own, so the mounts sharing
    # this one asked for the same: the PV or the driver, not the superblock, is to blame.
    drift = [finding for finding in option_findings
             if finding.severity is not Severity.INFO and finding.option in INHERITED_THROUGH_SUPERBLOCK]
    if drift and volume.shared_with:
        findings.append(_superblock_shared(volume, drift))
    if (nconnect := _nconnect_ignored(volume, declared, kernel_release)) is not None:
        findings.append(nconnect)
    if thresholds is not None:
        findings += _activity_findings(volume, thresholds, kernel_release)
    return VolumeCheck(tuple(findings))


def _activity_findings(volume: VolumeObservation, thresholds: Thresholds,
                       kernel_release: str | None) -> list[VolumeFinding]:
    """Throughput, transport and stuck-process findings from what the agent sampled (a report's volume)."""
    recent = getattr(volume, "activity", None)
    states = getattr(volume, "processes", None)
    rates = Activity(**{name: getattr(recent, name) for name in Activity.__dataclass_fields__}) if recent else None
    samples = [(f"pod {getattr(volume, 'pod_uid', None) or '(staging)'}",
                ProcessSamples(states.samples, states.uninterruptible, states.processes))] if states else []
    found = judge(rates, samples, thresholds, kernel_release=kernel_release,
                  server_responding=getattr(volume, "server_responding", None))
    return [VolumeFinding(VolumeFindingReason(f.reason), f.severity, f.message, f.remedy) for f in found]


_UNDECLARED_REMEDY = (
    "Remove the option where it comes from (the message says where it most probably does), or declare it in the "
    "profile if it is wanted; then restart the pod so that the kubelet mounts the volume again."
)


def _option_finding(finding: Finding) -> VolumeFinding:
    if finding.undeclared:
        reason, remedy = VolumeFindingReason.UNDECLARED_OPTION, _UNDECLARED_REMEDY
    else:
        reason, remedy = VolumeFindingReason.OPTION_MISMATCH, _REMOUNT
    return VolumeFinding(
        reason=reason,
        severity=finding.severity,
        message=finding.message,
        remedy="" if finding.severity is Severity.INFO else remedy,
        option=finding.option,
        expected=finding.expected,
        actual=finding.actual,
    )


def describe_mount(mount_point: str) -> str:
    """A mount point with whom it belongs to, for messages."""
    kubelet = parse_volume_path(mount_point)
    if kubelet is None:
        return f"{mount_point} (not a pod volume)"
    if kubelet.plugin is KubeletPlugin.CSI_STAGING:
        return f"{mount_point} (staging mount of CSI driver {kubelet.driver or 'unknown'})"
    return f"{mount_point} (pod {kubelet.pod_uid}, volume {kubelet.volume_name})"


def _declared_text(finding: Finding) -> str:
    """What the contract asked for, in mount syntax: vers=4.1, noresvport, hard, not nolock."""
    if finding.expected is None:
        return f"not {finding.option}"  # a forbidden option
    if finding.expected == finding.option:
        return finding.option  # one flag of an exclusive group (hard, soft, softerr)
    return format_canonical(finding.option, finding.expected)


def _superblock_shared(volume: VolumeObservation, drift: list[Finding]) -> VolumeFinding:
    others = tuple(volume.shared_with)
    options = ", ".join(dict.fromkeys(_declared_text(finding) for finding in drift))
    return VolumeFinding(
        reason=VolumeFindingReason.SUPERBLOCK_SHARED,
        severity=max((finding.severity for finding in drift), key=_SEVERITY_RANK.__getitem__),
        message=(
            f"{volume.mount_point} shares superblock {volume.superblock} with "
            f"{'; '.join(describe_mount(other) for other in others)}. A superblock keeps the options of the "
            f"mount that created it, so the declared {options} may never have applied to this volume."
        ),
        remedy=(
            "Restart or move the other consumer(s) off this node so that the superblock goes away with its "
            "last mount, then restart this pod; or declare nosharecache so that this volume gets a "
            "superblock of its own (nfs(5) calls that a data risk: multiple cached copies of the same file on "
            "one client can become out of sync after a local update of one of them)."
        ),
        other_mounts=others,
    )


def _nconnect_ignored(volume: VolumeObservation, declared: Mapping[str, OptionValue],
                      kernel_release: str | None = None) -> VolumeFinding | None:
    wanted = declared.get("nconnect")
    connections = volume.connections
    if isinstance(wanted, int) and wanted > 1 and nconnect_has_effect(kernel_release) is False and connections != wanted:
        return VolumeFinding(
            reason=VolumeFindingReason.NCONNECT_IGNORED,
            severity=Severity.WARNING,
            message=(f"nconnect={wanted} is declared but this node runs Linux {kernel_release}: nconnect arrived in "
                     f"5.3 (nfs(5)), and the mount has {connections or 'one'} connection(s)."),
            remedy="Upgrade the node's kernel (5.3 or later), or spread the load over mounts of different server "
                   "addresses.",
            option="nconnect", expected=wanted, actual=connections,
        )
    if wanted is None or connections is None or connections == wanted or volume.server_mounts < 2:
        return None
    server = volume.server or "the server"
    others = volume.server_mounts - 1
    return VolumeFinding(
        reason=VolumeFindingReason.NCONNECT_IGNORED,
        severity=Severity.WARNING,
        message=(
            f"nconnect={wanted} is declared but the client has {connections} connection(s) to {server}: "
            f"nconnect is fixed by the first mount of a server and {others} other mount(s) on this node use "
            f"{server}, so this mount's nconnect was ignored."
        ),
        remedy=(
            f"Declare the same nconnect for every volume of {server}, or move the other consumers off this "
            "node so that the next mount sets it."
        ),
        option="nconnect",
        expected=wanted,
        actual=connections,
    )
