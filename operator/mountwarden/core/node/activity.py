"""What a mount did recently: throughput, transport health and processes stuck on it, and what that means.

The agent samples each mount's counters (mountstats) every scan and the state of the processes
using it (/proc/<pid>/stat) several times a scan; the rates here are over the agent's window (the
oldest sample kept up to now) or, before a second scan, since the mount was made (its counters
start at zero). Findings are judged against thresholds a profile may set:

- ``ThroughputPlateau``: one connection moving data near the per-flow cap (5 Gbit/s for a flow
  between EC2 instances outside a cluster placement group: EC2 User Guide, "Amazon EC2 instance
  network bandwidth") while requests wait longer to be sent than they take on the wire. A single
  flow cannot go faster than the cap, so an average near it over the window is a plateau.
  The advice sizes nconnect as ceil(min(instance bandwidth, file-system limit) / per-flow cap), the
  FSx write-up's arithmetic, with its inputs named; headroom is a separate choice, and the value is
  benchmarked before it is rolled out.
- ``TransportUnhealthy``: retransmissions, major timeouts or reconnects above their thresholds.
- ``StuckOnNFS``: a pod's processes in uninterruptible sleep (D) in most samples; the incidents saw
  D in almost every sample.
"""

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mountwarden.core.findings import Finding, Reason, Severity
from mountwarden.core.options.effects import nconnect_sizing
from mountwarden.core.options.table import DEFAULT_PER_FLOW_CAP_GBPS
from mountwarden.core.procfs.mountstats import WRAPPED_COUNTER_FLOOR, MountstatsDevice

GBIT = 1e9 / 8  # bytes per second in one Gbit/s
MIB = 1024 * 1024
#: nconnect arrived in Linux 5.3 ("NFS: Add a mount option to specify number of TCP connections to use").
NCONNECT_MAX = 16  # the kernel's limit (fs/nfs/fs_context.c: NFS_MAX_CONNECTIONS)
#: Per-client throughput of EFS (EFS User Guide, "Amazon EFS performance specifications").
EFS_PER_CLIENT_MIBPS = {"elastic": 1500.0, "provisioned": 500.0, "bursting": 500.0}
DATA_OPERATIONS = ("READ", "WRITE")


@dataclass(frozen=True, slots=True)
class MountSample:
    """One scan's cumulative counters of a mount (since it was made), taken at monotonic time ``at``."""

    at: float
    age_seconds: int | None
    read_bytes: int
    write_bytes: int
    requests: int
    retransmissions: int
    major_timeouts: int
    #: Connections made, all transports together (each counts its first connect too).
    connects: int
    transports: int
    data_ops: int
    data_queue_ms: int
    data_rtt_ms: int
    data_execute_ms: int


def sample_of(stats: MountstatsDevice, at: float) -> MountSample | None:
    """The counters of one mountstats block; None when a counter wrapped (meaningless) or it is no NFS mount."""
    if not stats.is_nfs:
        return None
    operations = [op for op in stats.operations.values() if op.ops]
    if any(op.has_wrapped_counter for op in operations):
        return None
    data = [op for op in operations if op.name in DATA_OPERATIONS]
    connects = sum(transport.counters.get("connect_count", 0) for transport in stats.transports)
    read = stats.byte_counters.get("serverreadbytes", 0)
    write = stats.byte_counters.get("serverwritebytes", 0)
    if max(read, write, connects) >= WRAPPED_COUNTER_FLOOR:
        return None
    return MountSample(
        at=at, age_seconds=stats.age_seconds, read_bytes=read, write_bytes=write,
        requests=sum(op.ops for op in operations),
        retransmissions=sum(max(0, op.transmissions - op.ops) for op in operations),
        major_timeouts=sum(op.major_timeouts for op in operations),
        connects=connects, transports=len(stats.transports),
        data_ops=sum(op.ops for op in data), data_queue_ms=sum(op.queue_ms for op in data),
        data_rtt_ms=sum(op.rtt_ms for op in data), data_execute_ms=sum(op.execute_ms for op in data),
    )


@dataclass(frozen=True, slots=True)
class Activity:
    """Rates over ``window_seconds`` (up to now), and the averages of the data requests completed in it."""

    window_seconds: float
    #: "scans": between two scans of the agent; "mount": since the mount was made (one scan only).
    since: str
    read_bytes_per_second: float
    write_bytes_per_second: float
    requests_per_second: float
    retransmissions_per_second: float
    major_timeouts_per_second: float
    reconnects_per_second: float
    connections: int
    data_requests: int
    avg_queue_ms: float | None
    avg_rtt_ms: float | None
    avg_execute_ms: float | None

    @property
    def bytes_per_second(self) -> float:
        return self.read_bytes_per_second + self.write_bytes_per_second

    @property
    def retransmission_ratio(self) -> float:
        requests = self.requests_per_second * self.window_seconds
        return self.retransmissions_per_second * self.window_seconds / requests if requests else 0.0


