"""A NodeMountReport as the operator reads it, for compliance, Events and rollouts alike.

mountwarden.api.nodemountreport (read_node_report) reads the wire into these types.

Reports are keyed by the object's name. The report is named after its node, and
the admission webhook lets an agent write only the report named after the node
its token is bound to (and only with that spec.nodeName), so the name is the one
key that is both unique and checked.

What a report says of pods is believed only for pods scheduled on its node
(``of_own_pods``): a node, compromised or confused, can attach findings to its
own pods and to no one else's.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from mountwarden.core.findings import Finding, Reason, Severity
from mountwarden.core.node.activity import Activity, ProcessSamples, StuckProcess
from mountwarden.core.node.userspace import UserspaceClient


@dataclass(frozen=True, slots=True)
class OperationCounters:
    """One NFS operation's totals since the mount was made; a byte counter is None when not reported."""

    ops: int
    bytes_sent: int | None = None
    bytes_received: int | None = None


@dataclass(frozen=True, slots=True)
class ReportedMount:
    """One pod volume (or CSI staging mount) of a report: what the checks of compliance and rollouts read."""

    pod_uid: str | None
    volume_name: str
    mount_point: str
    superblock: str
    effective_options: tuple[str, ...]
    shared_with: tuple[str, ...] = ()
    server: str | None = None
    connections: int | None = None
    server_mounts: int = 1
    #: Seconds since the mount was made, for rates of the counters below (who drains a file system).
    age_seconds: int | None = None
    operations: Mapping[str, OperationCounters] = field(default_factory=dict)
    #: Throughput and transport health over the agent's window; None when the agent had no statistics.
    activity: Activity | None = None
    #: How often the pod's processes using the volume slept uninterruptibly.
    processes: ProcessSamples | None = None
    #: Whether the server answered the agent's probe (None: not probed).
    server_responding: bool | None = None
    #: Kind/name of the pod's controller, when the agent named the pod.
    pod_owner: str | None = None
    #: The address the kernel talks to (mountinfo's addr=); loopback for a TLS tunnel.
    server_address: str | None = None
    #: The pod's processes in uninterruptible sleep on the volume at the agent's last sample.
    stuck_processes: tuple[StuckProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class SqliteUse:
    """A SQLite database in use that a report names, as far as the operator needs it."""

    pod_uid: str | None
    volume_name: str | None
    severity: Severity
    mode: str
    path: str | None
    message: str
    #: What to do, as the agent said it (the runbook's SQLiteOnNFS remedy, with the local volume for the pod).
    remedy: str = ""

    def finding(self) -> Finding:
        evidence = {"mode": self.mode, "path": self.path or ""}
        return Finding(Reason.SQLITE_ON_NFS, self.severity, self.message, self.remedy,
                       evidence={key: value for key, value in evidence.items() if value})


@dataclass(frozen=True, slots=True)
class NodeFinding:
    """A finding the agent made on its node (core/node/failures.py): about one pod, or about the node itself.

    The agent may not know pods' names: it names them by UID, and whoever shows the finding names them.
    """

    finding: Finding
    #: The pod it is about (its volume); None for a finding about the node.
    pod_uid: str | None = None
    #: For a finding about the node: the pods it concerns (a server's), by UID.
    pods: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeReport:
    node: str
    scan_time: datetime
    mounts: tuple[ReportedMount, ...]
    sqlite: tuple[SqliteUse, ...] = ()
    #: Pods' processes that talk NFS with no kernel mount.
    userspace_clients: tuple[UserspaceClient, ...] = ()
    #: The node's kernel release (what its NFS client can do: nconnect since 5.3); None from older agents.
    kernel_release: str | None = None
    #: EFS TLS tunnels on the node: local port (the mount's port=) -> the mount target address the tunnel is
    #: connected to on port 2049; only those the agent could read (its process scan on).
    tunnel_peers: Mapping[int, str] = field(default_factory=dict)
    #: How the node's mounts broke, as the agent judged them (core/node/failures.py).
    findings: tuple[NodeFinding, ...] = ()
    _by_pod_volume: dict[tuple[str | None, str], ReportedMount] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_pod_volume", {(m.pod_uid, m.volume_name): m for m in self.mounts})

    def mount_of(self, pod_uid: str, names: Iterable[str]) -> ReportedMount | None:
        """The pod's mount of a volume known by any of ``names`` (the PV name, the pod's name for it)."""
        return next((self._by_pod_volume[(pod_uid, name)] for name in names
                     if (pod_uid, name) in self._by_pod_volume), None)

    def at(self, mount_point: str) -> ReportedMount | None:
        return next((m for m in self.mounts if m.mount_point == mount_point), None)


@dataclass(frozen=True, slots=True)
class ForeignEntry:
    """An entry of a node's report about a pod that is not scheduled on that node: dropped."""

    node: str
    pod_uid: str
    #: The node the pod is scheduled on; "" when it is not scheduled; None when no such pod is known.
    scheduled_on: str | None
    #: What the entry was: "volume <name>" or "SQLite <path>".
    entry: str

    @property
    def reason(self) -> str:
        return "unknown-pod" if self.scheduled_on is None else "other-node"

    def __str__(self) -> str:
        where = ("no pod with that UID is known" if self.scheduled_on is None else
                 "that pod is not scheduled on any node" if not self.scheduled_on else
                 f"that pod is scheduled on node {self.scheduled_on}")
        return (f"NodeMountReport {self.node} names pod UID {self.pod_uid} ({self.entry}), but {where}: "
                "the entry is ignored (a node reports only its own pods)")


def of_own_pods(report: NodeReport, node_of: Callable[[str], str | None]) -> tuple[NodeReport, list[ForeignEntry]]:
    """The report without the entries that name pods not scheduled on its node, and those entries.

    ``node_of`` gives a pod UID's node ("" unscheduled, None unknown). Entries of no pod (a CSI staging
    mount, a process outside any pod) stay: they speak of the node itself.
    """
    foreign: list[ForeignEntry] = []

    def own(pod_uid: str | None, entry: str) -> bool:
        if pod_uid is None:
            return True
        scheduled_on = node_of(pod_uid)
        if scheduled_on == report.node:
            return True
        foreign.append(ForeignEntry(report.node, pod_uid, scheduled_on, entry))
        return False

    mounts = tuple(m for m in report.mounts if own(m.pod_uid, f"volume {m.volume_name}"))
    sqlite = tuple(u for u in report.sqlite if own(u.pod_uid, f"SQLite {u.path or u.volume_name or 'database'}"))
    clients = tuple(c for c in report.userspace_clients if own(c.pod_uid, f"userspace NFS client {c.pid}"))
    findings = tuple(replace(f, pods=tuple(uid for uid in f.pods if node_of(uid) == report.node))
                     for f in report.findings if own(f.pod_uid, str(f.finding.reason)))
    if not foreign and findings == report.findings:
        return report, foreign
    return replace(report, mounts=mounts, sqlite=sqlite, userspace_clients=clients, findings=findings), foreign
