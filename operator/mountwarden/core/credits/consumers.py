"""Who drains a file system: metered bytes per pod volume, from the node reports' per-op counters.

CloudWatch says how much a file system is metered, not for whom. Every node's
NodeMountReport carries, for each pod volume, the NFS client's per-operation totals
since the mount was made (mountstats: requests, bytes sent, bytes received) and the
mount's age. EFS meters each request as at least 4 KiB and reads at one third (EFS
User Guide, "Amazon CloudWatch metrics for Amazon EFS", MeteredIOBytes; the same rule
as :func:`~mountwarden.core.credits.metering.metered_bytes`), so per mount:

- reads (READ, READ_PLUS): ``max(bytes received, requests x 4 KiB) / 3``;
- writes (WRITE): ``max(bytes sent, requests x 4 KiB)``, in full;
- every other operation (GETATTR, LOOKUP, ACCESS, OPEN, LOCK, ...) is metadata:
  ``max(bytes received, requests x 4 KiB)``.

And what the same requests would be billed in Elastic mode: reads and writes at
``max(bytes, requests x 32 KiB)``, metadata as above (:mod:`.pricing`).

What these estimates are, and are not: byte counters include RPC headers (a few
hundred bytes a request, lost in the 4 KiB minimum for small requests); a minimum
applied to totals is a lower bound of the per-request sum; the agent keeps each
mount's ten busiest operations, so rare ones are missing; the rate is the average
since the mount was made (``ageSeconds``), not the rate now. Mounts that share a
superblock on one node share one set of counters (the kernel keeps them per
superblock), so they are counted once, as one consumer that names every pod.

:func:`reported_volumes` takes them from the one reader of NodeMountReports (core/node/report.py).
"""

import ipaddress
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from mountwarden.core.credits.bucket import READ_METERING_FACTOR, SMALL_REQUEST_BYTES, ThroughputMode
from mountwarden.core.credits.metering import ELASTIC_DATA_MINIMUM_BYTES
from mountwarden.core.credits.pricing import PRICES, SECONDS_PER_MONTH, ThroughputPrices, round_cents
from mountwarden.core.credits.units import GIB
from mountwarden.core.node.report import NodeReport, OperationCounters

#: NFS operations that carry file data (mountstats names, NFSv3 and NFSv4).
READ_OPERATIONS = frozenset({"READ", "READ_PLUS"})
WRITE_OPERATIONS = frozenset({"WRITE"})
#: Consumers named in a profile's status and in the metrics, busiest first.
TOP_CONSUMERS = 5


@dataclass(frozen=True)
class ReportedVolume:
    """A pod volume as its node's report gives it, with what metering needs."""

    node: str
    pod_uid: str | None
    volume_name: str
    superblock: str
    age_seconds: float | None
    operations: Mapping[str, OperationCounters]
    scan_time: datetime | None = None
    #: Kind/name of the pod's controller, when the agent named it.
    pod_owner: str | None = None
    #: The address the kernel talks to (addr=); a loopback one is a local TLS tunnel.
    address: str | None = None
    #: Through a tunnel: the address the tunnel is connected to, when the agent could read it.
    tunnel_peer: str | None = None

    @property
    def through_tunnel(self) -> bool:
        return self.address is not None and _is_loopback(self.address)

    @property
    def mount_target_address(self) -> str | None:
        """The server address the volume's bytes really go to; None when a tunnel hides it."""
        return self.tunnel_peer if self.through_tunnel else self.address


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def reported_volumes(report: NodeReport) -> list[ReportedVolume]:
    """The pod volumes of one node's report, with what metering and the zone check need."""
    volumes = []
    for mount in report.mounts:
        options = dict(option.partition("=")[::2] for option in mount.effective_options)
        port = options.get("port", "")
        peer = report.tunnel_peers.get(int(port)) if port.isdigit() else None
        volumes.append(ReportedVolume(report.node, mount.pod_uid, mount.volume_name, mount.superblock,
                                      mount.age_seconds, mount.operations, report.scan_time, mount.pod_owner,
                                      mount.server_address or options.get("addr") or None, peer))
    return volumes


