"""How NFS mounts break on a node, judged from what the kernel shows there: the failures users report most.

The agent gathers the facts of its node (mountwarden.agent.failures): the statvfs() probe of every pod
volume, the kernel log's lines about servers, the mount helpers still running, the host's TCP
listeners, the processes stuck on each volume. What they mean is decided here, purely:

- ``StaleFileHandle``: the server answered a pod volume's probe with ESTALE. It no longer knows the
  directory the mount was made of (the export re-created, the directory replaced, a gateway's index
  rebuilt: kubernetes#75918, csi-driver-nfs#927, aws-efs-csi-driver#614); only a new mount helps.
  Kernel lab: a directory replaced on the server under a live mount made its every statvfs(), stat()
  and readdir() fail with ESTALE, while a new mount of the same path, on the same superblock, worked.
- ``ServerNotResponding``: per server, from the probe (no answer within its timeout, or a soft mount's
  EIO), the kernel log (``nfs: server X not responding``, until ``nfs: server X OK``) and mountstats'
  major timeouts, whichever the agent could read; a hard mount waits (processes in D, data safe), a
  soft one returns errors (data at risk), and the finding says which mounts do which.
- ``MountHelperStuck``: mount.nfs or umount.nfs alive past the time a mount should take: later mounts
  of that server queue behind it (csi-driver-nfs#1271). Kernel lab: mount.nfs of a server whose packets
  are dropped sleeps in D (rpc_wait_bit_killable) for as long as it retries.
- ``TLSTunnelDown``: a mount of 127.0.0.1 on a tunnel port (efs-utils mounts through stunnel or efs-proxy
  on ports 20049 and up) with nothing listening on that port in the host's network namespace: the mount
  waits until the tunnel is back (efs-utils#69, #374, aws-efs-csi-driver#616).

And what needs the API too, judged by the operator: ``StuckTerminating`` (a pod past its deletion
deadline whose NFS volume is still mounted, with its processes or its server stuck: kubernetes#72048,
#51835, #123960, aws-efs-csi-driver#401) and ``OrphanedMount`` (a pod volume still mounted whose pod no
longer exists).

Every finding carries its remedy in the runbook's words (``REMEDIES``; docs/runbook.md has each one
with its placeholders written ``MOUNT_POINT``, ``NODE``..., and a unit test checks).
"""

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from mountwarden.core.findings import Finding, Reason, Severity
from mountwarden.core.node.activity import StuckProcess
from mountwarden.core.node.report import NodeFinding, NodeReport, ReportedMount
from mountwarden.core.node.scan import NodeVolume, split_source
from mountwarden.core.procfs.kmsg import ServerWord
from mountwarden.core.procfs.sockets import Listener

#: Loopback sources: a local tunnel, not the server (efs-utils mounts 127.0.0.1:/).
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
NFS_PORT = 2049
#: The mount helpers whose life says a mount or an unmount is stuck (comm, at most 15 characters).
HELPER_COMMANDS = frozenset({"mount.nfs", "mount.nfs4", "umount.nfs", "umount.nfs4"})
#: A foreground mount.nfs retries for 2 minutes (nfs(5), retry=); past that, and a minute more, it is stuck.
DEFAULT_HELPER_STUCK_SECONDS = 180.0
#: The kubelet gives an NFS unmount a minute before it forces it (k8s.io/mount-utils, UnmountWithForce):
#: a deleted pod whose volume is still mounted three minutes past its deadline is not going by itself.
DEFAULT_STUCK_AFTER_SECONDS = 180.0

