"""Calls a dead NFS server can hang (stat, statvfs, open and read), with a timeout and never piling up.

On a hard mount whose server is away, a system call that needs the server blocks in
the kernel until the server comes back, and no Python timeout can interrupt it. So
each call runs in a daemon thread (it never holds the process at exit) and the
caller waits for it at most a timeout; a call that does not return in time stays
behind, and is the only one its server gets: while it is outstanding, later calls
for the same key (the server's superblock, ``major:minor``) are refused at once
instead of starting another thread that would hang as well. Past ``limit`` stuck
calls in all, every new call is refused. At most ``limit`` threads, ever, hang.

One instance serves the whole agent (it lives on its ProcRoot): the statvfs()
probe of each server, and the SQLite scan's stat() and header reads, so a server
one of them found dead is not asked again by the other. Measured in the kernel lab
with nfsd stopped (tests/kernel/test_dead_server.py).

A thread left behind never holds the process at exit only while the kernel can kill
it: an NFS request waits killably, so exit_group's SIGKILL ends it. A few waits in the
NFS client cannot be interrupted at all (writeback before a stat(), an inode lock
behind a writer stuck in write()); a thread in one keeps the whole process from
exiting, whatever Python does, until the server answers. So the calls made here must
never be of those kinds (see adapters/cachedstat.py), and ``stuck_calls`` says what
was left behind, for the exit's last log line.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

DEFAULT_LIMIT = 32


class Outcome(StrEnum):
    DONE = "done"  # returned a value
    FAILED = "failed"  # raised an OSError (the server's own answer, or the file gone)
    TIMED_OUT = "timed-out"  # still blocked after the timeout: it stays outstanding
    BUSY = "busy"  # not started: an earlier call for the same key is still blocked
    FULL = "full"  # not started: ``limit`` calls are blocked already


@dataclass(frozen=True)
class CallResult:
    outcome: Outcome
    value: Any = None
    error: OSError | None = None

    @property
    def stalled(self) -> bool:
        """Nothing learned because a server does not answer (or may not: too many are stuck)."""
        return self.outcome in (Outcome.TIMED_OUT, Outcome.BUSY, Outcome.FULL)


@dataclass
class _Call:
    what: str
    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: OSError | None = None


@dataclass(frozen=True)
class StuckCall:
    """A call still blocked in the kernel: its key (the server's superblock), what it is, and for how long."""

    key: str
    what: str
    seconds: float

    def __str__(self) -> str:
        return f"{self.what} on {self.key} for {self.seconds:.0f} s"


class Pending:
    """A call started in its thread; ``result`` waits for it (and tells ``waited`` how long, when in vain)."""

    def __init__(self, call: _Call, waited: Callable[[float], None]) -> None:
        self._call = call
        self._waited = waited

    def result(self, timeout: float) -> CallResult:
        started = time.monotonic()
        if not self._call.done.wait(max(0.0, timeout)):
            self._waited(time.monotonic() - started)
            return CallResult(Outcome.TIMED_OUT)
        if self._call.error is not None:
            return CallResult(Outcome.FAILED, error=self._call.error)
        return CallResult(Outcome.DONE, self._call.value)


class BoundedCalls:
    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._outstanding: dict[str, _Call] = {}
        self._lock = threading.Lock()
        #: Seconds callers have waited in all for calls that did not return in time: the time spent waiting on
        #: servers that did not answer (a scan's share is the difference across it).
        self.waited_in_vain = 0.0

    def _add_wait(self, seconds: float) -> None:
        with self._lock:
            self.waited_in_vain += seconds

    @property
    def stuck(self) -> int:
        """Calls still blocked in the kernel (at most one per key, at most ``limit``)."""
        return len(self.stuck_calls())

    def stuck_calls(self) -> list[StuckCall]:
        """The calls still blocked in the kernel, oldest first."""
        now = time.monotonic()
        with self._lock:
            calls = [(key, call) for key, call in self._outstanding.items() if not call.done.is_set()]
        return [StuckCall(key, call.what, now - call.started) for key, call in sorted(calls, key=lambda kc: kc[1].started)]

    def submit(self, key: str, fn: Callable[..., Any], *args: Any) -> Pending | CallResult:
        """Start ``fn(*args)`` in its own daemon thread, or refuse at once (BUSY, FULL) without starting it."""
        with self._lock:
            for done in [k for k, call in self._outstanding.items() if call.done.is_set()]:
                del self._outstanding[done]
            if key in self._outstanding:
                return CallResult(Outcome.BUSY)
            if len(self._outstanding) >= self.limit:
                return CallResult(Outcome.FULL)
            call = _Call(what=f"{getattr(fn, '__name__', 'call')}({', '.join(map(str, args))})")
            self._outstanding[key] = call

        def run() -> None:
            try:
                call.value = fn(*args)
            except OSError as error:
                call.error = error
            finally:
                call.done.set()

        threading.Thread(target=run, name=f"bounded-{key}", daemon=True).start()
        return Pending(call, self._add_wait)

    def run(self, key: str, fn: Callable[..., Any], *args: Any, timeout: float) -> CallResult:
        """``fn(*args)``, waited for at most ``timeout`` seconds."""
        started = self.submit(key, fn, *args)
        return started if isinstance(started, CallResult) else started.result(timeout)

    def wait_all(self, started: dict[str, "Pending | CallResult"], timeout: float) -> dict[str, CallResult]:
        """Wait for calls started together, all within one ``timeout``."""
        deadline = time.monotonic() + timeout
        return {key: call if isinstance(call, CallResult) else call.result(deadline - time.monotonic())
                for key, call in started.items()}
