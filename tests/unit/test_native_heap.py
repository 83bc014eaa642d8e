"""The C heap's free pages given back (mountwarden.handlers.native_heap), on this process's own glibc and kernel."""

import os

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


def test_a_large_block_freed_goes_back_to_the_system_however_large_the_blocks_before_it():
    # On glibc's default, freeing a mapped 8 MiB block raises the threshold to 8 MiB: the next 1 MiB block then comes
    # from the heap, and stays there once freed. Fixed at 256 KiB, it is mapped apart, and unmapped when freed.
    assert map_large_blocks_apart()
    freed_first = bytearray(8 * 2**20)
    del freed_first
    mapped_before = heap_figures().hblkhd
    block = bytearray(2**20)
    assert heap_figures().hblkhd - mapped_before >= 2**20
    del block
    assert heap_figures().hblkhd == mapped_before


class NoMalloc:
    """A C library without glibc's malloc extensions (musl has neither mallopt nor malloc_trim)."""


def test_elsewhere_than_glibc_both_do_nothing_and_say_so():
    assert not limit_arenas(libc=NoMalloc())
    assert not map_large_blocks_apart(libc=NoMalloc())
    assert heap_figures(libc=NoMalloc()) is None
    assert not give_back_free_memory(libc=NoMalloc())
