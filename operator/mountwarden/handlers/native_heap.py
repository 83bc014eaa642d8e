"""The C heap's free memory given back to the system, and fewer of its arenas.

Python asks glibc's malloc for everything larger than 512 bytes: the first lists' response bodies (megabytes per
page of pods), their decoded JSON's dict tables. glibc gives each thread that allocates an arena of its own (up to
eight per core) and keeps what is freed in each for that arena's reuse rather than giving it back.

``limit_arenas`` caps the arenas (glibc's M_ARENA_MAX), before the threads start; ``give_back_free_memory`` asks
glibc to hand the free pages of every arena back (``malloc_trim``), once the first lists are in. Not after each of
the timers' bursts: a trim holds each arena's lock while it walks it, and the webhook's thread allocates from one of
the two. The gain is modest: the scale bench's peak at 20,000 pods went from 446 to 421 MiB (one run each). A fixed
mmap threshold (MALLOC_MMAP_THRESHOLD_=256 KiB, MALLOC_TRIM_THRESHOLD_=1 MiB) gained no more: 393 against 409 MiB,
one run each. Elsewhere than on glibc both do nothing and say so.
"""

import ctypes

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


def limit_arenas(arenas: int = ARENAS, libc=_C) -> bool:
    """Cap malloc's arenas; whether the C library took it (glibc's mallopt returns 1 on success)."""
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(arenas)) == 1


def give_back_free_memory(libc=_C) -> bool:
    """Hand malloc's free pages back to the system; whether the C library can (glibc's ``malloc_trim``)."""
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim(ctypes.c_size_t(0))
    return True