@dataclass(frozen=True)
class MeteredEstimate:
    """What a mount's requests were metered as (Bursting and Provisioned rules) and would be billed in Elastic."""

    read_bytes: float
    write_bytes: float
    metadata_ops: int
    #: Bursting metering: reads at one third, every request at least 4 KiB.
    metered_bytes: float
    #: Elastic billing: reads and writes at least 32 KiB, metadata at least 4 KiB, reads in full.
    elastic_bytes: float
    #: Some read or write had no byte counter: its bytes are the minimum alone.
    bytes_missing: bool = False
    #: The reads among ``elastic_bytes`` (priced apart from writes and metadata).
    elastic_read_bytes: float = 0.0

    def elastic_cost(self, prices: ThroughputPrices = PRICES) -> float:
        """Dollars these requests are billed in Elastic mode; metadata priced as writes, as ElasticUsage.cost."""
        return (self.elastic_read_bytes / GIB * prices.elastic_read_per_gib
                + (self.elastic_bytes - self.elastic_read_bytes) / GIB * prices.elastic_write_per_gib)


def estimate_metering(operations: Mapping[str, OperationCounters]) -> MeteredEstimate:
    """Meter one mount's per-operation totals (see the module for the rules)."""
    read_bytes = write_bytes = metered = elastic = elastic_reads = 0.0
    metadata_ops = 0
    missing = False
    for name, totals in operations.items():
        if name in READ_OPERATIONS:
            missing |= totals.bytes_received is None
            payload = float(totals.bytes_received or 0)
            read_bytes += payload
            metered += max(payload, totals.ops * SMALL_REQUEST_BYTES) * READ_METERING_FACTOR
            elastic_reads += max(payload, totals.ops * ELASTIC_DATA_MINIMUM_BYTES)
            elastic += max(payload, totals.ops * ELASTIC_DATA_MINIMUM_BYTES)
        elif name in WRITE_OPERATIONS:
            missing |= totals.bytes_sent is None
            payload = float(totals.bytes_sent or 0)
            write_bytes += payload
            metered += max(payload, totals.ops * SMALL_REQUEST_BYTES)
            elastic += max(payload, totals.ops * ELASTIC_DATA_MINIMUM_BYTES)
        else:
            metadata_ops += totals.ops
            billed = max(float(totals.bytes_received or 0), totals.ops * SMALL_REQUEST_BYTES)
            metered += billed
            elastic += billed
    return MeteredEstimate(read_bytes, write_bytes, metadata_ops, metered, elastic, missing, elastic_reads)


@dataclass(frozen=True)
class VolumeOwner:
    """Whose a pod volume is: the pod, and the profile and file system of its PersistentVolume."""

    pod: str  # namespace/name
    profile: str
    file_system_id: str
    #: namespace/Kind/name of the pod's controller as the agent named it, else the pod itself (namespace/name).
    workload: str = ""

    @property
    def namespace(self) -> str:
        return self.pod.partition("/")[0]


