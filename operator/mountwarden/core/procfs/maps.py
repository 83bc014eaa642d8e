"""/proc/<pid>/maps: the memory regions of a process and the files behind them.

    7f2c2a1b4000-7f2c2a1d6000 rw-s 00000000 00:2d 858746                     /data/app.db-shm
    (address range)           (perms) (offset) (dev) (inode)                  (pathname)

The device is hex ``MAJ:MIN`` as in /proc/locks. The pathname is padded to a
column, may contain spaces, ends in `` (deleted)`` when the file was unlinked, is
empty for anonymous memory and is a bracketed name for kernel regions (``[heap]``,
``[stack]``, ``[vdso]``). Only a newline inside a path is escaped (``\\012``).

A shared mapping of a SQLite ``-shm`` file on an NFS device is WAL mode across a
network file system, which cannot work between hosts.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mountwarden.core.procfs.lines import parse_lines

_REGION = re.compile(
    r"([0-9a-f]+)-([0-9a-f]+) ([r-][w-][x-][ps]) ([0-9a-f]+) ([0-9a-f]+):([0-9a-f]+) ([0-9]+)(?: +(.*))?",
    re.ASCII,
)
_DELETED_SUFFIX = " (deleted)"


@dataclass(frozen=True, slots=True)
class MemoryMapping:
    """One mapped region; ``pathname`` is "" for anonymous memory."""

    start: int
    end: int
    permissions: str
    offset: int
    device_hex: str
    major: int
    minor: int
    inode: int
    pathname: str
    is_deleted: bool
    line_number: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def is_readable(self) -> bool:
        return self.permissions[0] == "r"

    @property
    def is_writable(self) -> bool:
        return self.permissions[1] == "w"

    @property
    def is_executable(self) -> bool:
        return self.permissions[2] == "x"

    @property
    def is_shared(self) -> bool:
        """True for MAP_SHARED: writes reach the file and every other process mapping it."""
        return self.permissions[3] == "s"

    @property
    def is_file(self) -> bool:
        """True when a file backs the region (as opposed to anonymous or ``[heap]``-like memory)."""
        return self.pathname.startswith("/")

    @property
    def major_minor(self) -> str:
        """The device as decimal ``"MAJ:MIN"``, comparable with mountinfo's major_minor."""
        return f"{self.major}:{self.minor}"


@dataclass(frozen=True, slots=True)
class MapsResult:
    mappings: tuple[MemoryMapping, ...]
    skipped_line_numbers: tuple[int, ...]

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped_line_numbers)


def parse_maps(text: str) -> MapsResult:
    """Parse /proc/<pid>/maps text; malformed lines are skipped and their 1-based numbers kept."""
    mappings, skipped = parse_lines(text, _parse_line, strip_end=False)
    return MapsResult(mappings=mappings, skipped_line_numbers=skipped)


def read_maps(path: str | os.PathLike[str]) -> MapsResult:
    return parse_maps(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))


def _parse_line(line: str, line_number: int) -> MemoryMapping | None:
    match = _REGION.fullmatch(line)
    if match is None:
        return None
    start, end, permissions, offset, major_hex, minor_hex, inode, pathname = match.groups()
    pathname = (pathname or "").replace("\\012", "\n")
    is_deleted = pathname.endswith(_DELETED_SUFFIX)
    return MemoryMapping(
        start=int(start, 16),
        end=int(end, 16),
        permissions=permissions,
        offset=int(offset, 16),
        device_hex=f"{major_hex}:{minor_hex}",
        major=int(major_hex, 16),
        minor=int(minor_hex, 16),
        inode=int(inode),
        pathname=pathname.removesuffix(_DELETED_SUFFIX),
        is_deleted=is_deleted,
        line_number=line_number,
    )
