"""One scan of a node: read its proc root, find the pod volumes on network filesystems, build the report.

Reading is the only I/O here (through ProcRoot, which never fails on a vanished
or unreadable entry); what the mounts mean is decided by the pure
``mountwarden.core.node.scan``.
"""

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from mountwarden import __version__
from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.activity import ActivityTracker, VolumeActivity, volume_key
from mountwarden.agent.failures import FailureWatch
from mountwarden.agent.probe import PROBE_FORBIDDEN, STATVFS_PROBE, NullProbe, ServerProbe
from mountwarden.agent.userspace import NfsSockets
from mountwarden.api.nodemountreport import (
    ITEMS_MAX,
    MountActivity,
    MountedVolume,
    NodeFailure,
    NodeMountReportSpec,
    OperationSummary,
    OptionsSource,
    ProcessStates,
    SqliteDatabase,
    StuckProcessInfo,
    VolumePlugin,
)
from mountwarden.core.node.kubelet import normalize_root
from mountwarden.core.node.scan import NodeScan, NodeVolume, OperationTotals, ScannedMount, scan_node

log = logging.getLogger(__name__)

#: Busiest operations kept per volume, in the report and on /metrics: NFSv4 has about 60,
#: most never used, and a report for hundreds of volumes must stay far below etcd's 1.5 MiB.
MAX_REPORTED_OPERATIONS = 10
#: A report is one etcd object (1.5 MiB at most by default): past this many bytes of JSON the
#: per-operation totals, which /metrics serves anyway, are left out of it.
MAX_REPORT_BYTES = 1_000_000
#: Symlinks followed when resolving the kubelet root on the host, as the kernel's own limit.
_MAX_SYMLINKS = 40

#: Who a pod volume belongs to: (pod UID, volume name) -> the report's pod fields (podName, podNamespace,
#: podOwner, claimName as pod_name, ...), or {} when the pod is not known (yet).
PodDescriber = Callable[[str, str], dict[str, str | None]]

#: What the agent logs when the host's NFS statistics are root's alone to read: docs/security.md names it.
MOUNTSTATS_FORBIDDEN = "MountstatsForbidden"

#: The seam for the SQLite scan: given the proc root and the node's network mounts, the
#: SQLite databases in use on them. The agent runs without one until it is plugged in.
SqliteScanner = Callable[[ProcRoot, Sequence[ScannedMount]], Sequence[SqliteDatabase]]
#: The seam for the scan of pods' processes that talk NFS themselves (it reads other processes too).
#: Reads the NFS sockets processes hold themselves: userspace clients and TLS tunnels (agent.userspace).
UserspaceScanner = Callable[[ProcRoot], NfsSockets]


class ScanError(RuntimeError):
    """The proc root cannot be scanned at all (as opposed to an entry that vanished mid-scan)."""


@dataclass(frozen=True)
class ScanResult:
    spec: NodeMountReportSpec
    #: The full scan, with every operation's raw totals, for the rates on /metrics.
    scan: NodeScan
    duration_seconds: float
    #: Each volume's recent activity (empty without a tracker), for /metrics.
    recent: dict = field(default_factory=dict)
    #: Where the duration went: on the scanning thread's CPU; waiting for bounded calls that did not return in
    #: time (adapters/bounded.py: the statvfs() probe's one timeout, the SQLite scan's stat and reads; the RPC
    #: NULL probe's sockets are not among them); sleeping between rounds of process samples.
    cpu_seconds: float = 0.0
    waited_seconds: float = 0.0
    paused_seconds: float = 0.0

    @property
    def other_seconds(self) -> float:
        """Off the CPU for anything else: reading /proc, servers that did answer, the scheduler. A call that
        waited on a server outside the bounded calls would show here (tests/kernel/test_dead_server.py)."""
        return max(0.0, self.duration_seconds - self.cpu_seconds - self.waited_seconds - self.paused_seconds)

    def account(self) -> str:
        return (f"{self.duration_seconds:.3f} s: {self.cpu_seconds:.3f} s on CPU, {self.waited_seconds:.3f} s "
                f"waiting for servers that did not answer, {self.paused_seconds:.3f} s between process samples, "
                f"{self.other_seconds:.3f} s otherwise off CPU")


def resolve_on_host(proc: ProcRoot, path: str) -> str:
    """``path`` with the host's symlinks resolved, read through ``<proc>/1/root``.

    In a pod, /var/lib/kubelet of the container is not the host's: following
    links through pid 1's root directory resolves them on the host, where the
    kernel resolved them when the kubelet mounted. Any failure (no such
    directory, no permission, a loop) leaves the path as given.
    """
    host_root = proc.path / "1" / "root"
    pending = [part for part in path.split("/") if part]
    resolved: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        try:
            target = os.readlink(host_root.joinpath(*resolved, part))
        except OSError:  # not a link, or nothing there: keep the name as it is
            resolved.append(part)
            continue
        links += 1
        if links > _MAX_SYMLINKS:
            return path
        if target.startswith("/"):
            resolved = []
        pending = [piece for piece in target.split("/") if piece] + pending
    return "/" + "/".join(resolved)


