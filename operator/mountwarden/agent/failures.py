"""The facts of a node's broken mounts, read without ever waiting on a server; judged by core/node/failures.py.

What is read, and why none of it can hang the agent (no file system is touched but procfs and a
character device; the one network-file-system call, the statvfs() probe, is agent/probe.py's, bounded):

- the kernel log (``--kernel-log``, /dev/kmsg), opened non-blocking so that a read at its end returns
  at once, for the NFS client's lines about its servers; the first read replays the log since boot, so
  a restarted agent knows what was said before it. Reading it needs CAP_SYSLOG (Debian's kernels restrict
  dmesg) and the device itself, which a container reaches only privileged: the chart's agent goes without
  it, and its findings rest on the probe and on mountstats (docs/security.md).
- the mount helpers: each process's /proc/<pid>/stat (command, state, start) and, for mount.nfs and
  umount.nfs only, its command line and wchan (where it waits, when in D).
- the host's TCP listeners (<proc>/1/net/tcp and tcp6): where efs-utils' TLS tunnel listens.
"""

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.activity import VolumeActivity, stat_command, stat_fields, volume_key
from mountwarden.agent.probe import STATVFS_PROBE, ProbeResults
from mountwarden.core.node.failures import (
    DEFAULT_HELPER_STUCK_SECONDS,
    HELPER_COMMANDS,
    MountHelper,
    NodeFacts,
    PodNamer,
    ServerLog,
    node_failures,
    tunnel_port,
)
from mountwarden.core.node.report import NodeFinding
from mountwarden.core.node.scan import NodeScan
from mountwarden.core.procfs.kmsg import parse_kmsg_record, server_word
from mountwarden.core.procfs.sockets import Listener

log = logging.getLogger(__name__)

DEFAULT_KERNEL_LOG = "/dev/kmsg"
#: A /dev/kmsg read returns one record; a buffer smaller than a record fails with EINVAL.
_RECORD_BYTES = 16384
#: Servers remembered from the kernel log, the most recently named kept (a log naming many is not the agent's
#: memory's problem).
MAX_LOGGED_SERVERS = 1024


class KernelLog:
    """The NFS client's lines about its servers, followed in /dev/kmsg from boot on, one read per record."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.clock, self.monotonic = clock, monotonic
        self._fd: int | None = None
        self._unreadable = False
        self._servers: dict[str, ServerLog] = {}

    def servers(self) -> Mapping[str, ServerLog] | None:
        """Every server the log spoke of, as of now; None when the log cannot be read (said once)."""
        if self._unreadable:
            return None
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as error:
                self._unreadable = True
                log.info("not reading the kernel log %s (%s): it needs CAP_SYSLOG and the device; servers are judged "
                         "by the statvfs() probe and mountstats alone", self.path, error.strerror or error)
                return None
        boot = self.clock() - self.monotonic()  # the log counts from boot, as CLOCK_MONOTONIC does
        while True:
            try:
                data = os.read(self._fd, _RECORD_BYTES)
            except BlockingIOError:
                break  # no record left: a non-blocking read never waits
            except BrokenPipeError:
                continue  # records were overwritten before we read them: the next read goes on after them
            except OSError as error:
                log.warning("reading the kernel log %s failed (%s): trying again next scan", self.path, error)
                break
            if not data:
                break
            record = parse_kmsg_record(data.decode(errors="replace"))
            said = server_word(record.message) if record else None
            if said is None:
                continue
            server, word = said
            previous = self._servers.pop(server, None) or ServerLog(server)
            self._servers[server] = previous.observe(word, datetime.fromtimestamp(boot + record.seconds, UTC))
            while len(self._servers) > MAX_LOGGED_SERVERS:
                del self._servers[next(iter(self._servers))]
        return dict(self._servers)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _positional(arguments: Sequence[str]) -> list[str]:
    """A mount helper's SOURCE TARGET (mount.nfs) or TARGET (umount.nfs): its arguments but the options."""
    found, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == "-o":
            skip = True
        elif not argument.startswith("-"):
            found.append(argument)
    return found