REMEDIES: dict[Reason, str] = {
    Reason.STALE_FILE_HANDLE: (
        "Restart the pod (kubectl delete pod, or let mountwarden evict it: the profile's "
        "spec.remediation.staleFileHandle: Evict) so that the kubelet mounts the volume again: a new mount looks "
        "the export's path up afresh. Then find on the server what replaced the directory (an export or "
        "directory re-created, a snapshot restored, a gateway's index rebuilt) so that it does not happen "
        "again. Do not wait for it to pass and do not umount -f: the handle never becomes valid again."),
    Reason.SERVER_NOT_RESPONDING: (
        "Bring the server back, or the path to it (routes, security groups, NAT, the server's load; on EFS, the "
        "mount target in the node's availability zone): hard mounts resume by themselves, with nothing lost. "
        "Do not force-unmount (umount -f), force-delete the pods or reboot the node while hard mounts hold "
        "unwritten data: it is lost. On soft mounts, look for I/O errors in the applications: a write that "
        "failed is lost and must be done again."),
    Reason.STUCK_TERMINATING: (
        "In order of safety: (1) bring the server, its path or its TLS tunnel back: the processes finish, the pod "
        "goes, nothing lost; (2) on node {node}, umount -f {mount_point}, again until it succeeds: it fails the "
        "requests in flight and so ends the stuck processes, even a writeback wait that SIGKILL does not end, "
        "losing their unwritten data; (3) umount -l: the path goes now, the mount once nothing holds it "
        "(umount(8)); (4) drain and reboot the node. Do not force-delete the pod: the node keeps its mount "
        "(OrphanedMount)."),
    Reason.ORPHANED_MOUNT: (
        "On node {node}: umount {mount_point} (the kubelet then removes the pod's directory). If it is busy and "
        "the server answers, fuser -vm names who holds it. If the server does not answer, bring it back first, or "
        "umount -f, again until it succeeds (unwritten data is lost), or umount -l (the path goes at once, the "
        "mount once nothing holds it: umount(8)). Do not rm -rf the pod's directory while the volume is "
        "mounted: that deletes the data on the server."),
    Reason.MOUNT_HELPER_STUCK: (
        "Find why {server} does not answer the mount (ServerNotResponding; the path to it: routes, security "
        "groups, its exports): later mounts of that server on this node queue behind this one. Once the server "
        "answers, the helper finishes or fails by itself and the kubelet retries; to end it sooner, kill {pids} "
        "(it waits killably). Do not reboot the node for it: only this server's mounts are held."),
    Reason.TLS_TUNNEL_DOWN: (
        "Restart the tunnel: on EKS the EFS CSI driver's node pod (efs-plugin) runs efs-utils' stunnel or "
        "efs-proxy, and its watchdog restarts a tunnel that died; read that pod's logs (and efs-utils' "
        "mount.log) for why it stopped. Once something listens on 127.0.0.1:{port} again, the mount resumes by "
        "itself. Do not unmount the volume or force-delete the pod while the tunnel is down: unwritten data "
        "is lost."),
}
#: How the runbook writes each placeholder of a remedy.
RUNBOOK_PLACEHOLDERS = {"mount_point": "MOUNT_POINT", "node": "NODE", "server": "SERVER", "pids": "PID",
                        "port": "PORT"}


def remedy(reason: Reason, **values: object) -> str:
    """The remedy of a failure, its placeholders filled in (the runbook's own words otherwise)."""
    return REMEDIES[reason].format(**{**RUNBOOK_PLACEHOLDERS, **{k: str(v) for k, v in values.items()}})


def _finding(reason: Reason, severity: Severity, message: str, evidence: Mapping[str, object],
             **values: object) -> Finding:
    return Finding(reason, severity, message, remedy(reason, **values),
                   evidence={key: str(value) for key, value in evidence.items() if value not in (None, "")})