def kubelet_roots(proc: ProcRoot, configured: str) -> list[str]:
    """The configured kubelet root and, when it is a symlink on the host, where it leads."""
    roots = [normalize_root(configured)]
    resolved = normalize_root(resolve_on_host(proc, configured))
    if resolved not in roots:
        roots.append(resolved)
    return roots


def _operation_summary(totals: OperationTotals) -> OperationSummary:
    return OperationSummary(
        ops=totals.ops,
        errors=totals.errors,
        avg_rtt_ms=totals.avg_rtt_ms,
        avg_execute_ms=totals.avg_execute_ms,
        avg_queue_ms=totals.avg_queue_ms,
        bytes_sent=totals.bytes_sent,
        bytes_received=totals.bytes_received,
    )


def _activity(recent: VolumeActivity | None) -> tuple[MountActivity | None, ProcessStates | None]:
    if recent is None:
        return None, None
    rates = MountActivity(**asdict(recent.activity)) if recent.activity is not None else None
    samples = recent.processes
    states = ProcessStates(samples=samples.samples, uninterruptible=samples.uninterruptible,
                           processes=samples.processes, uninterruptible_share=samples.share) if samples else None
    return rates, states


def mounted_volume(volume: NodeVolume, server_responding: bool | None = None,
                   recent: VolumeActivity | None = None, pod: dict[str, str | None] | None = None,
                   probe_forbidden: bool = False, probe_name: str = STATVFS_PROBE) -> MountedVolume:
    """A scanned volume in the report's shape, with its busiest operations only (and its pod, when known)."""
    busiest = list(volume.operations.items())[:MAX_REPORTED_OPERATIONS]
    rates, states = _activity(recent)
    notes = list(volume.notes)
    if server_responding is False:
        notes.append(f"{volume.server or 'the server'} did not answer the agent's {probe_name}: processes using this "
                     "volume block until it answers (hard) or get I/O errors (soft).")
    if probe_forbidden:
        notes.append(f"{PROBE_FORBIDDEN}: serverResponding is unknown: the agent may not follow /proc/1/root to "
                     "probe the server; it needs CAP_SYS_PTRACE (the chart's agent.probeServers grants it).")
    return MountedVolume(
        pod_uid=volume.pod_uid,
        **(pod or {}),
        volume_name=volume.volume_name,
        plugin=VolumePlugin(volume.plugin.value),
        driver=volume.driver,
        mount_point=volume.mount_point,
        fstype=volume.fstype,
        source=volume.source,
        server=volume.server,
        server_address=volume.server_address,
        export=volume.export,
        superblock=volume.superblock,
        effective_options=list(volume.effective_options),
        options_source=OptionsSource(volume.options_source.value),
        shared_with=list(volume.shared_with),
        nfs_version=volume.nfs_version,
        connections=volume.connections,
        server_mounts=volume.server_mounts,
        server_responding=server_responding,
        notes=notes,
        operations={name: _operation_summary(totals) for name, totals in busiest},
        age_seconds=volume.age_seconds,
        activity=rates,
        processes=states,
        # A fork bomb in D state must not make the whole report one the API server refuses: the first ITEMS_MAX.
        stuck_processes=[StuckProcessInfo(pid=p.pid, command=p.command, wchan=p.wchan)
                         for p in list(recent.stuck if recent is not None else ())[:ITEMS_MAX]],
    )


def scan_proc_root(
    proc: ProcRoot,
    *,
    kubelet_root: str,
    network_fstypes: Sequence[str],
    mount_table: int | str = 1,
) -> NodeScan:
    """Read the mount table and NFS statistics (of one moment) of ``mount_table``'s mount namespace, pid 1's (the
    host's) or "self" (the agent's own, which holds the pod volumes when the kubelet's pods directory is
    propagated into it), and find the pod volumes in them."""
    inconsistent_before, forbidden_before = proc.counters.inconsistent, proc.counters.forbidden
    mountinfo, mountstats = proc.mount_tables(mount_table)
    if proc.counters.inconsistent > inconsistent_before:
        log.warning("%s and mountstats changed between every two reads: mounts come and go fast; taking the last",
                    proc.path / str(mount_table) / "mountinfo")
    if not mountinfo.mounts:
        # Never report "no volumes" for a proc root we could not read: that would erase the node's report.
        raise ScanError(
            f"{proc.path / str(mount_table) / 'mountinfo'} is missing, unreadable or empty: is the host's /proc "
            "mounted at --proc-root (and readable)?"
        )
    if not mountstats.devices and proc.counters.forbidden > forbidden_before:
        log.warning("%s: %s may not be read: it is root's, mode 0400, and the agent runs as uid %d: options are read "
                    "from mountinfo (the kernel's defaults left out), with no NFS statistics; run the agent as uid 0, "
                    "or read its own mount table (--mount-table own, with the kubelet's pods directory propagated "
                    "in: the chart's agent.root=false)", MOUNTSTATS_FORBIDDEN,
                    proc.path / str(mount_table) / "mountstats", os.geteuid())
    elif not mountstats.devices:
        log.warning("%s has no devices: options are read from mountinfo, without RPC statistics",
                    proc.path / str(mount_table) / "mountstats")
    return scan_node(
        mountinfo,
        mountstats,
        network_fstypes=network_fstypes,
        kubelet_roots=kubelet_roots(proc, kubelet_root),
    )