def activity(earlier: MountSample | None, now: MountSample) -> Activity | None:
    """Rates between two samples of the same mount, or since the mount when there is no earlier one."""
    if earlier is None:
        if not now.age_seconds:
            return None
        seconds, since = float(now.age_seconds), "mount"
        # A mount's counters start at zero; its transports each connected once to begin with.
        base = MountSample(now.at - seconds, 0, 0, 0, 0, 0, 0, now.transports, now.transports, 0, 0, 0, 0)
    else:
        seconds, since, base = now.at - earlier.at, "scans", earlier
    if seconds <= 0:
        return None
    deltas = {name: getattr(now, name) - getattr(base, name) for name in (
        "read_bytes", "write_bytes", "requests", "retransmissions", "major_timeouts", "connects", "data_ops",
        "data_queue_ms", "data_rtt_ms", "data_execute_ms")}
    if any(value < 0 for value in deltas.values()):
        return None  # counters went backwards: another mount took this one's place
    ops = deltas["data_ops"]
    return Activity(
        window_seconds=seconds, since=since,
        read_bytes_per_second=deltas["read_bytes"] / seconds,
        write_bytes_per_second=deltas["write_bytes"] / seconds,
        requests_per_second=deltas["requests"] / seconds,
        retransmissions_per_second=deltas["retransmissions"] / seconds,
        major_timeouts_per_second=deltas["major_timeouts"] / seconds,
        reconnects_per_second=max(0, deltas["connects"] - max(0, now.transports - base.transports)) / seconds,
        connections=now.transports, data_requests=ops,
        avg_queue_ms=deltas["data_queue_ms"] / ops if ops else None,
        avg_rtt_ms=deltas["data_rtt_ms"] / ops if ops else None,
        avg_execute_ms=deltas["data_execute_ms"] / ops if ops else None,
    )


# -- processes ------------------------------------------------------------------------------------

#: /proc/<pid>/stat: "pid (comm) S ..."; comm may hold spaces and parentheses, the state follows the last ')'.
_STAT_STATE = re.compile(r"\)\s+(\S)")


def process_state(stat_text: str) -> str | None:
    """The one-letter state of /proc/<pid>/stat (R, S, D, ...), or None when unreadable."""
    closing = stat_text.rfind(")")
    match = _STAT_STATE.match(stat_text, closing) if closing >= 0 else None
    return match.group(1) if match else None


#: PF_KTHREAD in the flags of /proc/<pid>/stat (include/linux/sched.h): one of the kernel's own threads, which has
#: no files, sockets, mounts or pod of its own. They are most of a node's processes (a few per CPU), so every walk
#: of the processes leaves them out.
PF_KTHREAD = 0x00200000


def is_kernel_thread(stat_text: str) -> bool:
    """Whether /proc/<pid>/stat is a kernel thread's (its flags, the 9th field, have PF_KTHREAD)."""
    rest = stat_text[stat_text.rfind(")") + 1:].split(maxsplit=7)
    return len(rest) > 6 and rest[6].isdigit() and int(rest[6]) & PF_KTHREAD != 0


#: What a killable wait is called in the kernel (rpc_wait_bit_killable, nfs_wait_bit_killable): SIGKILL ends it.
_KILLABLE = "killable"


@dataclass(frozen=True, slots=True)
class StuckProcess:
    """A process of a pod in uninterruptible sleep (D) on the pod's volume, at the agent's last sample."""

    pid: int
    command: str
    #: Where it waits in the kernel (/proc/<pid>/wchan); None where the agent may not read it.
    wchan: str | None = None

    @property
    def killable(self) -> bool | None:
        """Whether SIGKILL ends the wait (an RPC wait: yes; a writeback wait: no); None when unknown."""
        return None if not self.wchan or self.wchan == "0" else _KILLABLE in self.wchan

    def __str__(self) -> str:
        if self.killable is None:
            return f"pid {self.pid} ({self.command})"
        how = "killable" if self.killable else "not killable"
        return f"pid {self.pid} ({self.command}, in D in {self.wchan}: {how})"


