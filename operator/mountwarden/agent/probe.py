"""Is each NFS server answering, and does it still know each mount? statvfs() of every pod volume, never piling up.

statvfs() on NFS always asks the server (there is no cache for it), so it is a true probe: one
small request per pod volume per scan (on EFS each metered as one 4 KiB metadata operation). It
asks about the directory the mount was made of, so it also finds a mount whose directory the server
no longer knows (ESTALE): mounts of one superblock can differ in that, since a directory replaced on
the server leaves the mounts made before stale and those made after fine (kernel lab,
tests/kernel/test_kernel_mount_failures.py). So every pod volume is asked, not one per superblock.

On a hard mount whose server is away the call blocks in the kernel until the server comes back
(killably: SIGKILL ends it), so the probes go through the proc root's BoundedCalls
(adapters/bounded.py), one call per superblock that statvfs()es its mounts in turn: all of a scan's
calls run at once and are waited for at most ``timeout`` seconds together, and a superblock with a
call still blocked since an earlier scan (a probe, or the SQLite scan's stat) is reported as not
responding without a new one: at most one stuck thread per superblock, ever. Measured in the kernel
lab with nfsd stopped (tests/kernel/test_dead_server.py, tests/kernel/test_server_not_responding.py).
"""

import errno
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from mountwarden.adapters.bounded import CallResult, Outcome
from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.rpcping import Ping, ping
from mountwarden.core.node.failures import ProbeAnswer
from mountwarden.core.node.rpcnull import NFS_PORT, Verdict

DEFAULT_PROBE_TIMEOUT_SECONDS = 5.0
#: What the agent says (log, and each volume's notes) when it may not probe: docs/security.md names it.
PROBE_FORBIDDEN = "ProbeForbidden"
log = logging.getLogger(__name__)
#: EIO/ETIMEDOUT: a soft mount giving up on its server.
_GAVE_UP = (errno.EIO, errno.ETIMEDOUT)


def statvfs(*paths: str) -> dict[str, int]:
    """statvfs() of each path in turn: 0 where it answered, else its errno (run in a bounded thread)."""
    answers = {}
    for path in paths:
        try:
            os.statvfs(path)
            answers[path] = 0
        except OSError as error:
            if isinstance(error, PermissionError):
                raise  # the agent may not follow /proc/1/root: nothing learned of any server
            answers[path] = error.errno or -1
    return answers


def _answer(code: int) -> ProbeAnswer:
    if code == 0:
        return ProbeAnswer.ANSWERED
    if code == errno.ESTALE:
        return ProbeAnswer.STALE
    return ProbeAnswer.FAILED if code in _GAVE_UP else ProbeAnswer.UNKNOWN  # ENOENT, EACCES: nothing of the server


class ProbedMount(Protocol):
    """A mount the probe can ask about: a node scan's ScannedMount, or the SQLite scan's NetworkMount."""

    @property
    def superblock(self) -> str: ...

    @property
    def mount_point(self) -> str: ...


#: How each probe is named in the report's notes, findings and the log.
STATVFS_PROBE = "statvfs() probe"
NULL_PROBE = "RPC NULL call"


@dataclass(frozen=True)
class ProbeResults:
    #: Superblock -> whether its server answered (None: the probe could not ask).
    responding: Mapping[str, bool | None]
    #: Mount point -> what its probe got.
    answers: Mapping[str, ProbeAnswer]
    #: Which probe asked (STATVFS_PROBE or NULL_PROBE).
    asked_by: str = STATVFS_PROBE


def _responding(answers: Sequence[ProbeAnswer]) -> bool | None:
    said = [answer.server_answered for answer in answers if answer.server_answered is not None]
    return (True in said) if said else None


