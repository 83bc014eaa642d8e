"""The C heap's free pages given back (mountwarden.handlers.native_heap), on this process's own glibc and kernel."""

import os

from mountwarden.handlers.native_heap import give_back_free_memory, limit_arenas

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


class NoMalloc:
    """A C library without glibc's malloc extensions (musl has neither mallopt nor malloc_trim)."""


def test_elsewhere_than_glibc_both_do_nothing_and_say_so():
    assert not limit_arenas(libc=NoMalloc())
    assert not give_back_free_memory(libc=NoMalloc())
