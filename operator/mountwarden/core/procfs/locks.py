"""/proc/locks: every file lock and lease the kernel holds, and who waits for them.

    1: POSIX  ADVISORY  WRITE 30503 fd:02:17439898 1073741824 1073742335
    6: -> POSIX  ADVISORY  WRITE 1281 00:14:16200 0 0
    7: OFDLCK ADVISORY  READ  -1 00:06:1028 0 EOF

Columns: ordinal, (``->`` for a waiter, which repeats the ordinal of the lock it
is blocked by), lock class (POSIX, FLOCK, OFDLCK, LEASE, DELEG, ACCESS), mode
(ADVISORY or MANDATORY; for leases ACTIVE, BREAKING or BREAKER), type (READ,
WRITE, UNLCK), owner pid (-1 for OFD locks, which belong to an open file
description rather than a process), ``MAJOR:MINOR:INODE`` with major and minor in
**hex** (``fd:02`` is 253:2, unlike mountinfo's decimal), first byte, last byte or
EOF.

SQLite takes its locks at byte 0x40000000 (1073741824, PENDING), 0x40000001
(RESERVED) and 0x40000002.. (SHARED, 510 bytes): on NFS each is a server round trip.

A lease whose breaker has no file prints ``<none>:0`` instead of a device; it
names no inode to match, so such lines are counted as skipped.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mountwarden.core.procfs.lines import parse_lines
from mountwarden.core.procfs.mountinfo import is_decimal

_FILE_ID = re.compile(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9]+)", re.ASCII)
_ORDINAL = re.compile(r"([0-9]+):", re.ASCII)


@dataclass(frozen=True, slots=True)
class FileLock:
    """One /proc/locks line: a held lock, or (``is_waiter``) a request blocked by one."""

    ordinal: int
    is_waiter: bool
    lock_class: str
    mode: str
    lock_type: str
    pid: int
    device_hex: str
    major: int
    minor: int
    inode: int
    start: int
    end: int | None
    line_number: int

    @property
    def blocked_by(self) -> int | None:
        """Ordinal of the lock this waiter waits for; None for a held lock."""
        return self.ordinal if self.is_waiter else None

    @property
    def major_minor(self) -> str:
        """The device as decimal ``"MAJ:MIN"``, comparable with mountinfo's major_minor."""
        return f"{self.major}:{self.minor}"

    def covers(self, offset: int) -> bool:
        """True when byte ``offset`` lies inside the locked range (``end`` None means EOF)."""
        return self.start <= offset and (self.end is None or offset <= self.end)


@dataclass(frozen=True, slots=True)
class LocksResult:
    locks: tuple[FileLock, ...]
    skipped_line_numbers: tuple[int, ...]

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped_line_numbers)

    def waiters(self, ordinal: int) -> tuple[FileLock, ...]:
        """The requests blocked by the lock with this ordinal, in file order."""
        return tuple(lock for lock in self.locks if lock.blocked_by == ordinal)


def parse_locks(text: str) -> LocksResult:
    """Parse /proc/locks text; malformed lines are skipped and their 1-based numbers kept."""
    locks, skipped = parse_lines(text, _parse_line, strip_end=False)
    return LocksResult(locks=locks, skipped_line_numbers=skipped)


def read_locks(path: str | os.PathLike[str] = "/proc/locks") -> LocksResult:
    return parse_locks(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))


def _parse_line(line: str, line_number: int) -> FileLock | None:
    tokens = line.split()
    ordinal = _ORDINAL.fullmatch(tokens[0])
    if ordinal is None:
        return None
    is_waiter = len(tokens) > 1 and tokens[1] == "->"
    fields = tokens[2:] if is_waiter else tokens[1:]
    if len(fields) != 7:
        return None
    lock_class, mode, lock_type, pid, file_id, start, end = fields
    device = _FILE_ID.fullmatch(file_id)
    pid_digits = pid.removeprefix("-")
    if device is None or not is_decimal(pid_digits) or not is_decimal(start):
        return None
    if end != "EOF" and not is_decimal(end):
        return None
    major_hex, minor_hex, inode = device.groups()
    return FileLock(
        ordinal=int(ordinal.group(1)),
        is_waiter=is_waiter,
        lock_class=lock_class,
        mode=mode,
        lock_type=lock_type,
        pid=int(pid),
        device_hex=f"{major_hex}:{minor_hex}",
        major=int(major_hex, 16),
        minor=int(minor_hex, 16),
        inode=int(inode),
        start=int(start),
        end=None if end == "EOF" else int(end),
        line_number=line_number,
    )
