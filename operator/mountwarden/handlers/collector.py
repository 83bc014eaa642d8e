"""The garbage collector kept out of the webhook's way.

A collection stops every thread of the process while it walks the objects of the generations it collects, the
thread answering admission reviews included. At 5,000 PVs and 20,000 pods a full collection took 150 to 800 ms
(bench/results/scale_webhook_profile.txt): every PVC create that met one waited that long. Two things fed them:

- what the first lists filed, which lives as long as the operator: frozen once they are in (``freeze_what_lives``),
  the collector no longer walks it; and what lives on after each full collection, frozen in turn
  (``FreezeAfterFullCollections``), so that the next one walks only what came since. A frozen object is still
  freed when nothing refers to it; only one that ends in a reference cycle is not, so once every
  ``THAW_SECONDS`` everything is thawed and the next full collection walks it all;
- the bursts of the compliance assessment and of the inventory: every 30 s (the assessment once per profile), an
  object or more for each pod volume, all held until the pass ends. The young collections that ran during the burst promoted
  them to the oldest generation, whose growth then set off a full collection. ``during_burst`` turns automatic
  collections off for the burst: what it made is freed by reference counting when it ends, so it never reaches an
  older generation, and the allocation counts that trigger collections fall back as it is freed.
"""

import functools
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

#: How often frozen objects are walked again by a full collection, which frees any that ended in a reference cycle:
#: one long pause a minute (up to 0.8 s at 20,000 pods; before, one every second or two), against cyclic garbage
#: kept for at most as long. Thawed every 10 minutes instead, the operator's peak RSS in the scale bench was 555 MiB;
#: every minute, 446 MiB (391 MiB without this freezing).
THAW_SECONDS = 60.0

_lock = threading.Lock()
_bursts = 0
#: Whether collections were on when the first of the bursts under way began (another owner may have turned them off).
_enabled_before = True


def freeze_what_lives() -> None:
    """Move every object tracked now out of the collector's reach, and from now on what lives through each full
    collection (``FreezeAfterFullCollections``)."""
    gc.freeze()
    _after_full_collections.install()


class FreezeAfterFullCollections:
    """A gc callback: after each full collection, freeze what lived through it; every ``thaw_seconds``, thaw instead."""

    def __init__(self, thaw_seconds: float = THAW_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.thaw_seconds = thaw_seconds
        self.clock = clock
        self.thawed_at = clock()

    def __call__(self, phase: str, info: dict) -> None:
        if phase != "stop" or info.get("generation") != 2:
            return
        if self.clock() - self.thawed_at >= self.thaw_seconds:
            gc.unfreeze()
            self.thawed_at = self.clock()
        else:
            gc.freeze()

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


_after_full_collections = FreezeAfterFullCollections()


def thaw_everything() -> None:
    """Undo ``freeze_what_lives``: no more freezing after full collections, and every frozen object walked again."""
    _after_full_collections.uninstall()
    gc.unfreeze()


def during_burst(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``function`` with automatic collections off; on again when the last burst under way, in any thread, ends.

    For work that allocates much, holds it briefly and makes no reference cycles worth collecting at once (a cycle
    made meanwhile waits for the next collection). Not for work that blocks: no collection runs while it waits.
    """

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        global _bursts, _enabled_before
        with _lock:
            if _bursts == 0:
                _enabled_before = gc.isenabled()
                gc.disable()
            _bursts += 1
        try:
            return function(*args, **kwargs)
        finally:
            with _lock:
                _bursts -= 1
                if _bursts == 0 and _enabled_before:
                    gc.enable()

    return wrapper