@dataclass(frozen=True, slots=True)
class ProcessSamples:
    """Samples of the states of the processes using one pod volume."""

    samples: int
    uninterruptible: int
    processes: int

    @property
    def share(self) -> float:
        return self.uninterruptible / self.samples if self.samples else 0.0

    def __add__(self, other: "ProcessSamples") -> "ProcessSamples":
        return ProcessSamples(self.samples + other.samples, self.uninterruptible + other.uninterruptible,
                              max(self.processes, other.processes))


# -- judging it -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When activity is a finding. The per-flow cap and the bandwidths come from the profile."""

    per_flow_cap_gbps: float = DEFAULT_PER_FLOW_CAP_GBPS
    #: The node's network bandwidth (its instance type's), when the profile knows it.
    instance_bandwidth_gbps: float | None = None
    #: The file system's (or gateway's) limit per client, when known.
    file_system_limit_gbps: float | None = None
    #: What the limit is, for the message ("EFS Elastic: 1,500 MiB/s per client ...").
    file_system_limit_source: str = ""
    #: "Near" the cap: this share of it or more, averaged over at least ``plateau_seconds``.
    plateau_share: float = 0.8
    plateau_seconds: float = 60.0
    retransmission_ratio: float = 0.01
    min_retransmissions: int = 10
    reconnects_per_hour: float = 6.0
    stuck_share: float = 0.5
    min_stuck_samples: int = 10


@dataclass(frozen=True, slots=True)
class NconnectAdvice:
    connections: int | None
    message: str


def nconnect_advice(thresholds: Thresholds) -> NconnectAdvice:
    """nconnect = ceil(min(instance bandwidth, file-system limit) / per-flow cap), its inputs named.

    Headroom (one connection more for metadata and small requests sharing the flows) is said as a choice,
    not added: the FSx write-up's sizing (effects.nconnect_sizing).
    """
    cap = thresholds.per_flow_cap_gbps
    cap_text = f"the per-flow cap {cap:g} Gbit/s (spec.throughput.perFlowCapGbps" + (
        "; EC2 User Guide, 'Amazon EC2 instance network bandwidth')" if cap == DEFAULT_PER_FLOW_CAP_GBPS else ")")
    limits = []
    if thresholds.instance_bandwidth_gbps:
        limits.append((thresholds.instance_bandwidth_gbps,
                       f"the instance bandwidth {thresholds.instance_bandwidth_gbps:g} Gbit/s "
                       "(spec.throughput.instanceBandwidthGbps)"))
    if thresholds.file_system_limit_gbps:
        source = thresholds.file_system_limit_source or "spec.throughput.fileSystemLimitGbps"
        limits.append((thresholds.file_system_limit_gbps,
                       f"the file-system limit {thresholds.file_system_limit_gbps:g} Gbit/s ({source})"))
    if not limits:
        return NconnectAdvice(None, (
            f"{nconnect_sizing(cap)}. Set spec.throughput.instanceBandwidthGbps (the node's instance type) so that "
            "mountwarden can say the number."))
    needed, _ = min(limits)
    connections = min(NCONNECT_MAX, math.ceil(needed / cap))
    inputs = " and ".join(text for _, text in limits)
    headroom = (f" {connections + 1} would leave a connection of headroom for metadata and small requests: a choice, "
                "not a need." if connections < NCONNECT_MAX else f", capped at the kernel's {NCONNECT_MAX}.")
    return NconnectAdvice(connections, (
        f"nconnect={connections}: ceil(min of {inputs} = {needed:g} Gbit/s / {cap_text}) = {connections}."
        f"{headroom} Benchmark the value before rolling it out (the FSx write-up's advice). Give every volume of "
        "this server on a node the same nconnect: the first mount decides (kernel lab)."))


def _gbps(bytes_per_second: float) -> str:
    return f"{bytes_per_second / GBIT:.2f} Gbit/s"


