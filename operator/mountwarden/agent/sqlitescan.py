"""Gather from a proc root what the SQLite detector needs, then let the pure core decide.

The order matters: /proc/locks first; then, for each process holding a SQLite lock
on a network filesystem, its open files (stat() through /proc/<pid>/fd gives the
device and inode each one points at), its cgroup (pod and container) and its
mappings (a mapped -shm is WAL mode). A process can exit between these reads:
ProcRoot then returns nothing and counts it, and the finding keeps what
/proc/locks said.

A descriptor's device and inode come from /proc/<pid>/fdinfo (mnt_id, and ino on
Linux 5.14+) and the process's mountinfo, which never reach the server. Where a file
must be stat()ed (older kernels; the header scan's type and size), it is stat()ed from
the kernel's cache only (adapters/cachedstat.py): a plain stat() on NFS first writes the
file's dirty pages back, and behind a dead server that wait can never be interrupted,
not even by SIGKILL, so the agent could never exit again.

The header scan opens files on network mounts that no process has locked and reads
their first 16 bytes: each costs an open, a read and a close on the server, so it is
off by default and bounded by a budget of files. Reading a file's contents can also
wait uninterruptibly (behind a writer stuck in write(), or on writeback), but only while
its server does not answer: so a file is read only once its superblock's server has
answered a statvfs() probe in this same scan. Every call goes through the proc root's
BoundedCalls (adapters/bounded.py): each waited for at most STAT_TIMEOUT_SECONDS, at
most one stuck per server, so a dead server costs a scan one timeout and never piles
threads up.
"""

import os
import stat
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from mountwarden.adapters.cachedstat import CachedStatus, cached_stat
from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.probe import ServerProbe
from mountwarden.api.nodemountreport import SqliteDatabase
from mountwarden.core.node import scan as nodescan
from mountwarden.core.sqlite import (
    SIDE_FILE_SUFFIXES,
    SQLITE_HEADER,
    DatabaseInUse,
    FileId,
    NetworkMount,
    OpenFile,
    ProcessFiles,
    find_sqlite_databases,
    is_sqlite_header,
    is_sqlite_lock,
    sqlite_lock_holders,
)

#: Files whose header one scan may read (16 bytes each).
DEFAULT_HEADER_SCAN_BUDGET = 64

Device = tuple[int, int]


@dataclass
class SqliteScanCounters:
    lock_lines: int = 0  # lines read from /proc/locks
    skipped_lock_lines: int = 0  # lines of /proc/locks in no known format
    sqlite_lock_lines: int = 0  # held SQLite-range POSIX locks on network filesystems
    processes_read: int = 0  # processes whose cgroup, files and mappings were read
    headers_read: int = 0  # files whose first 16 bytes were read (header scan)
    headers_over_budget: int = 0  # files the header scan left unread once the budget was spent
    vanished: int = 0  # /proc entries gone mid-scan (processes exiting)
    forbidden: int = 0  # /proc entries the scan may not read

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class SqliteScan:
    findings: tuple[DatabaseInUse, ...]
    counters: SqliteScanCounters
    #: Lock holders whose open files the agent may not read (their /proc/<pid>/fd is another user's, mode 0500).
    unreadable: frozenset[int] = frozenset()


#: What a finding says when the lock holder's descriptors could not be read: docs/security.md names it.
FILES_FORBIDDEN = "OpenFilesForbidden"