class ServerProbe:
    name = STATVFS_PROBE

    def __init__(self, proc: ProcRoot, timeout: float = DEFAULT_PROBE_TIMEOUT_SECONDS) -> None:
        self.proc = proc
        self.timeout = timeout
        self._said_forbidden = False
        #: Superblocks the last check could not ask about because the agent may not follow /proc/1/root.
        self.forbidden: frozenset[str] = frozenset()

    @property
    def stuck(self) -> int:
        """Calls still blocked in the kernel (at most one per superblock)."""
        return self.proc.calls.stuck

    def check(self, mounts: Sequence[ProbedMount]) -> dict[str, bool | None]:
        """Superblock -> whether its server answered within the timeout (None: the probe could not ask)."""
        return dict(self.probe(mounts).responding)

    def probe(self, mounts: Sequence[ProbedMount]) -> ProbeResults:
        """Every mount's statvfs(), one bounded call per superblock, all waited for within one timeout."""
        by_superblock: dict[str, list[str]] = {}
        for mount in mounts:
            points = by_superblock.setdefault(mount.superblock, [])
            if mount.mount_point not in points:
                points.append(mount.mount_point)
        started = {superblock: self.proc.calls.submit(superblock, statvfs, *map(self._path, points))
                   for superblock, points in by_superblock.items()}
        results = self.proc.calls.wait_all(started, self.timeout)
        self.forbidden = frozenset(superblock for superblock, result in results.items()
                                   if isinstance(result.error, PermissionError))
        responding: dict[str, bool | None] = {}
        answers: dict[str, ProbeAnswer] = {}
        for superblock, result in results.items():
            found = self._answers(by_superblock[superblock], result)
            answers.update(found)
            responding[superblock] = _responding(list(found.values()))
        return ProbeResults(responding, answers)

    def _answers(self, points: list[str], result: CallResult) -> dict[str, ProbeAnswer]:
        if result.outcome == Outcome.DONE:
            return {point: _answer(result.value.get(self._path(point), -1)) for point in points}
        if result.outcome in (Outcome.TIMED_OUT, Outcome.BUSY):
            return dict.fromkeys(points, ProbeAnswer.NO_ANSWER)
        if isinstance(result.error, PermissionError) and not self._said_forbidden:
            self._said_forbidden = True
            log.warning("%s: the statvfs() probe may not follow %s: it needs CAP_SYS_PTRACE (ptrace read access to "
                        "pid 1; the chart's agent.probeServers grants it), or --probe-timeout 0", PROBE_FORBIDDEN,
                        self.proc.path / "1" / "root")
        return dict.fromkeys(points, ProbeAnswer.UNKNOWN)  # FULL: too many other servers are stuck to ask this one

    def _path(self, mount_point: str) -> str:
        return str(self.proc.path / "1" / "root") + mount_point


class NullProbe:
    """Each server asked the RPC NULL call (agent/rpcping.py) instead of a statvfs() of its mounts: no right needed.

    For an agent that may not reach the pod volumes (not root: the kubelet's pod directories are 0750). It asks
    each server once per scan, at the address and port its mounts' client uses (addr= and port=, 2049 when 0; an
    EFS mount through its TLS tunnel asks the tunnel on 127.0.0.1, so the agent must share the node's network),
    all servers at once, each within ``timeout``. A socket never waits in the kernel beyond its timeout, so
    nothing is left stuck and nothing piles up. What it cannot tell: whether the server still knows a mount's
    directory (StaleFileHandle needs the statvfs() probe), and whether the server would answer the kernel's own
    connection (another source port, an existing session).
    """

    name = NULL_PROBE
    #: Nothing is ever forbidden to it (ServerProbe's counterpart).
    forbidden: frozenset[str] = frozenset()

    def __init__(self, timeout: float = DEFAULT_PROBE_TIMEOUT_SECONDS,
                 asker: Callable[..., Ping] = ping) -> None:
        self.timeout = timeout
        self._ping = asker

    def probe(self, mounts: Sequence[ProbedMount]) -> ProbeResults:
        servers: dict[tuple[str, int, int], list[ProbedMount]] = {}
        unaddressed: list[ProbedMount] = []
        for mount in mounts:
            target = rpc_target(getattr(mount, "client_key", None))
            (servers.setdefault(target, []) if target else unaddressed).append(mount)
        answered: dict[tuple[str, int, int], bool | None] = {}
        if servers:
            with ThreadPoolExecutor(max_workers=min(len(servers), 64), thread_name_prefix="rpc-null") as pool:
                asked = {target: pool.submit(self._ping, target[0], port=target[1], version=target[2],
                                             timeout=self.timeout) for target in servers}
                answered = {target: _server_answered(future.result()) for target, future in asked.items()}
        responding: dict[str, bool | None] = {}
        answers: dict[str, ProbeAnswer] = {}
        for target, on_server in servers.items():
            verdict = answered[target]
            if verdict is False:
                log.warning("%s:%d did not answer an RPC NULL call within %.0f s", target[0], target[1], self.timeout)
            for mount in on_server:
                responding[mount.superblock] = verdict
                answers[mount.mount_point] = (ProbeAnswer.UNKNOWN if verdict is None else
                                              ProbeAnswer.ANSWERED if verdict else ProbeAnswer.NO_ANSWER)
        for mount in unaddressed:
            responding.setdefault(mount.superblock, None)
            answers[mount.mount_point] = ProbeAnswer.UNKNOWN
        return ProbeResults(responding, answers, asked_by=NULL_PROBE)


def rpc_target(client_key: Sequence[str] | None) -> tuple[str, int, int] | None:
    """(address, port, NFS version) a mount's NFS client talks to, from its client key (the scan's: version,
    transport, the resolved addr=, port, TLS policy); None when it is not TCP or its address is unknown."""
    if not client_key or len(client_key) < 4:
        return None
    version, transport, address, port = client_key[:4]
    if not address or transport not in ("tcp", "tcp6", ""):
        return None  # the NULL call here speaks TCP only
    try:
        return address, int(port) or NFS_PORT, int(version.split(".", 1)[0] or 4)
    except ValueError:
        return None


def _server_answered(result: Ping) -> bool | None:
    """Any RPC reply means the server is there; none (timed out, refused, reset) means it does not answer; a
    listener that is not an NFS server says nothing of the server."""
    if result.answer is None:
        return False
    return None if result.answer.verdict is Verdict.PROGRAM_NOT_SERVED else True
