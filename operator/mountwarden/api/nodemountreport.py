"""NodeMountReport: what is really mounted on one node (cluster-scoped, named after the node).

Written only by that node's agent, read by the operator, which compares every
pod volume with its profile. Counters are a snapshot taken when the report was
written; the agent rewrites the report only when something other than the
counters changes (or as a heartbeat), and serves live rates on /metrics.

The same models are the one translator both ways: the agent writes with them, and
``read_node_report`` reads a report's spec through them into the core's NodeReport.
"""

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator

from mountwarden.api.base import ApiModel
from mountwarden.core.admission import ReportWrite
from mountwarden.core.findings import Finding, Reason, Severity
from mountwarden.core.node.activity import Activity, ProcessSamples, StuckProcess
from mountwarden.core.node.kubelet import KubeletPlugin
from mountwarden.core.node.report import NodeFinding, NodeReport, OperationCounters, ReportedMount, SqliteUse
from mountwarden.core.node.scan import OptionsSource as NodescanOptionsSource
from mountwarden.core.node.userspace import UserspaceClient

KIND = "NodeMountReport"
PLURAL = "nodemountreports"


# The report's enumerations are the core's own: one definition each.
VolumePlugin = KubeletPlugin
OptionsSource = NodescanOptionsSource

# Bounds on everything one node writes: the operator copies parts of reports into profiles' status, and the
# API server refuses a report past them, so one node cannot push a shared profile past etcd's object limit.
#: Paths, messages, mount sources: PATH_MAX.
TEXT_MAX = 4096
#: A server's host name or address: a DNS name's most.
SERVER_MAX = 253
#: Entries of any list or map in a report (pod volumes on one node, findings, options, ...).
ITEMS_MAX = 2048
Text = Annotated[str, Field(max_length=TEXT_MAX)]
Server = Annotated[str, Field(max_length=SERVER_MAX)]


class OperationSummary(ApiModel):
    ops: int = Field(ge=0, description="Requests completed since the mount was made.")
    errors: int | None = Field(default=None, description="Requests that failed (null under RPC iostats 1.0).")
    avg_rtt_ms: float | None = Field(default=None, description="Average round trip, milliseconds.")
    avg_execute_ms: float | None = Field(default=None, description="Average time from queueing to completion.")
    avg_queue_ms: float | None = Field(default=None, description="Average time waiting to be sent.")
    bytes_sent: int | None = Field(
        default=None, ge=0, description="Bytes sent for these requests, RPC headers included (a WRITE's data)."
    )
    bytes_received: int | None = Field(
        default=None, ge=0, description="Bytes received in their replies, RPC headers included (a READ's data)."
    )


class MountActivity(ApiModel):
    """What the mount did recently: rates over the agent's window (or since the mount, before a second scan)."""

    window_seconds: float = Field(description="Seconds the rates are over.")
    since: Text = Field(description="scans: between the agent's samples; mount: since the mount was made.")
    read_bytes_per_second: float = Field(description="Bytes read from the server per second (READ).")
    write_bytes_per_second: float = Field(description="Bytes written to the server per second (WRITE).")
    requests_per_second: float = Field(description="RPC requests completed per second, every operation.")
    retransmissions_per_second: float = Field(description="Requests sent again per second (no reply in timeo).")
    major_timeouts_per_second: float = Field(description="Requests that went unanswered for timeo x retrans, per "
                                                         "second (a hard mount logs 'server not responding').")
    reconnects_per_second: float = Field(description="Connections made again per second, all transports.")
    connections: int = Field(description="Transports (xprt lines: nconnect) the rates went over.")
    data_requests: int = Field(description="READ and WRITE requests completed in the window.")
    avg_queue_ms: float | None = Field(default=None, description="Their average wait to be sent, ms.")
    avg_rtt_ms: float | None = Field(default=None, description="Their average round trip, ms.")
    avg_execute_ms: float | None = Field(default=None, description="Their average whole life, ms.")


class ProcessStates(ApiModel):
    """The states of the processes of the volume's pod that use it, sampled over the agent's window."""

    samples: int = Field(ge=0, description="Process states read (processes x sampling rounds).")
    uninterruptible: int = Field(ge=0, description="Samples in uninterruptible sleep (D): waiting on I/O, here NFS.")
    processes: int = Field(ge=0, description="Processes sampled.")
    uninterruptible_share: float = Field(ge=0, le=1, description="uninterruptible / samples.")