@dataclass(frozen=True)
class VolumeOwners:
    """Lookups from a report's (pod UID, volume name) to its owner; each answers None when it does not know."""

    pod_of: Callable[[str], str | None]  # pod UID -> namespace/name
    storage_class_of: Callable[[str], str | None]  # PersistentVolume -> StorageClass
    profile_of: Callable[[str], str | None]  # StorageClass -> StorageProfile
    file_system_of: Callable[[str], str | None]  # StorageProfile -> EFS file system id

    @classmethod
    def from_mappings(
        cls,
        pods: Mapping[str, str],
        storage_classes: Mapping[str, str],
        profiles: Mapping[str, str],
        file_systems: Mapping[str, str],
    ) -> "VolumeOwners":
        return cls(pods.get, storage_classes.get, profiles.get, file_systems.get)

    def owner_of(self, volume: ReportedVolume) -> VolumeOwner | None:
        if not volume.pod_uid:
            return None  # a CSI staging mount belongs to no pod
        storage_class = self.storage_class_of(volume.volume_name)
        profile = self.profile_of(storage_class) if storage_class else None
        file_system = self.file_system_of(profile) if profile else None
        if not profile or not file_system:
            return None
        pod = self.pod_of(volume.pod_uid) or volume.pod_uid
        namespace = pod.partition("/")[0] if "/" in pod else ""
        workload = f"{namespace}/{volume.pod_owner}" if volume.pod_owner and namespace else pod
        return VolumeOwner(pod, profile, file_system, workload)


@dataclass(frozen=True)
class Consumer:
    """One set of counters on one node: a pod volume, or several sharing one superblock."""

    node: str
    volumes: tuple[str, ...]
    pods: tuple[str, ...]
    profiles: tuple[str, ...]
    estimate: MeteredEstimate
    age_seconds: float | None
    #: The workloads of its pods (namespace/Kind/name), for the cost per namespace and workload.
    workloads: tuple[str, ...] = ()

    @property
    def elastic_monthly_usd(self) -> float | None:
        """What these requests would be billed a month in Elastic mode, at their average rate since the mount."""
        rate = _rate(self.estimate.elastic_cost(), self.age_seconds)
        return rate * SECONDS_PER_MONTH if rate is not None else None

    @property
    def metered_bytes_per_second(self) -> float | None:
        return _rate(self.estimate.metered_bytes, self.age_seconds)

    @property
    def elastic_bytes_per_second(self) -> float | None:
        return _rate(self.estimate.elastic_bytes, self.age_seconds)

    def to_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "pods": list(self.pods),
            "volumes": list(self.volumes),
            "profiles": list(self.profiles),
            "metered_bytes": self.estimate.metered_bytes,
            "metered_bytes_per_second": self.metered_bytes_per_second,
            "elastic_bytes_per_second": self.elastic_bytes_per_second,
            "read_bytes": self.estimate.read_bytes,
            "write_bytes": self.estimate.write_bytes,
            "metadata_ops": self.estimate.metadata_ops,
            "mounted_seconds": self.age_seconds,
        }


@dataclass(frozen=True)
class ProfileUsage:
    profile: str
    metered_bytes_per_second: float
    consumers: int


@dataclass(frozen=True)
class ConsumerSummary:
    """The consumers of one file system, busiest first, and the estimate per profile."""

    file_system_id: str
    metered_bytes_per_second: float
    profiles: tuple[ProfileUsage, ...]
    top: tuple[Consumer, ...]
    #: Consumers found in all (``top`` holds at most TOP_CONSUMERS of them).
    consumers: int
    newest_report: datetime | None = None
    notes: tuple[str, ...] = field(default=())
    #: Every consumer's load per namespace (and workload), busiest first.
    namespaces: tuple["NamespaceUsage", ...] = ()

    def to_json(self, mode: ThroughputMode | None = None, provisioned_monthly_usd: float | None = None
                ) -> dict[str, object]:
        """The status's consumers, the namespaces priced at the file system's throughput ``mode``."""
        return {
            "namespaces": price_namespaces(self, mode, provisioned_monthly_usd),
            "cost_basis": cost_basis(mode),
            "estimated_metered_bytes_per_second": self.metered_bytes_per_second,
            "consumers": self.consumers,
            "by_profile": [
                {"profile": p.profile, "metered_bytes_per_second": p.metered_bytes_per_second, "consumers": p.consumers}
                for p in self.profiles
            ],
            "top": [consumer.to_json() for consumer in self.top],
            "newest_report": self.newest_report.isoformat() if self.newest_report else None,
            "notes": list(self.notes),
        }


