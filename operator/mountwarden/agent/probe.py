"""Is each NFS server answering? One statvfs() per superblock per scan, never piling up.

statvfs() on NFS always asks the server (there is no cache for it), so it is a true probe:
one small request per superblock per scan (on EFS metered as one 4 KiB metadata operation).
On a hard mount whose server is away the call blocks in the kernel until the server comes
back, so the probes go through the proc root's BoundedCalls (adapters/bounded.py), keyed by
superblock: all of a scan's probes run at once and are waited for at most ``timeout``
seconds together, and a superblock with a call still blocked since an earlier scan (a
probe, or the SQLite scan's stat) is reported as not responding without a new one: at
most one stuck thread per superblock, ever. Measured in the kernel lab with nfsd stopped
(tests/kernel/test_dead_server.py).
"""

import errno
import logging
import os
from collections.abc import Sequence
from typing import Protocol

from mountwarden.adapters.bounded import CallResult, Outcome
from mountwarden.adapters.procreader import ProcRoot

DEFAULT_PROBE_TIMEOUT_SECONDS = 5.0
#: What the agent says (log, and each volume's notes) when it may not probe: docs/security.md names it.
PROBE_FORBIDDEN = "ProbeForbidden"
log = logging.getLogger(__name__)


def _answered(result: CallResult) -> bool | None:
    """True: the server answered; False: it did not, or failed the call (a soft mount's EIO); None: nothing learned."""
    if result.outcome == Outcome.DONE:
        return True
    if result.outcome in (Outcome.TIMED_OUT, Outcome.BUSY):
        return False
    if result.outcome == Outcome.FAILED and result.error is not None:
        # EIO/ETIMEDOUT is a soft mount giving up on its server; ENOENT/EACCES says nothing of it.
        return False if result.error.errno in (errno.EIO, errno.ETIMEDOUT) else None
    return None  # FULL: too many other servers are stuck to ask this one


class ProbedMount(Protocol):
    """A mount the probe can ask about: a node scan's ScannedMount, or the SQLite scan's NetworkMount."""

    @property
    def superblock(self) -> str: ...

    @property
    def mount_point(self) -> str: ...


class ServerProbe:
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
        first_mount: dict[str, ProbedMount] = {}
        for mount in mounts:
            first_mount.setdefault(mount.superblock, mount)
        started = {superblock: self.proc.calls.submit(superblock, os.statvfs, self._path(mount.mount_point))
                   for superblock, mount in first_mount.items()}
        results = self.proc.calls.wait_all(started, self.timeout)
        self.forbidden = frozenset(superblock for superblock, result in results.items()
                                   if isinstance(result.error, PermissionError))
        if self.forbidden and not self._said_forbidden:
            self._said_forbidden = True
            log.warning("%s: the statvfs() probe may not follow %s: it needs CAP_SYS_PTRACE (ptrace read access to "
                        "pid 1; the chart's agent.probeServers grants it), or --probe-timeout 0", PROBE_FORBIDDEN,
                        self.proc.path / "1" / "root")
        return {superblock: _answered(result) for superblock, result in results.items()}

    def _path(self, mount_point: str) -> str:
        return str(self.proc.path / "1" / "root") + mount_point