class StuckProcessInfo(ApiModel):
    """A process of the volume's pod in uninterruptible sleep (D) on it at the agent's last sample."""

    pid: int = Field(ge=0, description="Its process ID on the node.")
    command: Text = Field(description="Its command (comm).")
    wchan: Text | None = Field(default=None, description="Where it waits in the kernel (/proc/<pid>/wchan): "
                              "rpc_wait_bit_killable ends with SIGKILL, a writeback wait (folio_wait_bit_common) "
                              "only when the server answers. Absent where the agent may not read it.")

    def to_stuck(self) -> StuckProcess:
        return StuckProcess(self.pid, self.command, self.wchan)


class FailureReason(StrEnum):
    """The findings the agent makes on its node (docs/runbook.md has each)."""

    STALE_FILE_HANDLE = Reason.STALE_FILE_HANDLE.value
    SERVER_NOT_RESPONDING = Reason.SERVER_NOT_RESPONDING.value
    MOUNT_HELPER_STUCK = Reason.MOUNT_HELPER_STUCK.value
    TLS_TUNNEL_DOWN = Reason.TLS_TUNNEL_DOWN.value


class NodeFailure(ApiModel):
    """A failure the agent found on its node: on a pod (podUid), or on the node with the pods it concerns."""

    reason: FailureReason = Field(description="StaleFileHandle, ServerNotResponding, MountHelperStuck or "
                                              "TLSTunnelDown (docs/runbook.md).")
    severity: Severity = Field(description="critical, error or warning.")
    message: Text = Field(description="What the agent saw, with its evidence.")
    remedy: Text = Field(description="What to do, in the runbook's words.")
    pod_uid: Text | None = Field(default=None, description="The pod it is about (its volume's); none for the node.")
    pods: list[Text] = Field(
        max_length=ITEMS_MAX, default_factory=list, description="For a finding about the node: the UIDs of the pods "
                                                               "it concerns (a server's pods).")
    evidence: dict[str, Text] = Field(
        max_length=ITEMS_MAX, default_factory=dict, description="Where and on what: volume, mountPoint, "
                                                                       "server, port, pids, probe, kernelLog.")

    @classmethod
    def of(cls, found: NodeFinding) -> "NodeFailure":
        finding = found.finding
        return cls(reason=FailureReason(str(finding.reason)), severity=finding.severity, message=finding.message,
                   remedy=finding.remedy, pod_uid=found.pod_uid, pods=list(found.pods),
                   evidence=dict(finding.evidence))

    def to_finding(self) -> NodeFinding:
        return NodeFinding(Finding(Reason(str(self.reason)), Severity(self.severity), self.message, self.remedy,
                                   evidence=dict(self.evidence)), self.pod_uid, tuple(self.pods))

    def identity(self) -> tuple:
        """What stays the same while the failure lasts (its message may say more as it goes on)."""
        return (self.reason, self.severity, self.pod_uid, self.evidence.get("mountPoint"),
                self.evidence.get("server"), self.evidence.get("port"))