#: How the figures were estimated, for the status and the CLI.
ESTIMATE_NOTE = (
    "estimated from the node reports' per-operation totals since each mount was made (the ten busiest "
    "operations): metadata requests at 4 KiB, reads at a third, writes in full, as EFS meters them; "
    "a rate is the average since the mount"
)


def summarize_consumers(
    volumes: Iterable[ReportedVolume], owners: VolumeOwners, file_system_id: str, *, top: int = TOP_CONSUMERS
) -> ConsumerSummary:
    """Every pod volume on ``file_system_id`` whose owner is known, grouped by (node, superblock), ranked."""
    groups: dict[tuple[str, str], list[tuple[ReportedVolume, VolumeOwner]]] = defaultdict(list)
    newest: datetime | None = None
    for volume in volumes:
        owner = owners.owner_of(volume)
        if owner is None or owner.file_system_id != file_system_id:
            continue
        groups[(volume.node, volume.superblock)].append((volume, owner))
        if volume.scan_time and (newest is None or volume.scan_time > newest):
            newest = volume.scan_time
    consumers = [_consumer(node, members) for (node, _), members in groups.items()]
    consumers.sort(key=_busiest_first)
    by_profile: dict[str, list[float]] = defaultdict(list)
    for consumer in consumers:
        rate = consumer.metered_bytes_per_second or 0.0
        for profile in consumer.profiles:  # a superblock shared by several profiles is split evenly
            by_profile[profile].append(rate / len(consumer.profiles))
    profiles = sorted(
        (ProfileUsage(name, math.fsum(rates), len(rates)) for name, rates in by_profile.items()),
        key=lambda usage: (-usage.metered_bytes_per_second, usage.profile),
    )
    notes = [ESTIMATE_NOTE]
    if any(consumer.estimate.bytes_missing for consumer in consumers):
        notes.append("some reports carry no byte counters (an older agent): their reads and writes count "
                     "at the 4 KiB minimum only")
    if any(consumer.age_seconds is None for consumer in consumers):
        notes.append("some reports carry no mount age (an older agent): those consumers have totals, no rate")
    return ConsumerSummary(
        file_system_id=file_system_id,
        metered_bytes_per_second=math.fsum(usage.metered_bytes_per_second for usage in profiles),
        profiles=tuple(profiles),
        top=tuple(consumers[:top]),
        consumers=len(consumers),
        newest_report=newest,
        notes=tuple(notes),
        namespaces=namespace_usage(consumers),
    )


@dataclass(frozen=True)
class WorkloadUsage:
    workload: str  # namespace/Kind/name, or namespace/pod for a bare pod
    metered_bytes_per_second: float
    elastic_monthly_usd: float


@dataclass(frozen=True)
class NamespaceUsage:
    """One namespace's share of a file system: its metered rate, what Elastic would bill it, per workload."""

    namespace: str
    metered_bytes_per_second: float
    elastic_monthly_usd: float
    workloads: tuple[WorkloadUsage, ...]


def namespace_usage(consumers: Iterable[Consumer]) -> tuple[NamespaceUsage, ...]:
    """Every consumer's rates summed per namespace and workload; a superblock several workloads share is split
    evenly among them, as by_profile splits it among profiles. Consumers with no rate (no mount age) count 0."""
    by_workload: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for consumer in consumers:
        if not consumer.workloads:
            continue
        share = 1 / len(consumer.workloads)
        rate, monthly = consumer.metered_bytes_per_second or 0.0, consumer.elastic_monthly_usd or 0.0
        for workload in consumer.workloads:
            by_workload[workload].append((rate * share, monthly * share))
    by_namespace: dict[str, list[WorkloadUsage]] = defaultdict(list)
    for workload, parts in by_workload.items():
        by_namespace[workload.partition("/")[0]].append(WorkloadUsage(
            workload, math.fsum(rate for rate, _ in parts), math.fsum(cost for _, cost in parts)))
    usages = [NamespaceUsage(namespace, math.fsum(w.metered_bytes_per_second for w in workloads),
                             math.fsum(w.elastic_monthly_usd for w in workloads),
                             tuple(sorted(workloads, key=lambda w: (-w.metered_bytes_per_second, w.workload))))
              for namespace, workloads in by_namespace.items()]
    return tuple(sorted(usages, key=lambda u: (-u.metered_bytes_per_second, u.namespace)))


