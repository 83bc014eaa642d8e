"""NodeMountReport: what is really mounted on one node (cluster-scoped, named after the node).

Written only by that node's agent, read by the operator, which compares every
pod volume with its profile. Counters are a snapshot taken when the report was
written; the agent rewrites the report only when something other than the
counters changes (or as a heartbeat), and serves live rates on /metrics.
"""

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from mountwarden.api.base import ApiModel
from mountwarden.core.node.kubelet import KubeletPlugin
from mountwarden.core.node.scan import OptionsSource as NodescanOptionsSource

KIND = "NodeMountReport"
PLURAL = "nodemountreports"


# The report's enumerations are the core's own: one definition each.
VolumePlugin = KubeletPlugin
OptionsSource = NodescanOptionsSource


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
    since: str = Field(description="scans: between the agent's samples; mount: since the mount was made.")
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


class MountedVolume(ApiModel):
    """One pod volume (or CSI staging mount) on a network filesystem, as the kernel has it."""

    pod_uid: str | None = Field(default=None, description="The pod's UID (none for CSI staging mounts).")
    pod_name: str | None = Field(default=None, description="The pod's name, from the agent's watch of its node's "
                                 "pods (none until the agent has seen the pod, or without a cluster).")
    pod_namespace: str | None = Field(default=None, description="The pod's namespace.")
    pod_owner: str | None = Field(default=None, description="Kind/name of the pod's controller (a Deployment's "
                                  "pods name their ReplicaSet); none for a bare pod.")
    claim_name: str | None = Field(default=None, description="The PersistentVolumeClaim (in the pod's namespace) "
                                   "through which the pod mounts this volume; none for an in-line volume.")
    volume_name: str = Field(description="The PV name for CSI volumes, the pod's volume name for in-tree nfs.")
    plugin: VolumePlugin = Field(description="csi, nfs or csi-staging: which kubelet path the mount lives under.")
    driver: str | None = Field(default=None, description="CSI driver of a staging mount, e.g. efs.csi.aws.com.")
    mount_point: str = Field(description="Where the kubelet mounted it on the node.")
    fstype: str = Field(description="Filesystem type, e.g. nfs4.")
    source: str = Field(description="The mount source: server:/export (EFS over TLS shows 127.0.0.1:/).")
    server: str | None = Field(default=None, description="The server part of the source.")
    export: str | None = Field(default=None, description="The export path part of the source.")
    superblock: str = Field(description="The superblock as MAJ:MIN: mounts with the same one share their options.")
    effective_options: list[str] = Field(description="Canonical options in effect, kernel defaults included.")
    options_source: OptionsSource = Field(description="Where the options were read: mountstats or mountinfo.")
    shared_with: list[str] = Field(
        default_factory=list, description="Other mount points on this node with the same superblock."
    )
    nfs_version: str | None = Field(default=None, description="NFS version in effect, e.g. 4.1.")
    connections: int | None = Field(default=None, description="Transport connections (xprt lines) to the server.")
    server_mounts: int = Field(
        default=1, ge=1, description="Mounts on this node to the same server: nconnect is fixed by the first one."
    )
    server_responding: bool | None = Field(
        default=None, description="Whether the server answered the agent's statvfs() probe within its timeout at "
                                   "the last scan (null: not probed). A hard mount of a server that does not "
                                   "answer blocks every process that touches it.")
    notes: list[str] = Field(
        default_factory=list, description="What the agent noticed, e.g. an EFS TLS tunnel or a wrapped counter."
    )
    operations: dict[str, OperationSummary] = Field(
        default_factory=dict, description="Per-operation totals at the time of the report (busiest operations)."
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


class SqliteFinding(ApiModel):
    """A SQLite database in use on a network filesystem."""

    severity: str = Field(description="critical (WAL), warning (rollback journal) or info.")
    mode: SqliteMode = Field(description="Journal mode as seen from locks, open files and mappings.")
    pid: int | None = Field(default=None, description="The process holding the lock or file.")
    pod_uid: str | None = Field(default=None, description="The pod of that process, from its cgroup.")
    container_id: str | None = Field(default=None, description="Its container, from its cgroup.")
    device: str = Field(description="Device of the database file as MAJ:MIN.")
    inode: int = Field(description="Inode of the database file.")
    path: str | None = Field(default=None, description="Path of the database file, where readable.")
    mount_point: str | None = Field(default=None, description="The network mount holding it.")
    volume_name: str | None = Field(default=None, description="The pod volume holding it.")
    lock: str | None = Field(default=None, description="The SQLite lock seen: SHARED, RESERVED, PENDING or EXCLUSIVE.")
    message: str = Field(description="What was found and why it is a problem.")
    remedy: str = Field(description="What to do about it.")


class NodeMountReportSpec(ApiModel):
    node_name: str = Field(description="The node this report describes (the object has the same name).")
    scan_time: datetime = Field(description="When the agent last scanned the node.")
    agent_version: str = Field(description="Version of the agent that wrote the report.")
    kernel_release: str | None = Field(default=None, description="The node's kernel release (e.g. 6.1.0-57-amd64): "
                                                                 "what its NFS client can do, nconnect since 5.3.")
    network_fstypes: list[str] = Field(description="Filesystem types the agent treats as network storage.")
    volumes: list[MountedVolume] = Field(default_factory=list, description="Pod volumes on network filesystems.")
    sqlite: list[SqliteFinding] = Field(default_factory=list, description="SQLite databases in use on them.")
    skipped_lines: int = Field(default=0, ge=0, description="Unreadable /proc lines skipped during the scan.")
