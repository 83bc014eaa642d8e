"""The C heap's free memory given back to the system, and fewer of its arenas.

Python asks glibc's malloc for everything larger than 512 bytes: the first lists' response bodies (megabytes per
page of pods), their decoded JSON's dict tables, the bursts' lists. glibc gives each thread that allocates an arena
of its own (up to eight per core), and keeps what is freed in each one for that arena's reuse rather than giving it
back: after the first lists, read in parallel threads, the operator stays resident at the size of their peak, most
of it free (bench/results/scale_memory_profile.txt: 65 MiB of live objects in 250 MiB resident).

``limit_arenas`` caps the arenas (glibc's M_ARENA_MAX), before the threads start; ``give_back_free_memory`` asks
glibc to hand the free pages of every arena back (``malloc_trim``), once the first lists are in. Not after each of
the timers' bursts: a trim holds each arena's lock while it walks it, and the webhook's thread allocates from one of
the two. Elsewhere than on glibc both do nothing and say so.
"""

import ctypes
import logging
import threading

log = logging.getLogger(__name__)

#: glibc's mallopt parameter for the most arenas (malloc.h).
M_ARENA_MAX = -8
#: Two arenas: threads that allocate at once (the lists, the webhook, a burst) contend a little, against one arena
#: per thread, each holding the free memory of its own peak.
ARENAS = 2


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:  # no C library to ask: nothing to tune
        return None


_C = _libc()
_lock = threading.Lock()


def limit_arenas(arenas: int = ARENAS, libc=_C) -> bool:
    """Cap malloc's arenas; whether the C library took it (glibc's mallopt returns 1 on success)."""
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(arenas)) == 1


def give_back_free_memory(libc=_C) -> bool:
    """Hand malloc's free pages back to the system; whether the C library can (glibc's ``malloc_trim``).

    One call at a time: a second caller while one runs returns at once, the first one's trim covers it.
    """
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    if not _lock.acquire(blocking=False):
        return True
    try:
        trim(ctypes.c_size_t(0))
    finally:
        _lock.release()
    return True
