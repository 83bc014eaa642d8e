"""The agent's Prometheus metrics: live NFS operation rates per pod volume, and the agent's own health.

The report holds totals since each mount was made; what an alert needs is the
rate now. Rates are computed between two scans: ops per second, and the average
round trip, execute and queue time of the operations completed in between (the
queue time growing past the round trip is the signature of a saturated
connection, which nconnect relieves).

Every per-volume series is labelled with the pod's namespace and workload (core/workload.py) beside its
UID, so that a dashboard or an alert can say whose volume it is. Their number is bounded per node: at most
``max_volumes`` pod volumes are served (--max-volume-series), each with at most SERIES_PER_VOLUME series,
the busiest (bytes over the activity window) first. Past the cap, the others' series are not served and
``mountwarden_agent_volumes_over_cap`` says how many were left out (the report still holds every volume).
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mountwarden.agent.report import WRITTEN, WriteOutcome
from mountwarden.agent.scan import MAX_REPORTED_OPERATIONS
from mountwarden.core.node.scan import NodeScan, OperationTotals

#: Pod volumes whose series one agent serves by default (--max-volume-series); a node runs 110 pods by default.
DEFAULT_MAX_VOLUME_SERIES = 200
#: The per-volume series of one volume at most: four per operation (ops, rtt, execute, queue) for the operations
#: the report keeps, and six of its activity (read, write, retransmissions, major timeouts, reconnects, share in D).
RATE_FAMILIES, ACTIVITY_FAMILIES = 4, 6
SERIES_PER_VOLUME = RATE_FAMILIES * MAX_REPORTED_OPERATIONS + ACTIVITY_FAMILIES
#: Who a pod volume belongs to, by pod UID: (namespace, workload); a pod not known (yet) has neither.
Owners = Mapping[str, tuple[str, str]]

#: A volume's identity between scans: pod UID ("" for staging), volume, mount point, superblock.
#: A remount gets a new superblock, so its counters, which restart at zero, are never
#: subtracted from the old ones.
VolumeKey = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class OperationRate:
    ops_per_second: float
    #: Averages over the operations completed between the two scans; None when none completed.
    avg_rtt_ms: float | None
    avg_execute_ms: float | None
    avg_queue_ms: float | None


def volume_totals(scan: NodeScan) -> dict[VolumeKey, dict[str, OperationTotals]]:
    """Each volume's busiest operations (as many as the report keeps), by volume identity."""
    return {
        (volume.pod_uid or "", volume.volume_name, volume.mount_point, volume.superblock): dict(
            list(volume.operations.items())[:MAX_REPORTED_OPERATIONS]
        )
        for volume in scan.volumes
    }


def _delta_average(before: int | None, after: int | None, ops: int) -> float | None:
    if before is None or after is None or ops <= 0 or after < before:
        return None
    return (after - before) / ops


def operation_rates(
    previous: Mapping[VolumeKey, Mapping[str, OperationTotals]],
    current: Mapping[VolumeKey, Mapping[str, OperationTotals]],
    seconds: float,
) -> dict[tuple[VolumeKey, str], OperationRate]:
    """Rates of every operation present in both scans; counters that went backwards are skipped."""
    rates: dict[tuple[VolumeKey, str], OperationRate] = {}
    if seconds <= 0:
        return rates
    for key, operations in current.items():
        before_ops = previous.get(key, {})
        for name, now in operations.items():
            before = before_ops.get(name)
            if before is None or now.ops < before.ops:
                continue
            completed = now.ops - before.ops
            rates[(key, name)] = OperationRate(
                ops_per_second=completed / seconds,
                avg_rtt_ms=_delta_average(before.rtt_ms, now.rtt_ms, completed),
                avg_execute_ms=_delta_average(before.execute_ms, now.execute_ms, completed),
                avg_queue_ms=_delta_average(before.queue_ms, now.queue_ms, completed),
            )
    return rates


@dataclass(frozen=True, slots=True)
class ServedVolumes:
    """The pod volumes whose series are served (pod UID, volume) and who owns each pod; replaced as a whole."""

    served: frozenset[tuple[str, str]] = frozenset()
    owners: Owners | None = None

    def labels(self, node: str, pod_uid: str, volume: str) -> list[str] | None:
        """The volume's labels (node, namespace, workload, pod_uid, volume), or None when it is over the cap."""
        if (pod_uid, volume) not in self.served:
            return None
        namespace, workload = (self.owners or {}).get(pod_uid, ("", ""))
        return [node, namespace, workload, pod_uid, volume]