def price_namespaces(summary: ConsumerSummary, mode: ThroughputMode | None,
                     provisioned_monthly_usd: float | None = None, prices: ThroughputPrices = PRICES) -> list[dict]:
    """Each namespace's cost at the file system's throughput mode, in the status's (camelCase) form.

    Elastic bills each namespace's requests (reads and writes at 32 KiB or more, metadata at 4 KiB); Provisioned
    bills the provisioned throughput, split here by share of metered bytes; Bursting bills no throughput at all:
    a namespace's share of metered bytes is its share of the credits drawn, and its cost is left out.
    """
    total = summary.metered_bytes_per_second
    rows = []
    for usage in summary.namespaces:
        share = usage.metered_bytes_per_second / total if total > 0 else None

        def cost(rate: float, elastic: float) -> float | None:
            if mode is ThroughputMode.ELASTIC:
                return round_cents(elastic)
            if mode is ThroughputMode.PROVISIONED and provisioned_monthly_usd is not None and total > 0:
                return round_cents(provisioned_monthly_usd * rate / total)
            return None

        rows.append({
            "namespace": usage.namespace, "meteredBytesPerSecond": usage.metered_bytes_per_second, "share": share,
            "monthlyCostUsd": cost(usage.metered_bytes_per_second, usage.elastic_monthly_usd),
            "elasticMonthlyCostUsd": round_cents(usage.elastic_monthly_usd),
            "workloads": [{"workload": w.workload, "meteredBytesPerSecond": w.metered_bytes_per_second,
                           "monthlyCostUsd": cost(w.metered_bytes_per_second, w.elastic_monthly_usd)}
                          for w in usage.workloads],
        })
    return rows


def cost_basis(mode: ThroughputMode | None, prices: ThroughputPrices = PRICES) -> str:
    """How price_namespaces priced its rows, for the status and the CLI."""
    if mode is ThroughputMode.ELASTIC:
        return f"Elastic: each namespace's requests as Elastic bills them, {prices.describe()}"
    if mode is ThroughputMode.PROVISIONED:
        return f"Provisioned: the provisioned throughput's bill split by share of metered bytes, {prices.describe()}"
    return ("Bursting: no throughput is billed; each namespace's share of metered bytes is its share of the credits "
            "drawn (elasticMonthlyCostUsd: what Elastic would bill it)")


def _consumer(node: str, members: list[tuple[ReportedVolume, VolumeOwner]]) -> Consumer:
    first = members[0][0]  # the counters are the superblock's: every member has the same ones
    ages = [volume.age_seconds for volume, _ in members if volume.age_seconds is not None]
    return Consumer(
        node=node,
        volumes=tuple(sorted({volume.volume_name for volume, _ in members})),
        pods=tuple(sorted({owner.pod for _, owner in members})),
        profiles=tuple(sorted({owner.profile for _, owner in members})),
        estimate=estimate_metering(first.operations),
        age_seconds=max(ages) if ages else None,
        workloads=tuple(sorted({owner.workload for _, owner in members})),
    )


def _busiest_first(consumer: Consumer) -> tuple[int, float, str]:
    rate = consumer.metered_bytes_per_second
    # Those with a rate first, by rate; those without (no age) after, by their totals.
    return (0, -rate, consumer.node) if rate is not None else (1, -consumer.estimate.metered_bytes, consumer.node)


def _rate(total: float, seconds: float | None) -> float | None:
    if not seconds or seconds <= 0:
        return None
    rate = total / seconds
    return rate if math.isfinite(rate) else None