def scan_sqlite(
    proc_root: ProcRoot,
    network_mounts: Sequence[NetworkMount],
    *,
    header_scan: bool = False,
    header_scan_budget: int = DEFAULT_HEADER_SCAN_BUDGET,
) -> SqliteScan:
    """Find SQLite databases in use on ``network_mounts`` (build them with ``core.sqlite.network_mounts``)."""
    if header_scan_budget < 0:
        raise ValueError(f"header_scan_budget must be 0 or more, not {header_scan_budget}")
    vanished_before, forbidden_before = proc_root.counters.vanished, proc_root.counters.forbidden
    counters = SqliteScanCounters()
    locks = proc_root.locks()
    devices = {mount.device for mount in network_mounts}
    counters.lock_lines = len(locks.locks)
    counters.skipped_lock_lines = locks.skipped_lines
    sqlite_locks = [
        lock for lock in locks.locks if is_sqlite_lock(lock) and (lock.major, lock.minor) in devices
    ]
    counters.sqlite_lock_lines = len(sqlite_locks)
    locked_databases = {FileId(lock.major, lock.minor, lock.inode) for lock in sqlite_locks}

    holders = sqlite_lock_holders(sqlite_locks, devices)
    unreadable: set[int] = set()
    files = {}
    for pid in holders:
        forbidden = proc_root.counters.forbidden
        files[pid] = _network_files(proc_root, pid, devices)
        if proc_root.counters.forbidden > forbidden:
            unreadable.add(pid)
    header_databases: set[FileId] = set()
    if header_scan:
        for pid, _ in proc_root.user_processes():
            if pid not in files:
                files[pid] = _network_files(proc_root, pid, devices)
        answering = _Answering(proc_root, network_mounts)
        header_databases = _read_headers(proc_root, files, locked_databases, header_scan_budget, counters,
                                         answering)

    known_databases = locked_databases | header_databases
    processes = {
        pid: _process_files(proc_root, pid, [open_file for open_file, _ in opened], devices)
        for pid, opened in files.items()
        if pid in holders or any(open_file.file_id in known_databases for open_file, _ in opened)
    }
    counters.processes_read = len(processes)
    findings = find_sqlite_databases(locks.locks, network_mounts, processes, header_databases)
    counters.vanished = proc_root.counters.vanished - vanished_before
    counters.forbidden = proc_root.counters.forbidden - forbidden_before
    return SqliteScan(findings=findings, counters=counters, unreadable=frozenset(unreadable))


#: How long one stat() or header read of a network file may take before the scan goes on without it.
STAT_TIMEOUT_SECONDS = 2.0
#: The key of calls on a file whose device is not known before stat() tells it.
UNKNOWN_DEVICE = "unknown-device"


def _device_key(device: Device | None) -> str:
    """The BoundedCalls key of a network device: its superblock, as the server probe names it."""
    return f"{device[0]}:{device[1]}" if device is not None else UNKNOWN_DEVICE


def _bounded(proc_root: ProcRoot, device: Device | None, fn, *args):
    """``fn(*args)`` through the proc root's BoundedCalls; None when it failed or its server does not answer."""
    result = proc_root.calls.run(_device_key(device), fn, *args, timeout=STAT_TIMEOUT_SECONDS)
    if result.stalled:
        proc_root.counters.stalled += 1
        return None
    if result.error is not None:  # the process exited or closed the descriptor since it was listed
        proc_root.counters.note(result.error)
        return None
    return result.value


def _bounded_stat(proc_root: ProcRoot, pid: int, fd: int, device: Device | None) -> CachedStatus | None:
    return _bounded(proc_root, device, cached_stat, proc_root.fd_path(pid, fd))


class _Answering:
    """Whether each network device's server answered a statvfs() probe in this scan (asked once, when needed)."""

    def __init__(self, proc_root: ProcRoot, network_mounts: Sequence[NetworkMount]) -> None:
        self._probe = ServerProbe(proc_root, STAT_TIMEOUT_SECONDS)
        self._mounts = {mount.device: mount for mount in reversed(network_mounts)}
        self._answers: dict[Device, bool | None] = {}

    def __call__(self, device: Device) -> bool | None:
        """True: it answered; False: it did not; None: it could not be asked (no mount of it, no permission)."""
        if device not in self._answers:
            mount = self._mounts.get(device)
            self._answers[device] = self._probe.check([mount]).get(mount.superblock) if mount else None
        return self._answers[device]


def _network_files(
    proc_root: ProcRoot, pid: int, devices: Collection[Device]
) -> list[tuple[OpenFile, CachedStatus | None]]:
    """The process's descriptors of files on network devices (with stat() only where it was needed)."""
    mounts = proc_root.mountinfo(pid, counted=False).mounts  # absent: fall back to stat() below
    mount_devices = {entry.mount_id: (entry.major, entry.minor) for entry in mounts}
    opened = []
    for fd, target in sorted(proc_root.open_files(pid).items()):
        if not target.startswith("/"):
            continue  # socket:[...], pipe:[...], anon_inode:...: nothing on a filesystem
        info = proc_root.fd_info(pid, fd)
        device = mount_devices.get(int(info["mnt_id"])) if info.get("mnt_id", "").isdigit() else None
        if device is not None and device not in devices:
            continue  # a local file: nothing to ask any server
        status = None
        if device is not None and info.get("ino", "").isdigit():
            inode = int(info["ino"])
        else:
            status = _bounded_stat(proc_root, pid, fd, device)
            if status is None:
                continue
            device, inode = status.device, status.inode
        if device in devices:
            opened.append((OpenFile(fd=fd, path=target, file_id=FileId(*device, inode)), status))
    return opened


