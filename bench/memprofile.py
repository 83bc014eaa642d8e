"""Where a process's memory goes: its resident memory over time, and what it holds near the peak.

Used by the benchmarks' counting operator when $MOUNTWARDEN_BENCH_MEMPROFILE names a file.
A thread samples the resident set every second; whenever it passes its highest value by a
fifth, it counts the live Python objects by type, with their shallow sizes (one walk of the
garbage collector's objects: seconds at worst, and nothing traced between walks, so the
process runs at its usual speed). ``write`` prints the timeline and the census taken nearest
the peak: which kinds of object the memory is made of, and how many of each.

(tracemalloc would name allocation sites, but tracing every allocation of a process that
lists tens of thousands of objects made it ten times slower: too slow to reach its peak.)
"""

import gc
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil


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


class PeakProfile:
    def __init__(self, every: float = 1.0) -> None:
        self.started = time.monotonic()
        self.every = every
        self.peak_rss = 0
        self.census_rss = 0
        self.census_at = 0.0
        self.census: tuple[int, list[tuple[str, int, int]]] | None = None
        self.timeline: list[tuple[float, float]] = []
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
        path.write_text("\n".join(lines) + "\n")