VOLUME_LABELS = ("node", "namespace", "workload", "pod_uid", "volume")


class _RatesCollector(Collector):
    """Serves the rates of the last two scans; replaced as a whole, so a scrape never sees half of one."""

    LABELS = (*VOLUME_LABELS, "op")

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self.rates: dict[tuple[VolumeKey, str], OperationRate] = {}
        self.volumes = ServedVolumes()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rates, volumes = self.rates, self.volumes
        families = {
            "ops_per_second": GaugeMetricFamily(
                "mountwarden_nfs_operations_per_second",
                "NFS requests completed per second between the last two scans.", labels=self.LABELS),
            "avg_rtt_ms": GaugeMetricFamily(
                "mountwarden_nfs_rtt_milliseconds",
                "Average round trip (wire and server) of the requests completed between the last two scans.",
                labels=self.LABELS),
            "avg_execute_ms": GaugeMetricFamily(
                "mountwarden_nfs_execute_milliseconds",
                "Average whole life of the requests completed between the last two scans.", labels=self.LABELS),
            "avg_queue_ms": GaugeMetricFamily(
                "mountwarden_nfs_queue_milliseconds",
                "Average time waiting to be sent, of the requests completed between the last two scans.",
                labels=self.LABELS),
        }
        seen: set[tuple[str, str, str]] = set()
        for ((pod_uid, volume, _mount_point, _superblock), op), rate in rates.items():
            # A volume mounted twice in one pod (a mount over a mount) would repeat a label set,
            # which Prometheus rejects: the first one, in mount-table order, is served.
            if (pod_uid, volume, op) in seen:
                continue
            seen.add((pod_uid, volume, op))
            served = volumes.labels(self.node_name, pod_uid, volume)
            if served is None:
                continue
            labels = [*served, op]
            for field, family in families.items():
                value = getattr(rate, field)
                if value is not None:
                    family.add_metric(labels, value)
        yield from families.values()


class _ActivityCollector(Collector):
    """Each volume's throughput, transport health and process states over the agent's activity window."""

    LABELS = VOLUME_LABELS
    FAMILIES = (
        ("read_bytes_per_second", "mountwarden_nfs_read_bytes_per_second",
         "Bytes read from the NFS server per second, over the agent's activity window."),
        ("write_bytes_per_second", "mountwarden_nfs_write_bytes_per_second",
         "Bytes written to the NFS server per second, over the agent's activity window."),
        ("retransmissions_per_second", "mountwarden_nfs_retransmissions_per_second",
         "NFS requests sent again per second (no reply within timeo), over the agent's activity window."),
        ("major_timeouts_per_second", "mountwarden_nfs_major_timeouts_per_second",
         "NFS requests unanswered for timeo x retrans per second, over the agent's activity window."),
        ("reconnects_per_second", "mountwarden_nfs_reconnects_per_second",
         "Connections to the NFS server made again per second, over the agent's activity window."),
    )

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self.recent: dict = {}
        self.volumes = ServedVolumes()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        recent, volumes = self.recent, self.volumes
        families = {field: GaugeMetricFamily(name, text, labels=self.LABELS) for field, name, text in self.FAMILIES}
        stuck = GaugeMetricFamily(
            "mountwarden_nfs_uninterruptible_share",
            "Share of the samples of a pod's processes using the volume that were in uninterruptible sleep (D).",
            labels=self.LABELS)
        seen: set[tuple[str, str]] = set()
        for (pod_uid, volume, _mount_point, _superblock), found in recent.items():
            if (pod_uid, volume) in seen:
                continue  # a mount over a mount: the first one, as for the operation rates
            seen.add((pod_uid, volume))
            labels = volumes.labels(self.node_name, pod_uid, volume)
            if labels is None:
                continue
            if found.activity is not None:
                for field, family in families.items():
                    family.add_metric(labels, getattr(found.activity, field))
            if found.processes is not None and found.processes.samples:
                stuck.add_metric(labels, found.processes.share)
        yield from families.values()
        yield stuck


