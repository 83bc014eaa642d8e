"""The C heap's free pages given back (mountwarden.handlers.native_heap), on this process's own glibc and kernel."""

import os
import subprocess
import sys

from mountwarden.handlers.native_heap import (
    give_back_free_memory,
    heap_figures,
    limit_arenas,
    map_large_blocks_apart,
)

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def test_the_free_pages_between_live_blocks_go_back_to_the_system():
    # 2 KiB blocks come from malloc (pymalloc takes only 512 bytes and less); one kept in 64 pins the heap's top,
    # so free() alone gives back nothing: only malloc_trim returns the free pages in between.
    blocks = [bytes(2048) for _ in range(32_768)]  # 64 MiB
    kept = blocks[::64]
    del blocks
    before = resident_bytes()
    assert give_back_free_memory()
    returned = before - resident_bytes()
    assert returned > 32 * 2**20, f"{returned / 2**20:.1f} MiB returned"
    assert len(kept) == 512


def test_the_arenas_are_capped_on_glibc():
    assert limit_arenas()


#: In a fresh interpreter (a test process's heap has free chunks of every size by now, and glibc serves a block from
#: a free chunk that holds it before it maps or grows anything): an 8 MiB block freed, then a 1 MiB one made and
#: freed; prints how much more malloc had mapped apart while the 1 MiB block lived, and after it was freed.
_BIG_BLOCKS = """
import sys
from mountwarden.handlers.native_heap import heap_figures, map_large_blocks_apart
if sys.argv[1] == "fixed":
    assert map_large_blocks_apart()
freed_first = bytearray(8 * 2**20)
del freed_first
before = heap_figures().hblkhd
block = bytearray(2**20)
living = heap_figures().hblkhd - before
del block
print(living, heap_figures().hblkhd - before)
"""


def mapped_apart(threshold: str) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", _BIG_BLOCKS, threshold], capture_output=True, text=True, check=True)
    living, after = done.stdout.split()
    return int(living), int(after)


def test_a_large_block_the_heap_cannot_hold_is_mapped_apart_however_large_the_blocks_freed_before_it():
    # glibc's default raises its threshold to 8 MiB as the first block is freed: the 1 MiB block grows the heap.
    assert mapped_apart("default") == (0, 0)
    # Fixed at 256 KiB, it is mapped apart, and unmapped when freed.
    living, after = mapped_apart("fixed")
    assert living >= 2**20 and after == 0


class NoMalloc:
    """A C library without glibc's malloc extensions (musl has neither mallopt nor malloc_trim)."""


def test_elsewhere_than_glibc_both_do_nothing_and_say_so():
    assert not limit_arenas(libc=NoMalloc())
    assert not map_large_blocks_apart(libc=NoMalloc())
    assert heap_figures(libc=NoMalloc()) is None
    assert not give_back_free_memory(libc=NoMalloc())