class MountedVolume(ApiModel):
    """One pod volume (or CSI staging mount) on a network filesystem, as the kernel has it."""

    pod_uid: Text | None = Field(default=None, description="The pod's UID (none for CSI staging mounts).")
    pod_name: Text | None = Field(default=None, description="The pod's name, from the agent's watch of its node's "
                                 "pods (none until the agent has seen the pod, or without a cluster).")
    pod_namespace: Text | None = Field(default=None, description="The pod's namespace.")
    pod_owner: Text | None = Field(default=None, description="Kind/name of the pod's controller (a Deployment's "
                                  "pods name their ReplicaSet); none for a bare pod.")
    claim_name: Text | None = Field(default=None, description="The PersistentVolumeClaim (in the pod's namespace) "
                                   "through which the pod mounts this volume; none for an in-line volume.")
    volume_name: Text = Field(description="The PV name for CSI volumes, the pod's volume name for in-tree nfs.")
    plugin: VolumePlugin = Field(description="csi, nfs or csi-staging: which kubelet path the mount lives under.")
    driver: Text | None = Field(default=None, description="CSI driver of a staging mount, e.g. efs.csi.aws.com.")
    mount_point: Text = Field(description="Where the kubelet mounted it on the node.")
    fstype: Text = Field(description="Filesystem type, e.g. nfs4.")
    source: Text = Field(description="The mount source: server:/export (EFS over TLS shows 127.0.0.1:/).")
    server: Server | None = Field(default=None, description="The server part of the source.")
    server_address: Text | None = Field(default=None, max_length=64, description="The address the kernel talks "
                                       "to (mountinfo's addr=); 127.0.0.1 for EFS over TLS (its tunnel).")
    export: Text | None = Field(default=None, description="The export path part of the source.")
    superblock: Text = Field(description="The superblock as MAJ:MIN: mounts with the same one share their options.")
    effective_options: list[Text] = Field(
        max_length=ITEMS_MAX, description="Canonical options in effect, kernel defaults included.")
    options_source: OptionsSource = Field(description="Where the options were read: mountstats or mountinfo.")
    shared_with: list[Text] = Field(
        max_length=ITEMS_MAX,
        default_factory=list, description="Other mount points on this node with the same superblock."
    )
    nfs_version: Text | None = Field(default=None, description="NFS version in effect, e.g. 4.1.")
    connections: int | None = Field(default=None, description="Transport connections (xprt lines) to the server.")
    server_mounts: int = Field(
        default=1, ge=1, description="Mounts on this node to the same server: nconnect is fixed by the first one."
    )
    server_responding: bool | None = Field(
        default=None, description="Whether the server answered the agent's statvfs() probe within its timeout at "
                                   "the last scan (null: not probed). A hard mount of a server that does not "
                                   "answer blocks every process that touches it.")
    notes: list[Text] = Field(
        max_length=ITEMS_MAX,
        default_factory=list, description="What the agent noticed, e.g. an EFS TLS tunnel or a wrapped counter."
    )
    stuck_processes: list[StuckProcessInfo] = Field(
        max_length=ITEMS_MAX,
        default_factory=list, description="Processes of the pod in uninterruptible sleep (D) on this volume at the "
        "agent's last sample, with where each waits: what keeps a deleted pod Terminating (StuckTerminating).")
    operations: dict[str, OperationSummary] = Field(
        max_length=ITEMS_MAX,
        default_factory=dict, description="Per-operation totals at the time of the report (busiest operations)."
    )

    @field_validator("operations", mode="before")
    @classmethod
    def _readable_totals(cls, value: Any) -> Any:
        """A malformed operation's totals (a wrapped, negative count) cost only themselves, not the report."""
        if not isinstance(value, Mapping):
            return value
        readable = {}
        for name, totals in value.items():
            try:
                readable[name] = OperationSummary.model_validate(totals)
            except ValidationError:
                continue
        return readable

    @field_validator("age_seconds", mode="before")
    @classmethod
    def _readable_age(cls, value: Any) -> Any:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    def to_reported(self) -> ReportedMount:
        """This volume as the operator's checks read it."""
        return ReportedMount(
            pod_uid=self.pod_uid, volume_name=self.volume_name, mount_point=self.mount_point,
            superblock=self.superblock, effective_options=tuple(self.effective_options),
            shared_with=tuple(self.shared_with), server=self.server, connections=self.connections,
            server_mounts=self.server_mounts, age_seconds=self.age_seconds,
            operations={name: OperationCounters(totals.ops, totals.bytes_sent, totals.bytes_received)
                        for name, totals in self.operations.items()},
            activity=Activity(**self.activity.model_dump()) if self.activity else None,
            processes=ProcessSamples(self.processes.samples, self.processes.uninterruptible,
                                     self.processes.processes) if self.processes else None,
            server_responding=self.server_responding,
            pod_owner=self.pod_owner,
            server_address=self.server_address,
            stuck_processes=tuple(process.to_stuck() for process in self.stuck_processes),
        )
    age_seconds: int | None = Field(
        default=None,
        ge=0,
        description="Seconds since the mount was made (mountstats age) when the operation totals were taken: "
        "the totals over this are average rates.",
    )
    activity: MountActivity | None = Field(
        default=None, description="Throughput and transport health over the agent's window (absent: no NFS "
        "statistics). /metrics serves the same rates live.")
    processes: ProcessStates | None = Field(
        default=None, description="How often the pod's processes using this volume were in uninterruptible sleep.")