def throughput_plateau(activity: Activity, thresholds: Thresholds) -> Finding | None:
    """One connection near the per-flow cap, its requests waiting to be sent longer than on the wire."""
    cap = thresholds.per_flow_cap_gbps * GBIT
    if (activity.connections != 1 or activity.window_seconds < thresholds.plateau_seconds
            or activity.bytes_per_second < thresholds.plateau_share * cap
            or activity.avg_queue_ms is None or activity.avg_rtt_ms is None
            or activity.avg_queue_ms <= activity.avg_rtt_ms):
        return None
    advice = nconnect_advice(thresholds)
    return Finding(
        Reason.THROUGHPUT_PLATEAU, Severity.WARNING,
        f"One connection moved {_gbps(activity.bytes_per_second)} on average over {activity.window_seconds:.0f} s, "
        f"{activity.bytes_per_second / cap:.0%} of the per-flow cap of {thresholds.per_flow_cap_gbps:g} Gbit/s, and "
        f"its READ/WRITE requests waited {activity.avg_queue_ms:.1f} ms to be sent against {activity.avg_rtt_ms:.1f} "
        "ms on the wire: the connection, not the server, is the limit (one TCP flow between EC2 instances is capped "
        "at 5 Gbit/s outside a cluster placement group: EC2 User Guide, 'Amazon EC2 instance network bandwidth').",
        f"Spread the load over several connections: {advice.message}")


def transport_trouble(activity: Activity, thresholds: Thresholds) -> Finding | None:
    problems = []
    window = activity.window_seconds
    retransmissions = activity.retransmissions_per_second * window
    if retransmissions >= thresholds.min_retransmissions and activity.retransmission_ratio >= thresholds.retransmission_ratio:
        problems.append(f"{retransmissions:.0f} retransmissions ({activity.retransmission_ratio:.1%} of requests)")
    timeouts = activity.major_timeouts_per_second * window
    if timeouts >= 1:
        problems.append(f"{timeouts:.0f} major timeout(s), each a request that went unanswered for timeo x retrans "
                        "(a hard mount then logs 'server not responding' and keeps waiting: nfs(5))")
    reconnects = activity.reconnects_per_second * window
    if reconnects * 3600 / window >= thresholds.reconnects_per_hour and reconnects >= 2:
        problems.append(f"{reconnects:.0f} reconnects")
    if not problems:
        return None
    return Finding(
        Reason.TRANSPORT_UNHEALTHY, Severity.WARNING,
        f"In the last {window:.0f} s the connection to the server had " + "; ".join(problems) + ".",
        "Look at the path to the server (security groups, NAT or load balancer idle timeouts, packet loss) and the "
        "server's load; on EFS, noresvport lets a client reconnect on a new port after a network blip (AWS "
        "recommended mount options).")


def stuck_processes(samples: ProcessSamples, pod: str, thresholds: Thresholds,
                    server_responding: bool | None = None) -> Finding | None:
    if samples.samples < thresholds.min_stuck_samples or samples.share < thresholds.stuck_share:
        return None
    server = " The server did not answer the agent's probe either." if server_responding is False else ""
    return Finding(
        Reason.STUCK_ON_NFS, Severity.WARNING,
        f"The processes of {pod} using this volume were in uninterruptible sleep (D, waiting for the NFS server) "
        f"in {samples.uninterruptible} of {samples.samples} samples ({samples.share:.0%}) of {samples.processes} "
        f"process(es): they wait on NFS, not on CPU (the incidents saw D in almost every sample).{server}",
        "Find what the requests wait for: a server that does not answer (serverResponding), a throttled EFS file "
        "system (CreditsDraining, Trap), a saturated connection (ThroughputPlateau), or a mount option that makes "
        "every call a round trip (sync, actimeo=0, lookupcache=none: UndeclaredOption, OptionMismatch).")


def judge(activity: Activity | None, samples: Iterable[tuple[str, ProcessSamples]], thresholds: Thresholds,
          *, server_responding: bool | None = None) -> list[Finding]:
    """Every finding of one volume's recent activity and of its pods' processes."""
    findings: list[Finding] = []
    if activity is not None:
        findings += [f for f in (throughput_plateau(activity, thresholds),
                                 transport_trouble(activity, thresholds)) if f is not None]
    for pod, pod_samples in samples:
        found = stuck_processes(pod_samples, pod, thresholds, server_responding)
        if found is not None:
            findings.append(found)
    return findings


def efs_file_system_limit(throughput_mode: str | None) -> tuple[float | None, str]:
    """EFS's per-client throughput for a throughput mode, in Gbit/s, with its source."""
    mibps = EFS_PER_CLIENT_MIBPS.get((throughput_mode or "").lower())
    if mibps is None:
        return None, ""
    return mibps * MIB / GBIT, (f"EFS {throughput_mode} throughput: {mibps:,.0f} MiB/s per client, EFS User Guide, "
                                "'Amazon EFS performance specifications'")


def merge_samples(parts: Sequence[ProcessSamples]) -> ProcessSamples:
    total = ProcessSamples(0, 0, 0)
    for part in parts:
        total = total + part
    return total
