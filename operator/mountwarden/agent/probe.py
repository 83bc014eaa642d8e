"""Is each NFS server answering? One statvfs() per superblock per scan, never piling up.

statvfs() on NFS always asks the server (there is no cache for it), so it is a true probe:
one small request per superblock per scan (on EFS metered as one 4 KiB metadata operation).
On a hard mount whose server is away the call blocks in the kernel until the server comes
back, so each probe runs in a daemon thread, the scan waits for all of them at most
``timeout`` seconds, and a superblock whose previous probe has not returned yet is reported
as not responding without a new probe: at most one stuck thread per superblock, ever.
Measured in the kernel lab with nfsd stopped (tests/kernel/test_dead_server.py).
"""

import errno
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.core.nodescan import ScannedMount

DEFAULT_PROBE_TIMEOUT_SECONDS = 5.0


@dataclass
class _Probe:
    thread: threading.Thread
    done: threading.Event = field(default_factory=threading.Event)
    #: True: the server answered; False: it failed the call (a soft mount's EIO); None: nothing learned.
    answered: bool | None = None


class ServerProbe:
    def __init__(self, proc: ProcRoot, timeout: float = DEFAULT_PROBE_TIMEOUT_SECONDS) -> None:
        self.proc = proc
        self.timeout = timeout
        self._outstanding: dict[str, _Probe] = {}
        self._lock = threading.Lock()

    @property
    def stuck(self) -> int:
        """Probes still blocked in the kernel (at most one per superblock)."""
        with self._lock:
            return sum(1 for probe in self._outstanding.values() if not probe.done.is_set())

    def check(self, mounts: Sequence[ScannedMount]) -> dict[str, bool | None]:
        """Superblock -> whether its server answered within the timeout (None: the probe could not ask)."""
        first_mount: dict[str, ScannedMount] = {}
        for mount in mounts:
            first_mount.setdefault(mount.superblock, mount)
        started: dict[str, _Probe] = {}
        results: dict[str, bool | None] = {}
        with self._lock:
            for superblock, mount in first_mount.items():
                previous = self._outstanding.get(superblock)
                if previous is not None and not previous.done.is_set():
                    results[superblock] = False  # still blocked since an earlier scan
                    continue
                started[superblock] = self._start(superblock, mount.mount_point)
        deadline = time.monotonic() + self.timeout
        for superblock, probe in started.items():
            probe.done.wait(max(0.0, deadline - time.monotonic()))
            results[superblock] = probe.answered if probe.done.is_set() else False
        with self._lock:  # forget the probes that returned; keep the stuck ones
            for superblock, probe in list(self._outstanding.items()):
                if probe.done.is_set():
                    del self._outstanding[superblock]
        return results

    def _start(self, superblock: str, mount_point: str) -> _Probe:
        path = str(self.proc.path / "1" / "root") + mount_point

        def run() -> None:
            try:
                os.statvfs(path)
                probe.answered = True
            except OSError as error:
                # EIO/ETIMEDOUT is a soft mount giving up on its server; ENOENT/EACCES says nothing of it.
                probe.answered = False if error.errno in (errno.EIO, errno.ETIMEDOUT) else None
            finally:
                probe.done.set()

        probe = _Probe(threading.Thread(target=run, name=f"probe-{superblock}", daemon=True))
        self._outstanding[superblock] = probe
        probe.thread.start()
        return probe