def _clock(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


# -- what the agent saw -----------------------------------------------------------------------------------


class ProbeAnswer(StrEnum):
    """What one pod volume's statvfs() probe got."""

    ANSWERED = "answered"
    STALE = "stale"  # ESTALE: the server answered that it no longer knows the mount's root
    NO_ANSWER = "no-answer"  # nothing within the timeout, or a call still stuck since an earlier scan
    FAILED = "failed"  # EIO or ETIMEDOUT: a soft mount gave up on its server
    UNKNOWN = "unknown"  # not probed, or an error that says nothing of the server

    @property
    def server_answered(self) -> bool | None:
        if self in (ProbeAnswer.ANSWERED, ProbeAnswer.STALE):
            return True
        if self in (ProbeAnswer.NO_ANSWER, ProbeAnswer.FAILED):
            return False
        return None


@dataclass(frozen=True, slots=True)
class ServerLog:
    """What the kernel log said of one server, oldest to newest (``observe`` each line)."""

    server: str
    #: The first "not responding" since the last "OK" (or ever), the last of them, and the last "OK".
    not_responding_since: datetime | None = None
    last_not_responding: datetime | None = None
    last_ok: datetime | None = None
    #: The words of the last "not responding" line.
    last_word: ServerWord | None = None

    @property
    def says_down(self) -> bool:
        """The last line about the server says it does not respond (a soft mount's server is never said OK)."""
        return self.last_not_responding is not None and (self.last_ok is None or self.last_not_responding > self.last_ok)

    def observe(self, word: ServerWord, at: datetime) -> "ServerLog":
        if not word.not_responding:
            return ServerLog(self.server, None, self.last_not_responding, at, self.last_word)
        return ServerLog(self.server, self.not_responding_since or at, at, self.last_ok, word)


@dataclass(frozen=True, slots=True)
class MountHelper:
    """A mount.nfs or umount.nfs process of the host."""

    pid: int
    command: str
    state: str
    started_at: datetime
    age_seconds: float
    #: server:/export for a mount, None for an unmount (its mount point says which server).
    source: str | None = None
    mount_point: str | None = None
    wchan: str | None = None

    def __str__(self) -> str:
        doing = f"{self.source} on {self.mount_point}" if self.source else f"{self.mount_point}"
        state = "in uninterruptible sleep (D" + (f", waiting in {self.wchan}" if self.wchan and self.wchan != "0"
                                                   else "") + ")" if self.state == "D" else f"in state {self.state}"
        return f"{self.command} (pid {self.pid}) of {doing}, running since {_clock(self.started_at)}, {state}"


@dataclass(frozen=True)
class NodeFacts:
    """What the agent saw on its node in one scan, for the failure checks."""

    volumes: Sequence[NodeVolume]
    #: Each pod volume's probe, by mount point (empty without probes).
    answers: Mapping[str, ProbeAnswer] = field(default_factory=dict)
    probe_timeout: float | None = None
    #: What asked the servers: "statvfs() probe" of each pod volume, or "RPC NULL call" of each server.
    probe_name: str = "statvfs() probe"
    #: The kernel log's servers; None when the agent cannot read the log.
    kernel_log: Mapping[str, ServerLog] | None = None
    #: Major timeouts counted in mountstats over the agent's window, by mount point: (count, seconds).
    major_timeouts: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    helpers: Sequence[MountHelper] = ()
    #: The host's listening TCP sockets; None when they cannot be read.
    listeners: frozenset[Listener] | None = None
    #: Processes of each pod volume's pod stuck in D on it, by mount point.
    stuck: Mapping[str, Sequence[StuckProcess]] = field(default_factory=dict)
    helper_stuck_seconds: float = DEFAULT_HELPER_STUCK_SECONDS
    node: str = ""


#: How a finding names a pod: its UID -> "pod ns/name" (or "pod UID ..." when the agent does not know it).
PodNamer = Callable[[str], str]


def _named(uid: str) -> str:
    return f"pod UID {uid}"


def is_hard(volume: NodeVolume) -> bool:
    """nfs(5): hard unless soft or softerr is in effect."""
    return not {"soft", "softerr"} & set(volume.effective_options)


def tunnel_port(volume: NodeVolume) -> int | None:
    """The local port of a mount through a tunnel: a loopback source with a port other than NFS's."""
    if volume.server not in LOOPBACK:
        return None
    for option in volume.effective_options:
        name, _, value = option.partition("=")
        if name == "port" and value.isdigit() and int(value) not in (0, NFS_PORT):
            return int(value)
    return None


def _listening(listeners: frozenset[Listener], port: int) -> bool:
    return any(listener.port == port and listener.address in ("127.0.0.1", "0.0.0.0", "::", "::1")
               for listener in listeners)


def _whose(volume: NodeVolume, name: PodNamer) -> str:
    return f"volume {volume.volume_name} of {name(volume.pod_uid)}" if volume.pod_uid else \
        f"the staging mount {volume.mount_point}"


# -- the agent's judgements -------------------------------------------------------------------------------


def stale_handles(facts: NodeFacts, name: PodNamer = _named) -> list[NodeFinding]:
    found = []
    for volume in facts.volumes:
        if facts.answers.get(volume.mount_point) is not ProbeAnswer.STALE:
            continue
        message = (f"{_whose(volume, name)}: {volume.server or 'the server'} answered the agent's statvfs() of "
                   f"{volume.mount_point} with ESTALE (Stale file handle): it no longer knows the directory "
                   f"{volume.export or volume.source} this mount was made of (the export re-created, the directory "
                   "replaced or removed, or a gateway's index rebuilt). Every access of the pod to the volume fails "
                   "with the same error until it is mounted again.")
        evidence = {"node": facts.node, "volume": volume.volume_name, "mountPoint": volume.mount_point,
                    "server": volume.server, "export": volume.export, "probe": "ESTALE"}
        found.append(NodeFinding(_finding(Reason.STALE_FILE_HANDLE, Severity.ERROR, message, evidence),
                                 volume.pod_uid))
    return found


def tunnels_down(facts: NodeFacts, name: PodNamer = _named) -> list[NodeFinding]:
    if facts.listeners is None:
        return []
    found = []
    for volume in facts.volumes:
        port = tunnel_port(volume)
        if port is None or _listening(facts.listeners, port):
            continue
        waits = "waits" if is_hard(volume) else "fails (soft mount: data at risk)"
        message = (f"{_whose(volume, name)} is mounted from {volume.source} through a local TLS tunnel on "
                   f"127.0.0.1:{port} (efs-utils' stunnel or efs-proxy), and nothing listens on that port in the "
                   f"host's network namespace: the tunnel is down, and every request of {volume.mount_point} "
                   f"{waits} until it is back.")
        evidence = {"node": facts.node, "volume": volume.volume_name, "mountPoint": volume.mount_point,
                    "port": port, "probe": facts.answers.get(volume.mount_point, ProbeAnswer.UNKNOWN).value}
        found.append(NodeFinding(_finding(Reason.TLS_TUNNEL_DOWN, Severity.ERROR, message, evidence, port=port),
                                 volume.pod_uid))
    return found


def _server_key(volume: NodeVolume) -> str:
    port = tunnel_port(volume)
    return f"{volume.server}:{port}" if port else (volume.server or volume.source)


def _mount_list(volumes: Sequence[NodeVolume], name: PodNamer, stuck: Mapping[str, Sequence[StuckProcess]]) -> str:
    parts = []
    for volume in volumes:
        processes = stuck.get(volume.mount_point) or ()
        held = f" ({len(processes)} process(es) in D)" if processes else ""
        parts.append(f"{volume.mount_point} ({name(volume.pod_uid) if volume.pod_uid else 'staging'}){held}")
    return "; ".join(parts)


def servers_not_responding(facts: NodeFacts, name: PodNamer = _named) -> list[NodeFinding]:
    tunnel_down = {f.finding.evidence["mountPoint"] for f in tunnels_down(facts, name)}
    by_server: dict[str, list[NodeVolume]] = defaultdict(list)
    for volume in facts.volumes:
        if volume.mount_point not in tunnel_down:  # the tunnel, not the server, is what does not answer
            by_server[_server_key(volume)].append(volume)
    found = []
    for server, volumes in sorted(by_server.items()):
        answers = [facts.answers.get(v.mount_point, ProbeAnswer.UNKNOWN) for v in volumes]
        log = (facts.kernel_log or {}).get(volumes[0].server or "")
        timeouts = sum(facts.major_timeouts.get(v.mount_point, (0, 0.0))[0] for v in volumes)
        window = max((facts.major_timeouts.get(v.mount_point, (0, 0.0))[1] for v in volumes), default=0.0)
        probed = [answer for answer in answers if answer.server_answered is not None]
        if probed:
            down = any(answer.server_answered is False for answer in probed)
        else:  # no probe: the kernel's own word, or requests that timed out in the window
            down = bool(log and log.says_down) or timeouts > 0
        if not down:
            continue
        evidence_text = []
        if ProbeAnswer.NO_ANSWER in answers:
            evidence_text.append(f"the agent's {facts.probe_name} got no answer within {facts.probe_timeout or 0:.0f} s")
        if ProbeAnswer.FAILED in answers:
            evidence_text.append("a soft mount's statvfs() probe failed with EIO (the client gave up on it)")
        if log and log.says_down and log.not_responding_since and log.last_word:
            evidence_text.append(f"the kernel logged 'server {log.server} {log.last_word.value}' since "
                                 f"{_clock(log.not_responding_since)}")
        if timeouts:
            evidence_text.append(f"mountstats counted {timeouts} major timeout(s) (requests unanswered for "
                                 f"timeo x retrans) in the last {window:.0f} s")
        hard = [v for v in volumes if is_hard(v)]
        soft = [v for v in volumes if not is_hard(v)]
        said = [f"NFS server {server} does not answer: " + "; ".join(evidence_text) + "."]
        if hard:
            said.append("Hard mounts wait for it, their data safe: every process touching them sleeps "
                        f"uninterruptibly (D) until it answers: {_mount_list(hard, name, facts.stuck)}.")
        if soft:
            said.append("Soft mounts return errors, their data at risk: each request fails with EIO after "
                        f"timeo x retrans, and a write that fails is lost: {_mount_list(soft, name, facts.stuck)}.")
        evidence = {"node": facts.node, "server": server, "hardMounts": len(hard), "softMounts": len(soft),
                    "probe": ",".join(sorted({a.value for a in answers})),
                    "kernelLog": f"{log.last_word.value} since {_clock(log.not_responding_since)}"
                    if log and log.says_down and log.not_responding_since and log.last_word else "",
                    "majorTimeouts": timeouts or ""}
        pods = tuple(dict.fromkeys(v.pod_uid for v in volumes if v.pod_uid))
        severity = Severity.CRITICAL if soft else Severity.ERROR
        found.append(NodeFinding(_finding(Reason.SERVER_NOT_RESPONDING, severity, " ".join(said), evidence),
                                 pods=pods))
    return found


def stuck_helpers(facts: NodeFacts, mounts: Mapping[str, str]) -> list[NodeFinding]:
    """``mounts``: every network mount point of the node -> its server (an unmount names a mount point only)."""
    by_server: dict[str, list[MountHelper]] = defaultdict(list)
    for helper in facts.helpers:
        if helper.age_seconds < facts.helper_stuck_seconds:
            continue
        server = (split_source(helper.source)[0] if helper.source else None) or \
            mounts.get(helper.mount_point or "") or "an unknown server"
        by_server[server].append(helper)
    found = []
    for server, helpers in sorted(by_server.items()):
        pids = " ".join(str(helper.pid) for helper in helpers)
        message = (f"{'; '.join(map(str, helpers))}: alive longer than the {facts.helper_stuck_seconds:.0f} s a mount "
                   f"helper should take (a foreground mount retries for 2 minutes, nfs(5)). Later mounts of {server} "
                   "on this node queue behind it, and pods using it cannot start or stop (csi-driver-nfs#1271).")
        evidence = {"node": facts.node, "server": server, "pids": pids,
                    "commands": ",".join(sorted({h.command for h in helpers}))}
        found.append(NodeFinding(_finding(Reason.MOUNT_HELPER_STUCK, Severity.WARNING, message, evidence,
                                          server=server, pids=pids)))
    return found


def node_failures(facts: NodeFacts, name: PodNamer = _named, mounts: Mapping[str, str] | None = None) -> list[NodeFinding]:
    """Every failure the agent can judge on its node alone."""
    servers = mounts if mounts is not None else {v.mount_point: v.server or "" for v in facts.volumes}
    return [*stale_handles(facts, name), *tunnels_down(facts, name), *servers_not_responding(facts, name),
            *stuck_helpers(facts, servers)]


# -- what needs the API too: the operator's ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeletingPod:
    uid: str
    namespace: str
    name: str
    #: metadata.deletionTimestamp: when its grace period ends (the API sets it to the deletion plus the grace).
    deadline: datetime


_MENTIONS_MOUNT = (Reason.SERVER_NOT_RESPONDING, Reason.TLS_TUNNEL_DOWN, Reason.MOUNT_HELPER_STUCK)


def _node_trouble(report: NodeReport, mount: ReportedMount) -> list[str]:
    """What the agent found on the node that keeps ``mount`` from being unmounted."""
    said = []
    for node_finding in report.findings:
        finding = node_finding.finding
        if finding.reason not in _MENTIONS_MOUNT:
            continue
        server = finding.evidence.get("server", "")
        if (finding.evidence.get("mountPoint") == mount.mount_point or mount.mount_point in finding.message
                or (server and mount.server and server.split(":")[0] == mount.server)):
            said.append(f"{finding.reason} ({finding.message.split(':')[0]})")
    return said


def stuck_terminating(report: NodeReport, deleting: Mapping[str, DeletingPod], *, now: datetime,
                      after: timedelta) -> list[NodeFinding]:
    """Pods past their deletion deadline (and ``after`` more) whose NFS volume the node still mounts, stuck."""
    found = []
    for mount in report.mounts:
        pod = deleting.get(mount.pod_uid or "")
        if pod is None or now < pod.deadline + after or report.scan_time < pod.deadline:
            continue
        why = []
        if mount.stuck_processes:
            why.append("its processes are stuck on it: " + "; ".join(str(process) for process in mount.stuck_processes))
        if mount.server_responding is False:
            why.append(f"its server {mount.server or ''} does not answer the agent's probe".replace("  ", " "))
        why += [said for said in _node_trouble(report, mount)
                if not (mount.server_responding is False and said.startswith(Reason.SERVER_NOT_RESPONDING))]
        if not why:
            continue  # something other than NFS holds it (a finalizer, the runtime): not ours to say
        message = (f"pod {pod.namespace}/{pod.name}, deleted to be gone by {_clock(pod.deadline)}, still has its "
                   f"volume {mount.volume_name} mounted on node {report.node}: " + "; ".join(why) + ", so the pod "
                   "stays Terminating.")
        evidence = {"node": report.node, "volume": mount.volume_name, "mountPoint": mount.mount_point,
                    "server": mount.server, "deadline": _clock(pod.deadline),
                    "stuckProcesses": ", ".join(f"{p.pid}:{p.command}:{p.wchan or '?'}" for p in mount.stuck_processes)}
        found.append(NodeFinding(_finding(Reason.STUCK_TERMINATING, Severity.ERROR, message, evidence,
                                          mount_point=mount.mount_point, node=report.node), mount.pod_uid))
    return found


def orphaned_mounts(report: NodeReport, orphans: Mapping[str, datetime], *, now: datetime,
                    after: timedelta) -> list[NodeFinding]:
    """Pod volumes whose pod no longer exists, seen so since ``orphans[mount point]`` for ``after`` or more."""
    found = []
    for mount in report.mounts:
        since = orphans.get(mount.mount_point)
        if since is None or now - since < after:
            continue
        held = ("; the processes holding it: " + "; ".join(map(str, mount.stuck_processes))
                if mount.stuck_processes else "")
        answer = f"; its server {mount.server} does not answer" if mount.server_responding is False else ""
        message = (f"{mount.mount_point} (volume {mount.volume_name}, server {mount.server or 'unknown'}) is still "
                   f"mounted on node {report.node}, but its pod (UID {mount.pod_uid}) no longer exists: seen so "
                   f"since {_clock(since)}. The pod was force-deleted, or the kubelet restarted, before the volume "
                   f"could be unmounted{held}{answer}.")
        evidence = {"node": report.node, "volume": mount.volume_name, "mountPoint": mount.mount_point,
                    "podUid": mount.pod_uid, "server": mount.server}
        found.append(NodeFinding(_finding(Reason.ORPHANED_MOUNT, Severity.WARNING, message, evidence,
                                          mount_point=mount.mount_point, node=report.node)))
    return found


def runbook_form(reason: Reason) -> str:
    """The remedy as the runbook writes it: placeholders as ``MOUNT_POINT``, whitespace as one space."""
    return " ".join(remedy(reason).split())