def _process_files(
    proc_root: ProcRoot, pid: int, open_files: Iterable[OpenFile], devices: Collection[Device]
) -> ProcessFiles:
    cgroup = proc_root.cgroup(pid)
    maps = proc_root.maps(pid)
    return ProcessFiles(
        pid=pid,
        pod=cgroup.pod if cgroup is not None else None,
        open_files=tuple(open_files),
        mappings=tuple(
            mapping
            for mapping in (maps.mappings if maps else ())
            if (mapping.major, mapping.minor) in devices
        ),
    )


def _read_headers(
    proc_root: ProcRoot,
    files: Mapping[int, Sequence[tuple[OpenFile, CachedStatus | None]]],
    already_known: Collection[FileId],
    budget: int,
    counters: SqliteScanCounters,
    answering: Callable[[Device], bool | None],
) -> set[FileId]:
    """Files among ``files`` that start with the SQLite header, each read once, at most ``budget`` of them."""
    checked = set(already_known)
    databases = set()
    opened_files = 0  # a failed open costs the server a round trip too, so it spends budget
    for pid, opened in sorted(files.items()):
        for open_file, known_status in opened:
            if open_file.file_id in checked or open_file.path.endswith(SIDE_FILE_SUFFIXES):
                continue
            status = known_status or _bounded_stat(proc_root, pid, open_file.fd, open_file.file_id.device)
            if status is None or not stat.S_ISREG(status.mode) or status.size < len(SQLITE_HEADER):
                continue
            checked.add(open_file.file_id)
            if opened_files >= budget:
                counters.headers_over_budget += 1
                continue
            if answering(open_file.file_id.device) is False:
                proc_root.counters.stalled += 1  # its server did not answer just now: reading could wait for good
                continue
            opened_files += 1
            header = _bounded(proc_root, open_file.file_id.device, _read_header, proc_root.fd_path(pid, open_file.fd))
            if header is None:
                continue
            counters.headers_read += 1
            if is_sqlite_header(header):
                databases.add(open_file.file_id)
    return databases


def _read_header(fd_path: Path) -> bytes:
    """The file's first 16 bytes (in a BoundedCalls thread: open and read may hang on a dead server).

    Opening /proc/<pid>/fd/<n> opens the file itself, wherever it lives in that process's
    mount namespace. O_NONBLOCK: never wait on a file that turned into a FIFO.
    """
    handle = os.open(fd_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        return os.pread(handle, len(SQLITE_HEADER), 0)
    finally:
        os.close(handle)


def report_findings(proc_root: ProcRoot, mounts: Sequence[nodescan.ScannedMount]) -> list[SqliteDatabase]:
    """The agent's SQLite scan: findings for the node's network mounts, in the report's shape."""
    if not mounts:  # no network mount, no database on one: /proc/locks (a walk of every lock) is not read
        return []
    sqlite_mounts = [mount.network_mount for mount in mounts]
    scan = scan_sqlite(proc_root, sqlite_mounts)
    findings: list[SqliteDatabase] = []
    for finding in scan.findings:
        document = finding.to_dict()
        if finding.pid in scan.unreadable:
            unknown = "which file this is" + ("" if finding.volume_name else " and which pod volume holds it")
            document["message"] += (
                f" {FILES_FORBIDDEN}: the agent may not read process {finding.pid}'s open files (/proc/{finding.pid}/fd "
                f"belongs to another user): {unknown} is unknown; it needs CAP_DAC_READ_SEARCH (the chart's "
                "agent.readOtherProcesses grants it).")
        findings.append(SqliteDatabase.model_validate(document))
    return findings

