"""What wakes the agent between its periodic scans: the host's mount table changing, or a nudge.

The kernel marks /proc/<pid>/mountinfo with POLLPRI and POLLERR whenever a mount or
unmount changes that process's mount namespace (fs/proc_namespace.c, mounts_poll: each
open file remembers the namespace's event counter it last reported), which is how
systemd follows mounts. poll() on the host's pid 1 file therefore returns on every
kubelet mount of a pod volume, and the agent rescans at once instead of at its next
interval. A file that is not a proc mount table (a directory of samples in tests) is
never marked: the agent then scans on its interval only.

A nudge (from another thread: the pod watch, a signal) wakes the same poll through a pipe.
"""

import contextlib
import os
import select
import threading
import time
from pathlib import Path

#: poll() flags the kernel sets on a mount table that changed.
CHANGED = select.POLLPRI | select.POLLERR


class Wakeup:
    """Wait until the mount table changes, a nudge arrives, or a timeout passes."""

    def __init__(self, mountinfo: Path | None) -> None:
        self._poll = select.poll()
        self._nudge_read, self._nudge_write = os.pipe()
        os.set_blocking(self._nudge_read, False)
        os.set_blocking(self._nudge_write, False)
        self._poll.register(self._nudge_read, select.POLLIN)
        self._mountinfo: int | None = None
        self._lock = threading.Lock()
        self.mount_events = 0
        if mountinfo is not None:
            try:
                self._mountinfo = os.open(mountinfo, os.O_RDONLY)
            except OSError:
                self._mountinfo = None  # no mount table to follow: the interval alone paces the scans
            else:
                self._poll.register(self._mountinfo, select.POLLPRI)

    @property
    def follows_mounts(self) -> bool:
        return self._mountinfo is not None

    def nudge(self) -> None:
        """Wake a waiting ``wait`` (thread- and signal-safe; nudges before a wait are kept)."""
        # A full pipe holds nudges already (the waiter wakes anyway); a closed one has nobody waiting.
        with contextlib.suppress(OSError):
            os.write(self._nudge_write, b"!")

    def wait(self, timeout: float, settle: float = 0.05) -> bool:
        """Wait up to ``timeout`` seconds; True when woken by a change or a nudge.

        After the first change it waits ``settle`` more seconds for the changes that come
        with it (a CSI volume is a staging mount and a bind mount), so that one scan sees them all.
        """
        if not self._wait_once(timeout):
            return False
        deadline = time.monotonic() + settle
        while (remaining := deadline - time.monotonic()) > 0 and self._wait_once(remaining):
            pass
        return True

    def _wait_once(self, timeout: float) -> bool:
        try:
            ready = self._poll.poll(max(0, int(timeout * 1000)))
        except InterruptedError:  # a signal: its handler nudges if it means anything
            return False
        woken = False
        for fd, events in ready:
            if fd == self._nudge_read:
                self._drain()
                woken = True
            elif events & CHANGED:
                # Reporting the change reset it (mounts_poll stores the event counter): no read needed.
                self.mount_events += 1
                woken = True
        return woken

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._nudge_read, 4096):
                pass

    def close(self) -> None:
        with self._lock:
            for fd in (self._mountinfo, self._nudge_read, self._nudge_write):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._mountinfo = None