def scan_node_report(
    proc: ProcRoot,
    *,
    node_name: str,
    kubelet_root: str,
    network_fstypes: Sequence[str],
    sqlite_scan: SqliteScanner | None = None,
    userspace_scan: UserspaceScanner | None = None,
    probe: ServerProbe | NullProbe | None = None,
    mount_table: int | str = 1,
    tracker: ActivityTracker | None = None,
    describe_pod: PodDescriber | None = None,
    process_rounds: int | None = None,
    failures: FailureWatch | None = None,
    now: datetime | None = None,
) -> ScanResult:
    """One scan of the node, as the NodeMountReport spec the agent writes.

    ``sqlite_scan`` is where the SQLite findings come from; without one the
    report's ``sqlite`` list stays empty. ``describe_pod`` names each volume's pod
    (mountwarden.agent.pods); without one the report gives pod UIDs only. ``process_rounds``
    overrides the tracker's rounds of process samples (1: report a mount change at once).
    ``failures`` judges how the node's mounts broke (the report's ``failures``).
    """
    started, started_cpu, waited_before = time.perf_counter(), time.thread_time(), proc.calls.waited_in_vain
    scan = scan_proc_root(proc, kubelet_root=kubelet_root, network_fstypes=network_fstypes, mount_table=mount_table)
    probed = probe.probe([m for m in scan.network_mounts if m.kubelet is not None]) if probe else None
    responding = probed.responding if probed else {}
    for superblock, answered in responding.items():
        if answered is False:
            log.warning("the server of superblock %s did not answer the %s in %.0f s", superblock, probe.name,
                        probe.timeout)
    with proc.one_scan():  # the walks of the processes below (activity, mount helpers, sockets) list them once
        recent = tracker.observe(scan, rounds=process_rounds) if tracker is not None else {}
        found = failures.judge(scan, probed, probe.timeout if probe else None, recent, _pod_namer(describe_pod),
                               now) if failures is not None else []
        sqlite = list(sqlite_scan(proc, scan.network_mounts)) if sqlite_scan is not None else []
        sockets = userspace_scan(proc) if userspace_scan is not None else None
    userspace = [client.model_copy(update=_pod_names(describe_pod(client.pod_uid, "")) if describe_pod else {})
                 for client in (sockets.clients if sockets is not None else ())]
    for volume in scan.volumes:
        for note in volume.notes:
            log.debug("%s: %s", volume.mount_point, note)
    spec = NodeMountReportSpec(
        node_name=node_name,
        scan_time=now or datetime.now(UTC),
        agent_version=__version__,
        kernel_release=proc.kernel_release(),
        network_fstypes=list(network_fstypes),
        volumes=[mounted_volume(volume, responding.get(volume.superblock), recent.get(volume_key(volume)),
                                describe_pod(volume.pod_uid, volume.volume_name)
                                if describe_pod and volume.pod_uid else None,
                                probe_forbidden=probe is not None and volume.superblock in probe.forbidden,
                                probe_name=probe.name if probe is not None else STATVFS_PROBE)
                 for volume in scan.volumes],
        sqlite=sqlite,
        userspace_clients=userspace,
        tls_tunnels=sockets.tunnels if sockets is not None else [],
        skipped_lines=scan.skipped_lines,
        failures=[NodeFailure.of(finding) for finding in found],
    )
    return ScanResult(spec=_within_size(spec), scan=scan, duration_seconds=time.perf_counter() - started,
                      recent=recent, cpu_seconds=time.thread_time() - started_cpu,
                      waited_seconds=proc.calls.waited_in_vain - waited_before,
                      paused_seconds=tracker.paused if tracker is not None else 0.0)


def _pod_names(described: dict[str, str | None]) -> dict[str, str | None]:
    """The pod's name and namespace of what ``describe_pod`` said (nothing for a pod it does not know)."""
    return {key: described[key] for key in ("pod_name", "pod_namespace") if described.get(key)}


def _pod_namer(describe_pod: PodDescriber | None) -> Callable[[str], str]:
    """How the failures name a pod: by namespace and name where the agent knows them."""
    def name(uid: str) -> str:
        pod = describe_pod(uid, "") if describe_pod is not None else {}
        return f"pod {pod['pod_namespace']}/{pod['pod_name']}" if pod.get("pod_name") else f"pod UID {uid}"
    return name


def _within_size(spec: NodeMountReportSpec) -> NodeMountReportSpec:
    size = len(json.dumps(spec.to_wire()))
    if size <= MAX_REPORT_BYTES:
        return spec
    log.warning("the report of %d volume(s) would be %d bytes: leaving per-operation totals out (see /metrics)",
                len(spec.volumes), size)
    volumes = [volume.model_copy(update={"operations": {}}) for volume in spec.volumes]
    return spec.model_copy(update={"volumes": volumes})