def mount_helpers(proc: ProcRoot, now: datetime) -> list[MountHelper]:
    """The host's mount.nfs and umount.nfs processes, with what each mounts and since when."""
    uptime = proc.uptime()
    if uptime is None:
        return []
    ticks = os.sysconf("SC_CLK_TCK")
    helpers = []
    for pid, text in proc.user_processes():
        if stat_command(text) not in HELPER_COMMANDS:
            continue
        state, started = stat_fields(text)
        if state is None or started is None:
            continue
        age = max(0.0, uptime - int(started) / ticks)
        arguments = _positional((proc.command_line(pid) or [])[1:])
        unmount = stat_command(text).startswith("umount")
        source = None if unmount else (arguments[0] if arguments else None)
        target = arguments[0 if unmount else 1] if len(arguments) > (0 if unmount else 1) else None
        helpers.append(MountHelper(pid, stat_command(text), state, now - timedelta(seconds=age), age, source, target,
                                   proc.wchan(pid) if state == "D" else None))
    return helpers


class FailureWatch:
    """Gathers the facts of each scan, judges them (core/node/failures.py) and says what came and went."""

    def __init__(self, proc: ProcRoot, *, node_name: str, kernel_log: str | None = DEFAULT_KERNEL_LOG,
                 helper_stuck_seconds: float = DEFAULT_HELPER_STUCK_SECONDS) -> None:
        self.proc = proc
        self.node_name = node_name
        self.kernel_log = KernelLog(kernel_log) if kernel_log else None
        self.helper_stuck_seconds = helper_stuck_seconds
        self._last: dict[tuple, NodeFinding] = {}

    def judge(self, scan: NodeScan, probed: ProbeResults | None, probe_timeout: float | None,
              recent: Mapping[tuple, VolumeActivity], name: PodNamer, now: datetime | None = None) -> list[NodeFinding]:
        now = now or datetime.now(UTC)
        timeouts = {}
        stuck = {}
        for volume in scan.volumes:
            found = recent.get(volume_key(volume))
            rates = found.activity if found is not None else None
            if rates is not None:
                timeouts[volume.mount_point] = (round(rates.major_timeouts_per_second * rates.window_seconds),
                                                rates.window_seconds)
            if found is not None and found.stuck:
                stuck[volume.mount_point] = found.stuck
        facts = NodeFacts(
            volumes=scan.volumes, answers=dict(probed.answers) if probed else {}, probe_timeout=probe_timeout,
            probe_name=probed.asked_by if probed else STATVFS_PROBE,
            kernel_log=self.kernel_log.servers() if self.kernel_log else None, major_timeouts=timeouts,
            helpers=mount_helpers(self.proc, now), listeners=self._listeners(scan), stuck=stuck,
            helper_stuck_seconds=self.helper_stuck_seconds, node=self.node_name)
        found = node_failures(facts, name, {m.mount_point: m.server or "" for m in scan.network_mounts})
        self._say_changes(found)
        return found

    def _listeners(self, scan: NodeScan) -> frozenset[Listener] | None:
        """The host's listening sockets, read (net/tcp walks every socket of the host) only when a volume is
        mounted through a local tunnel that must be listening."""
        return self.proc.listeners() if any(tunnel_port(volume) is not None for volume in scan.volumes) else None

    def _say_changes(self, found: list[NodeFinding]) -> None:
        now = {(f.finding.reason, f.pod_uid, f.finding.evidence.get("mountPoint"), f.finding.evidence.get("server")): f
               for f in found}
        for key in now.keys() - self._last.keys():
            log.warning("%s: %s", key[0], now[key].finding.message)
        for key in self._last.keys() - now.keys():
            log.info("%s is over: %s", key[0], ", ".join(str(part) for part in key[1:] if part))
        self._last = now

    def close(self) -> None:
        if self.kernel_log is not None:
            self.kernel_log.close()