class SqliteMode(StrEnum):
    ROLLBACK = "rollback"
    WAL = "wal"
    UNKNOWN = "unknown"


class SqliteDatabase(ApiModel):
    """A SQLite database in use on a network filesystem."""

    severity: Severity = Field(description="critical (WAL), warning (rollback journal) or info.")
    mode: SqliteMode = Field(description="Journal mode as seen from locks, open files and mappings.")
    pid: int | None = Field(default=None, description="The process holding the lock or file.")
    pod_uid: Text | None = Field(default=None, description="The pod of that process, from its cgroup.")
    container_id: Text | None = Field(default=None, description="Its container, from its cgroup.")
    device: Text = Field(description="Device of the database file as MAJ:MIN.")
    inode: int = Field(description="Inode of the database file.")
    path: Text | None = Field(default=None, description="Path of the database file, where readable.")
    mount_point: Text | None = Field(default=None, description="The network mount holding it.")
    volume_name: Text | None = Field(default=None, description="The pod volume holding it.")
    lock: Text | None = Field(default=None, description="The SQLite lock seen: SHARED, RESERVED, PENDING or EXCLUSIVE.")
    message: Text = Field(description="What was found and why it is a problem.")
    remedy: Text = Field(description="What to do about it.")

    def to_use(self) -> SqliteUse:
        return SqliteUse(self.pod_uid, self.volume_name, Severity(self.severity), str(self.mode), self.path,
                         self.message, self.remedy)


class UserspaceNfsClient(ApiModel):
    """A pod's process that talks NFS over a socket of its own, with no kernel mount: beyond mountwarden's audit."""

    pid: int = Field(description="The process holding the connection.")
    command: Text = Field(description="Its command (/proc/<pid>/comm).")
    pod_uid: Text = Field(description="Its pod, from its cgroup.")
    pod_name: Text | None = Field(default=None, description="The pod's name, from the agent's watch of its node's "
                                                         "pods.")
    pod_namespace: Text | None = Field(default=None, description="The pod's namespace.")
    container_id: Text | None = Field(default=None, description="Its container, from its cgroup.")
    remote: Text = Field(description="The server (port 2049) or EFS TLS tunnel (127.0.0.1:20049-21049) it talks to.")
    message: Text = Field(description="What was found and why mountwarden cannot audit it.")

    def to_client(self) -> UserspaceClient:
        pod = f"{self.pod_namespace}/{self.pod_name}" if self.pod_name and self.pod_namespace else None
        return UserspaceClient(self.pid, self.command, self.pod_uid, self.container_id, self.remote, pod)


class TlsTunnelReport(ApiModel):
    """An EFS TLS tunnel on the node (efs-utils' stunnel or efs-proxy) and the mount target it is connected to."""

    local_port: int = Field(ge=1, le=65535, description="The loopback port it listens on: the port= of its mounts.")
    remote_address: Text = Field(max_length=64, description="The address it is connected to on port 2049: the mount "
                                                           "target its mounts' bytes really go to.")
    pid: int = Field(description="The tunnel process.")
    command: Text = Field(max_length=64, description="Its command (/proc/<pid>/comm).")


