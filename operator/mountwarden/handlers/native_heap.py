"""The C heap's free memory given back to the system, and fewer of its arenas.

Python asks glibc's malloc for everything larger than 512 bytes: the first lists' response bodies (megabytes per
page of pods), their decoded JSON's dict tables. glibc gives each thread that allocates an arena of its own (up to
eight per core) and keeps what is freed in each for that arena's reuse rather than giving it back.

``limit_arenas`` caps the arenas (glibc's M_ARENA_MAX), before the threads start; ``give_back_free_memory`` asks
glibc to hand the free pages of every arena back (``malloc_trim``), once the first lists are in. Not after each of
the timers' bursts: a trim holds each arena's lock while it walks it, and the webhook's thread allocates from one of
the two. The gain is modest: the scale bench's peak at 20,000 pods went from 446 to 421 MiB (one run each).

``map_large_blocks_apart`` fixes the size from which a block that no free chunk of the heap holds gets a mapping of
its own (glibc's M_MMAP_THRESHOLD), given back to the system when freed, rather than growing the heap. glibc's default
starts at 128 KiB and rises to the size of each mapped block freed, up to 32 MiB (the heap's trim threshold with it,
to twice that): after the first pages of a list (response bodies of megabytes) such blocks grew the heap, and what
the bursts freed there stayed resident between live blocks. With the threshold fixed at 256 KiB the scale bench's
heap at the end was 43 MiB, 9 of them free, against 68 and 35 (bench/memprofile.py's breakdown, one run each), and
the operator's peak 207 MiB against 221 to 223 (bench/results/scale_memory_profile.txt). Elsewhere than on glibc
each of these does nothing and says so.
"""

import ctypes

#: glibc's mallopt parameters (malloc.h): the most arenas, and the size from which a block is mapped apart.
M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3
#: Two arenas: threads that allocate at once (the lists, the webhook, a burst) contend a little, against one arena
#: per thread, each holding the free memory of its own peak.
ARENAS = 2
#: Response bodies and the tables of big dicts and lists are above it; pymalloc's objects and most lists far below.
MMAP_THRESHOLD_BYTES = 256 * 1024


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


def map_large_blocks_apart(threshold: int = MMAP_THRESHOLD_BYTES, libc=_C) -> bool:
    """A block of ``threshold`` bytes or more that no free chunk of the heap holds gets a mapping of its own (unmapped
    when freed) rather than growing the heap; fixed, the threshold no longer rises with the blocks freed. Whether the
    C library took it."""
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(threshold)) == 1


class MallInfo(ctypes.Structure):
    """glibc's struct mallinfo2 (glibc >= 2.33): every field a size_t."""

    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def heap_figures(libc=_C) -> MallInfo | None:
    """malloc's own figures, summed over its arenas: ``arena`` (the heaps' bytes), ``hblkhd`` (bytes mapped apart),
    ``uordblks`` (in use in the heaps), ``fordblks`` (free there, kept). None without glibc's mallinfo2."""
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return None
    mallinfo2.restype = MallInfo
    return mallinfo2()


def give_back_free_memory(libc=_C) -> bool:
    """Hand malloc's free pages back to the system; whether the C library can (glibc's ``malloc_trim``)."""
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim(ctypes.c_size_t(0))
    return True
