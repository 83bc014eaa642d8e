"""Where a process's memory goes: its resident memory over time, and what it holds near the peak.

Used by the benchmarks' counting operator when $MOUNTWARDEN_BENCH_MEMPROFILE names a file.
A thread samples the resident set every second; whenever it passes its highest value by a
fifth, it counts the live Python objects by type, with their shallow sizes (one walk of the
garbage collector's objects: seconds at worst, and nothing traced between walks, so the
process runs at its usual speed). ``write`` prints the timeline and the census taken nearest
the peak: which kinds of object the memory is made of, and how many of each; then where the
resident memory is at each census and at the end (``breakdown``): libraries against heap, live
objects against the free memory the allocators keep after a burst.

(tracemalloc would name allocation sites, but tracing every allocation of a process that
lists tens of thousands of objects made it ten times slower: too slow to reach its peak.)

A census can, rarely, kill the profiled process: on CPython before 3.13, gc.get_objects() hands
out a tuple that ``tuple(generator)`` is still building in another thread, whose next resize
then fails (``SystemError: Objects/tupleobject.c:927: bad argument to internal function``;
python/cpython#39117, fixed by gh-107137). Seen once in the operator's start-up, 2026-12-05:
the bench then waits for a Ready that never comes; run it again.
"""

import gc
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

from mountwarden.handlers.native_heap import give_back_free_memory, heap_figures


def census(top: int = 30) -> tuple[int, list[tuple[str, int, int]]]:
    """(objects, [(type, count, shallow bytes)]) of every object the garbage collector tracks, biggest first."""
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    # The operator freezes what its first lists filed (mountwarden.handlers.indexes.follow_cluster), and
    # gc.get_objects() does not list frozen objects: thaw them for the walk, freeze everything again after.
    frozen = gc.get_freeze_count()
    if frozen:
        gc.unfreeze()
    objects = gc.get_objects()
    if frozen:
        gc.freeze()
    for obj in objects:
        kind = type(obj)
        name = f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__qualname__
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj, 0)
    total = len(objects)
    del objects
    return total, [(name, counts[name], size) for name, size in sizes.most_common(top)]


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(match.group(1)) if match else 0


def _pymalloc() -> dict[str, int]:
    """CPython's small-object allocator, from sys._debugmallocstats (which writes to the C stderr, so it is caught there:
    whatever another thread writes to stderr in that instant is lost with it, a bench's price)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode(errors="replace")
    figures = {}
    for key, pattern in (("arenas", r"(\d+) arenas \* \d+ bytes/arena"), ("in_use", r"# bytes in allocated blocks\s+=\s+([\d,]+)"),
                         ("free_blocks", r"# bytes in available blocks\s+=\s+([\d,]+)"),
                         ("unused_pools", r"\d+ unused pools \* \d+ bytes\s+=\s+([\d,]+)")):
        match = re.search(pattern, text)
        figures[key] = int(match.group(1).replace(",", "")) if match else 0
    arena_bytes = re.search(r"\d+ arenas \* (\d+) bytes/arena", text)
    figures["arena_bytes"] = figures["arenas"] * int(arena_bytes.group(1)) if arena_bytes else 0
    return figures


def breakdown(trim: bool = True) -> list[str]:
    """Where the resident memory is: libraries and code (file-backed) against the heap (anonymous), and the heap split
    between CPython's small-object arenas (objects <= 512 bytes) and glibc's malloc (larger blocks: big dicts' tables,
    lists, strings); then how much of it glibc hands back to the kernel when asked (malloc_trim)."""
    mib = 2**20
    lines = ["", "where the resident memory is (MiB):",
             f"  {_status_kib('RssFile') / 1024:8.1f}  file-backed: the interpreter, shared libraries, mapped files",
             f"  {_status_kib('RssAnon') / 1024:8.1f}  anonymous: the heaps and stacks"]
    small = _pymalloc()
    lines += [f"  {small['arena_bytes'] / mib:8.1f}    CPython's small-object arenas ({small['arenas']}), of which",
              f"  {small['in_use'] / mib:8.1f}      in live objects",
              f"  {(small['free_blocks'] + small['unused_pools']) / mib:8.1f}      free blocks and pools inside arenas still in use"]
    info = heap_figures()
    if info is None:
        return lines + ["  (glibc's mallinfo2 not available)"]
    lines += [f"  {(info.arena + info.hblkhd) / mib:8.1f}    glibc malloc: heap {info.arena / mib:.1f} and mmapped {info.hblkhd / mib:.1f}, of which",
              f"  {(info.uordblks + info.hblkhd) / mib:8.1f}      in use",
              f"  {info.fordblks / mib:8.1f}      free, kept by glibc"]
    if not trim:
        return lines
    before = _status_kib("RssAnon")
    give_back_free_memory()
    lines.append(f"  {(before - _status_kib('RssAnon')) / 1024:8.1f}  handed back by malloc_trim(0)")
    return lines


class PeakProfile:
    def __init__(self, every: float = 1.0) -> None:
        self.started = time.monotonic()
        self.every = every
        self.peak_rss = 0
        self.census_rss = 0
        self.census_at = 0.0
        self.census: tuple[int, list[tuple[str, int, int]]] | None = None
        self.timeline: list[tuple[float, float]] = []
        #: (when, breakdown) at each census: how the heap grew on the way to the peak.
        self.breakdowns: list[tuple[float, list[str]]] = []
        self._process = psutil.Process()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="memprofile")
        self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.every)
            rss = self._process.memory_info().rss
            now = time.monotonic() - self.started
            self.timeline.append((now, rss / 2**20))
            self.peak_rss = max(self.peak_rss, rss)
            if rss > self.census_rss * 1.2:
                taken = census()
                with self._lock:
                    self.census, self.census_rss, self.census_at = taken, rss, now
                    self.breakdowns.append((now, breakdown(trim=False)))

    def write(self, path: Path) -> None:
        with self._lock:
            taken, census_rss, census_at = self.census, self.census_rss, self.census_at
        lines = [f"peak RSS {self.peak_rss / 2**20:.1f} MiB; census at {census_at:.0f} s, RSS {census_rss / 2**20:.1f} MiB",
                 "", "RSS over time (s, MiB), every 5th sample:"]
        lines += [f"  {t:6.0f} {rss:8.1f}" for t, rss in self.timeline[::5]]
        if taken is not None:
            total, rows = taken
            lines += ["", f"objects tracked by the garbage collector: {total}; biggest types (count, shallow MiB):"]
            lines += [f"  {count:9d} {size / 2**20:8.1f}  {name}" for name, count, size in rows]
        for at, taken_then in self.breakdowns:
            lines += ["", f"at {at:.0f} s:", *taken_then[1:]]
        lines += ["", "at the end:", *breakdown()[1:]]
        path.write_text("\n".join(lines) + "\n")