class NodeMountReportSpec(ApiModel):
    node_name: Text = Field(description="The node this report describes (the object has the same name).")
    scan_time: datetime = Field(description="When the agent last scanned the node.")
    agent_version: Text = Field(description="Version of the agent that wrote the report.")
    kernel_release: Text | None = Field(default=None, description="The node's kernel release (e.g. 6.1.0-57-amd64): "
                                                                 "what its NFS client can do, nconnect since 5.3.")
    network_fstypes: list[Text] = Field(
        max_length=ITEMS_MAX, description="Filesystem types the agent treats as network storage.")
    volumes: list[MountedVolume] = Field(
        max_length=ITEMS_MAX, default_factory=list, description="Pod volumes on network filesystems.")
    sqlite: list[SqliteDatabase] = Field(
        max_length=ITEMS_MAX, default_factory=list, description="SQLite databases in use on them.")
    userspace_clients: list[UserspaceNfsClient] = Field(
        max_length=ITEMS_MAX,
        default_factory=list, description="Pods' processes that talk NFS with no kernel mount (read with the "
        "SQLite scan: both read other processes' descriptors).")
    tls_tunnels: list[TlsTunnelReport] = Field(
        max_length=ITEMS_MAX,
        default_factory=list, description="EFS TLS tunnels and the mount target each is connected to (read with "
        "the SQLite scan, as userspaceClients): where a TLS mount's bytes go, for the CrossAZMount check.")
    skipped_lines: int = Field(default=0, ge=0, description="Unreadable /proc lines skipped during the scan.")
    failures: list[NodeFailure] = Field(
        max_length=ITEMS_MAX,
        default_factory=list, description="How the node's mounts broke, as the agent judged them: stale file "
        "handles, servers not responding, stuck mount helpers, TLS tunnels down (docs/runbook.md).")

    def to_report(self, name: str) -> NodeReport:
        """The report ``name`` (its object's name: its node's) as the operator's checks read it."""
        return NodeReport(node=name, scan_time=self.scan_time,
                          mounts=tuple(volume.to_reported() for volume in self.volumes),
                          sqlite=tuple(database.to_use() for database in self.sqlite),
                          userspace_clients=tuple(client.to_client() for client in self.userspace_clients),
                          kernel_release=self.kernel_release,
                          tunnel_peers={tunnel.local_port: tunnel.remote_address for tunnel in self.tls_tunnels},
                          findings=tuple(failure.to_finding() for failure in self.failures))


class UnreadableReport(ValueError):
    """The spec is not a NodeMountReport's (the CRD schema refuses such a spec: a report written by hand)."""


def read_node_report(name: str, spec: Mapping) -> NodeReport:
    """Read the spec of the NodeMountReport ``name``; UnreadableReport, naming what is wrong, when it is not one."""
    try:
        return NodeMountReportSpec.model_validate(dict(spec)).to_report(name)
    except ValidationError as error:
        raise UnreadableReport(f"NodeMountReport {name}: {error}") from None


class LazyNodeReport:
    """A node's report as written, read the first time a reader asks, once.

    kopf files every write of a report; reading one costs ~80 ms at the CRD's 2,048 volumes. Read on demand, a
    node that writes in a loop costs kopf's index no read per write: its readers (compliance, credits, the
    inventory) read at their own pace, and each report's handling (handlers.reportpace) reads the write it
    handles, at most one per interval.
    """

    __slots__ = ("name", "_spec", "_report")

    def __init__(self, name: str, spec: Mapping) -> None:
        self.name = name
        self._spec: Mapping | None = spec
        self._report: NodeReport | None = None

    def read(self) -> NodeReport | None:
        """The report; None when it cannot be read (it counts as missing: the CRD refuses such a spec)."""
        spec = self._spec
        if spec is not None:  # two threads may both read it first: the same report, either one kept
            try:
                self._report = read_node_report(self.name, spec)
            except UnreadableReport:
                self._report = None
            self._spec = None
        return self._report


def node_report(index: Mapping, node: str) -> NodeReport | None:
    """The node's report from an index of LazyNodeReports (key -> the entries filed under it), read; None when it
    has none or it cannot be read."""
    entry = next(iter(index.get(node) or ()), None)
    return entry.read() if entry is not None else None


def node_reports(index: Mapping) -> dict[str, NodeReport]:
    """Every node's readable report from an index of LazyNodeReports."""
    return {node: report for node in list(index) if (report := node_report(index, node)) is not None}


def report_write(obj: Mapping, userinfo: Mapping) -> ReportWrite:
    """A NodeMountReport in an admission request, and who writes it (userInfo as the API server sends it)."""
    return ReportWrite(
        name=(obj.get("metadata") or {}).get("name") or "",
        node_name=(obj.get("spec") or {}).get("nodeName"),
        username=userinfo.get("username") or "",
        extra=userinfo.get("extra") or {},
    )