def busiest_volumes(current: Mapping[VolumeKey, object], recent: Mapping[VolumeKey, object],
                    cap: int) -> tuple[frozenset[tuple[str, str]], int]:
    """The (pod UID, volume) pairs to serve, at most ``cap``, the most bytes moved over the activity window
    first (ties by name, so that the choice is stable), and how many were left out."""
    moved: dict[tuple[str, str], float] = {}
    for key in (*current, *recent):
        found = recent.get(key)
        activity = getattr(found, "activity", None)
        rate = activity.read_bytes_per_second + activity.write_bytes_per_second if activity is not None else 0.0
        pair = (key[0], key[1])
        moved[pair] = max(moved.get(pair, 0.0), rate)
    ranked = sorted(moved, key=lambda pair: (-moved[pair], pair))
    return frozenset(ranked[:cap]), max(0, len(ranked) - cap)


class AgentMetrics:
    """Everything /metrics serves, on a registry of its own."""

    def __init__(self, node_name: str, registry: CollectorRegistry | None = None,
                 max_volumes: int = DEFAULT_MAX_VOLUME_SERIES) -> None:
        self.registry = registry or CollectorRegistry()
        self.max_volumes = max_volumes
        self.scan_duration = Histogram(
            "mountwarden_agent_scan_duration_seconds", "Time one scan of the node's /proc takes.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=self.registry)
        self.scan_errors = Counter(
            "mountwarden_agent_scan_errors", "Scans that failed (the loop goes on).", registry=self.registry)
        self.write_errors = Counter(
            "mountwarden_agent_write_errors", "Report writes that failed (retried next scan).",
            registry=self.registry)
        self.writes = Counter(
            "mountwarden_agent_report_writes", "NodeMountReport writes, by why they were made.",
            ["outcome"], registry=self.registry)
        self.woken = Counter(
            "mountwarden_agent_scans_woken", "Scans made before their interval because the host's mount table "
            "changed (or the node's pods did).", registry=self.registry)
        self.skipped_lines = Gauge(
            "mountwarden_agent_skipped_lines", "Malformed /proc lines skipped by the last scan.",
            registry=self.registry)
        self.volumes = Gauge(
            "mountwarden_agent_volumes", "Pod volumes on network filesystems found by the last scan.",
            registry=self.registry)
        self.last_write = Gauge(
            "mountwarden_agent_last_successful_write_timestamp_seconds",
            "When the NodeMountReport was last written (Unix time); 0 before the first write.",
            registry=self.registry)
        self.volumes_over_cap = Gauge(
            "mountwarden_agent_volumes_over_cap",
            "Pod volumes the last scan found past --max-volume-series (the least busy): their per-volume series "
            "are not served (the report still holds them).", registry=self.registry)
        self._rates = _RatesCollector(node_name)
        self.registry.register(self._rates)
        self._activity = _ActivityCollector(node_name)
        self.registry.register(self._activity)
        self._previous: dict[VolumeKey, dict[str, OperationTotals]] | None = None
        self._previous_at = 0.0

    def scanned(self, scan: NodeScan, duration_seconds: float, at: float, recent: dict | None = None,
                owners: Owners | None = None) -> None:
        """Record a successful scan made at monotonic time ``at`` (``recent``: each volume's VolumeActivity;
        ``owners``: each pod's namespace and workload)."""
        self.scan_duration.observe(duration_seconds)
        recent = dict(recent or {})
        self.skipped_lines.set(scan.skipped_lines)
        self.volumes.set(len(scan.volumes))
        current = volume_totals(scan)
        served, over = busiest_volumes(current, recent, self.max_volumes)
        self.volumes_over_cap.set(over)
        volumes = ServedVolumes(served, dict(owners or {}))
        self._activity.recent, self._activity.volumes = recent, volumes
        if self._previous is not None:
            self._rates.rates = operation_rates(self._previous, current, at - self._previous_at)
        self._rates.volumes = volumes
        self._previous, self._previous_at = current, at

    def written(self, outcome: WriteOutcome, at_unix: float) -> None:
        if outcome not in WRITTEN:
            return
        self.writes.labels(outcome=str(outcome)).inc()
        self.last_write.set(at_unix)
