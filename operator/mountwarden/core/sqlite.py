"""SQLite databases in use on network filesystems, told apart from their locks, open files and mappings.

SQLite's unix VFS takes POSIX record locks on bytes of the database file that no
page ever uses (os.h), so they show in /proc/locks whatever the application does:

    PENDING   0x40000000 (1073741824)            WRITE while a writer waits for readers to leave
    RESERVED  0x40000001 (1073741825)            WRITE while one connection prepares a write
    SHARED    0x40000002..0x400001FF (510 bytes)  READ by every reader, WRITE = EXCLUSIVE (a commit)

Seen on this kernel with real SQLite 3.40 processes (adjacent ranges of one owner merge):

    READ  1073741826 1073742335      an open read transaction (SHARED)
    WRITE 1073741825 1073741825      BEGIN IMMEDIATE (RESERVED), beside the SHARED line
    WRITE 1073741824 1073741825      PENDING+RESERVED: a writer waiting for readers
    WRITE 1073741824 1073742335      EXCLUSIVE: BEGIN EXCLUSIVE, or a commit being written

In WAL mode the database file keeps a SHARED lock as long as the connection is
open, and the locks that matter are on the ``-shm`` file, the wal-index that
every connection maps into memory: byte 120 + N for lock N of SQLITE_SHM_NLOCK = 8
(os_unix.c UNIX_SHM_BASE, wal.c WALINDEX_LOCK_OFFSET) — WRITE, CKPT, RECOVER,
READ0..READ4 — and byte 128, the "dead-man switch" every connection holds READ
while it has the -shm open. Shared memory cannot be shared between hosts, so WAL
on a network filesystem lets connections on different nodes read stale indexes
and corrupt the database: critical. Rollback-journal mode works, slowly (each lock
is a server round trip, each commit a server-side sync): a warning.

Everything here is pure: the caller reads /proc and passes parsed data in.

Longer than the core's usual 500 lines on purpose: it is one detection, whose
locks, open files, mappings and messages all read the lock layout above; split,
each part would need that layout explained again.
"""

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from mountwarden.core.findings import Finding, Reason, Severity
from mountwarden.core.node.kubelet import DEFAULT_KUBELET_ROOT, parse_volume_path
from mountwarden.core.node.scan import NetworkMount
from mountwarden.core.procfs import FileLock, MemoryMapping, MountinfoEntry, PodCgroup

PENDING_BYTE = 0x40000000
SHARED_FIRST = PENDING_BYTE + 2
SHARED_SIZE = 510
SHARED_LAST = SHARED_FIRST + SHARED_SIZE - 1

SHM_LOCK_COUNT = 8  # SQLITE_SHM_NLOCK
WAL_INDEX_LOCK_OFFSET = 120  # (22 + SQLITE_SHM_NLOCK) * 4: after two index headers and the checkpoint info
WAL_INDEX_DEAD_MAN_SWITCH = WAL_INDEX_LOCK_OFFSET + SHM_LOCK_COUNT
WAL_INDEX_LOCK_NAMES = {
    WAL_INDEX_LOCK_OFFSET: "WRITE",
    WAL_INDEX_LOCK_OFFSET + 1: "CKPT",
    WAL_INDEX_LOCK_OFFSET + 2: "RECOVER",
    **{WAL_INDEX_LOCK_OFFSET + 3 + reader: f"READ{reader}" for reader in range(SHM_LOCK_COUNT - 3)},
    WAL_INDEX_DEAD_MAN_SWITCH: "DMS",
}

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: Files SQLite keeps beside a database; they never start with the database header.
SIDE_FILE_SUFFIXES = ("-shm", "-wal", "-journal")

DEFAULT_NETWORK_FSTYPES = frozenset({"nfs", "nfs4"})

_KEEP_LOCAL = (
    "Keep SQLite on storage local to the pod: an emptyDir (or a local PersistentVolume) for a cache, "
    "scratch or per-pod data; a database server (PostgreSQL, MySQL) if several pods must share the data. "
    "Move the file with sqlite3 src.db \".backup dst.db\" or VACUUM INTO 'dst.db', which copy a "
    "consistent snapshot; never cp a live database, which copies a torn file and leaves the -wal behind."
)
_WAL_STOPGAP = (
    " Until it moves, PRAGMA journal_mode=DELETE stops WAL's shared memory from being shared "
    "through the network filesystem (slower, but no stale index)."
)
#: The local alternative, ready to apply: without a sizeLimit and an ephemeral-storage request the
#: node's disk is the limit, and the kubelet evicts the pod only once the disk is under pressure.
LOCAL_VOLUME_YAML = """\
# In the pod template: mount a local volume where the database lives now, instead of the NFS volume.
spec:
  containers:
  - name: app                       # the container that opens the database
    volumeMounts:
    - name: sqlite-data
      mountPath: /var/lib/app       # the database's directory
    resources:
      requests:
        ephemeral-storage: 10Gi     # the scheduler places the pod where the disk has room for it
      limits:
        ephemeral-storage: 12Gi
  volumes:
  - name: sqlite-data
    emptyDir:
      sizeLimit: 10Gi               # twice the database at least: VACUUM and the journal copy it
# Or a generic ephemeral volume, on a block-storage class (gp3, local-path), that lives as long as the pod:
#  volumes:
#  - name: sqlite-data
#    ephemeral:
#      volumeClaimTemplate:
#        spec:
#          accessModes: [ReadWriteOnce]
#          storageClassName: gp3
#          resources: {requests: {storage: 10Gi}}
"""
_AS_YAML = " The local alternative, for the workload's pod template:\n" + LOCAL_VOLUME_YAML
REMEDY = _KEEP_LOCAL + _AS_YAML
#: The general remedy, then a stopgap for WAL mode (it starts with the general one).
WAL_REMEDY = REMEDY + _WAL_STOPGAP.strip()


class JournalMode(StrEnum):
    ROLLBACK = "rollback"
    WAL = "wal"
    UNKNOWN = "unknown"


class SqliteLock(StrEnum):
    """SQLite's lock levels on the database file, weakest first."""

    SHARED = "SHARED"
    RESERVED = "RESERVED"
    PENDING = "PENDING"
    EXCLUSIVE = "EXCLUSIVE"


_LOCK_STRENGTH = {level: rank for rank, level in enumerate(SqliteLock)}


class FileId(NamedTuple):
    """A file as the kernel names it in /proc/locks and maps: device and inode."""

    major: int
    minor: int
    inode: int

    @property
    def device(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def major_minor(self) -> str:
        return f"{self.major}:{self.minor}"


class PodVolume(NamedTuple):
    pod_uid: str
    volume_name: str


@dataclass(frozen=True, slots=True)
class OpenFile:
    """A file descriptor of a process: the path it shows in /proc/<pid>/fd and what stat() says it is."""

    fd: int
    path: str
    file_id: FileId


@dataclass(frozen=True, slots=True)
class ProcessFiles:
    """What one process has open and mapped, read after /proc/locks (it may have exited since).

    Callers may keep only files on network devices: the database and its -shm,
    -wal and -journal always live on the same filesystem.
    """

    pid: int
    pod: PodCgroup | None = None
    open_files: tuple[OpenFile, ...] = ()
    mappings: tuple[MemoryMapping, ...] = ()


@dataclass(frozen=True, slots=True)
class DatabaseInUse:
    """One SQLite database in use by one process (or by a holder outside our pid namespace), as the scan saw it."""

    severity: Severity
    mode: JournalMode
    pid: int | None
    pod_uid: str | None
    container_id: str | None
    file_id: FileId
    path: str | None
    mount_point: str
    volume_name: str | None
    lock: SqliteLock | None
    waiting_pids: tuple[int, ...]
    message: str
    remedy: str

    def finding(self) -> Finding:
        """What it means: SQLite on a network mount, with the evidence the scan saw."""
        evidence = {"mode": str(self.mode), "path": self.path or "", "lock": str(self.lock or ""),
                    "device": self.file_id.major_minor, "mountPoint": self.mount_point}
        return Finding(Reason.SQLITE_ON_NFS, self.severity, self.message, self.remedy,
                       evidence={key: value for key, value in evidence.items() if value})

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON finding; its keys are also the fields of the NodeMountReport's sqlite entries."""
        return {
            "severity": str(self.severity),
            "mode": str(self.mode),
            "pid": self.pid,
            "pod_uid": self.pod_uid,
            "container_id": self.container_id,
            "device": self.file_id.major_minor,
            "inode": self.file_id.inode,
            "path": self.path,
            "mount_point": self.mount_point,
            "volume_name": self.volume_name,
            "lock": None if self.lock is None else str(self.lock),
            "message": self.message,
            "remedy": self.remedy,
        }


def parse_network_fstypes(text: str) -> frozenset[str]:
    """``"nfs,nfs4"`` -> the set; raises ValueError when no type is named."""
    fstypes = frozenset(part.strip() for part in text.split(",") if part.strip())
    if not fstypes:
        raise ValueError(f"{text!r} names no filesystem type")
    return fstypes


def kubelet_pod_volume(mount_point: str, kubelet_root: str = DEFAULT_KUBELET_ROOT) -> PodVolume | None:
    """The pod and volume of a kubelet volume mount (csi or nfs), or None (staging mounts serve no one pod)."""
    volume = parse_volume_path(mount_point, [kubelet_root])
    if volume is None or volume.pod_uid is None:
        return None
    return PodVolume(volume.pod_uid, volume.volume_name)


def network_mounts(
    entries: Iterable[MountinfoEntry],
    network_fstypes: Collection[str] = DEFAULT_NETWORK_FSTYPES,
    pod_volume: Callable[[str], tuple[str, str] | None] | Mapping[str, tuple[str, str]] | None = None,
) -> tuple[NetworkMount, ...]:
    """The mounts of network filesystems in mountinfo order, each with its pod volume when known.

    ``pod_volume`` maps a mount point to (pod UID, volume name): a mapping the caller
    computed, or a function such as ``kubelet_pod_volume``.
    """
    lookup = pod_volume.get if isinstance(pod_volume, Mapping) else pod_volume
    mounts = []
    for entry in entries:
        if entry.fstype not in network_fstypes:
            continue
        volume = lookup(entry.mount_point) if lookup is not None else None
        pod_uid, volume_name = volume if volume is not None else (None, None)
        mounts.append(
            NetworkMount(
                major=entry.major,
                minor=entry.minor,
                mount_point=entry.mount_point,
                fstype=entry.fstype,
                pod_uid=pod_uid,
                volume_name=volume_name,
            )
        )
    return tuple(mounts)


def is_sqlite_header(data: bytes) -> bool:
    return data[: len(SQLITE_HEADER)] == SQLITE_HEADER


def is_sqlite_lock(lock: FileLock) -> bool:
    """A held POSIX lock wholly inside SQLite's lock bytes (a whole-file lock 0..EOF is someone else's)."""
    return (
        _is_held_posix(lock)
        and lock.start >= PENDING_BYTE
        and lock.end is not None
        and lock.end <= SHARED_LAST
    )


def is_wal_index_lock(lock: FileLock) -> bool:
    """A held POSIX lock on the -shm bytes SQLite's WAL-index locks use (120..128)."""
    return (
        _is_held_posix(lock)
        and lock.start >= WAL_INDEX_LOCK_OFFSET
        and lock.end is not None
        and lock.end <= WAL_INDEX_DEAD_MAN_SWITCH
    )


def sqlite_lock_level(locks: Iterable[FileLock]) -> SqliteLock | None:
    """The strongest SQLite lock these lines (one process, one database) amount to."""
    strongest: SqliteLock | None = None
    for lock in locks:
        if not is_sqlite_lock(lock):
            continue
        if lock.lock_type == "WRITE" and _overlaps(lock, SHARED_FIRST, SHARED_LAST):
            level = SqliteLock.EXCLUSIVE
        elif lock.lock_type == "WRITE" and lock.covers(PENDING_BYTE):
            level = SqliteLock.PENDING
        elif lock.lock_type == "WRITE":  # the one byte left: 0x40000001
            level = SqliteLock.RESERVED
        else:
            # READ on the shared range, or on the pending byte for the instant it takes to get SHARED.
            level = SqliteLock.SHARED
        if strongest is None or _LOCK_STRENGTH[level] > _LOCK_STRENGTH[strongest]:
            strongest = level
    return strongest


def sqlite_lock_holders(
    locks: Iterable[FileLock], network_devices: Collection[tuple[int, int]]
) -> tuple[int, ...]:
    """Pids holding SQLite locks on network devices: the processes whose files are worth reading."""
    return tuple(
        sorted(
            {
                lock.pid
                for lock in locks
                if lock.pid > 0 and is_sqlite_lock(lock) and (lock.major, lock.minor) in network_devices
            }
        )
    )


def find_sqlite_databases(
    locks: Iterable[FileLock],
    mounts: Iterable[NetworkMount],
    processes: Mapping[int, ProcessFiles] | None = None,
    header_databases: Collection[FileId] = (),
) -> tuple[DatabaseInUse, ...]:
    """One finding per (database, process) on a network filesystem, most severe first.

    ``locks`` are /proc/locks lines; ``processes`` what the lock holders (and, after a
    header scan, other processes) have open and mapped; ``header_databases`` files whose
    first 16 bytes are the SQLite header. A database is found by its locks, or open
    without a lock by a process in ``processes`` once it is known to be SQLite.
    """
    processes = processes or {}
    mounts_by_device: dict[tuple[int, int], list[NetworkMount]] = defaultdict(list)
    for mount in mounts:
        mounts_by_device[mount.device].append(mount)
    locks = tuple(lock for lock in locks if (lock.major, lock.minor) in mounts_by_device)

    # One process may show several lines for one database (SHARED and RESERVED):
    # group them, so each (database, process) is one finding.
    held: dict[tuple[FileId, int | None], list[FileLock]] = defaultdict(list)
    for lock in locks:
        if is_sqlite_lock(lock):
            held[(_file_id(lock), _holder(lock))].append(lock)
    wal_index = _WalIndexLocks(locks, held.keys())
    waiters: dict[int, list[FileLock]] = defaultdict(list)
    for lock in locks:
        if lock.is_waiter:
            waiters[lock.ordinal].append(lock)

    findings = [
        _finding(
            database,
            pid,
            lines,
            processes.get(pid) if pid is not None else None,
            mounts_by_device[database.device],
            wal_index,
            waiting_pids=sorted({waiter.pid for line in lines for waiter in waiters[line.ordinal]}),
        )
        for (database, pid), lines in held.items()
    ]

    known_databases = {database for database, _ in held} | set(header_databases)
    opened_without_lock: set[tuple[FileId, int]] = set()
    for pid, process in processes.items():
        for open_file in process.open_files:
            key = (open_file.file_id, pid)
            if (
                open_file.file_id in known_databases
                and open_file.file_id.device in mounts_by_device
                and key not in held
                and key not in opened_without_lock
            ):
                opened_without_lock.add(key)
                findings.append(
                    _finding(
                        open_file.file_id,
                        pid,
                        [],
                        process,
                        mounts_by_device[open_file.file_id.device],
                        wal_index,
                        waiting_pids=[],
                    )
                )
    findings.sort(
        key=lambda finding: (
            -finding.severity.rank,
            finding.file_id,
            -1 if finding.pid is None else finding.pid,
        )
    )
    return tuple(findings)


class _WalIndexLocks:
    """WAL-index locks per process and device, to tie -shm files to the databases beside them."""

    def __init__(self, locks: Iterable[FileLock], databases: Iterable[tuple[FileId, int | None]]):
        self.offsets: dict[tuple[int | None, FileId], set[int]] = defaultdict(set)
        self.shm_files: dict[tuple[int | None, tuple[int, int]], set[FileId]] = defaultdict(set)
        self.databases: dict[tuple[int | None, tuple[int, int]], set[FileId]] = defaultdict(set)
        database_ids = set()
        for database, pid in databases:
            self.databases[(pid, database.device)].add(database)
            database_ids.add(database)
        for lock in locks:
            file_id = _file_id(lock)
            if is_wal_index_lock(lock) and lock.end is not None and file_id not in database_ids:
                self.offsets[(_holder(lock), file_id)].update(range(lock.start, lock.end + 1))
                self.shm_files[(_holder(lock), file_id.device)].add(file_id)

    def names(self, pid: int | None, shm: FileId) -> list[str]:
        """``["WRITE", "READ0", "DMS"]``: the WAL-index locks ``pid`` holds on this -shm file."""
        return [WAL_INDEX_LOCK_NAMES[offset] for offset in sorted(self.offsets.get((pid, shm), ()))]

    def shm_for(self, pid: int | None, database: FileId) -> tuple[bool, FileId | None]:
        """From locks alone: is ``database`` in WAL mode, and which -shm is its own when that is certain.

        A WAL connection holds the -shm's dead-man switch and a SHARED lock on its
        database for as long as it is open, so a process with as many -shm files
        as databases on one device has every one of them in WAL mode; which -shm is
        which is certain only for one of each.
        """
        shm_files = self.shm_files.get((pid, database.device), set())
        databases = self.databases.get((pid, database.device), set())
        if database not in databases or len(shm_files) < len(databases):
            return False, None
        return True, (next(iter(shm_files)) if len(shm_files) == 1 == len(databases) else None)


@dataclass(frozen=True, slots=True)
class _Evidence:
    mode: JournalMode
    severity: Severity
    seen: tuple[str, ...]
    why: str


def _finding(
    database: FileId,
    pid: int | None,
    lines: Sequence[FileLock],
    process: ProcessFiles | None,
    candidates: Sequence[NetworkMount],
    wal_index: _WalIndexLocks,
    waiting_pids: Sequence[int],
) -> DatabaseInUse:
    lock = sqlite_lock_level(lines)
    pod = process.pod if process is not None else None
    path, listed_by_fd = _database_path(database, process)
    evidence = _journal_evidence(database, pid, lock, path, listed_by_fd, process, wal_index)
    mount, volume_name = _mount_of(candidates, pod.pod_uid if pod else None)
    return DatabaseInUse(
        severity=evidence.severity,
        mode=evidence.mode,
        pid=pid,
        pod_uid=pod.pod_uid if pod else None,
        container_id=pod.container_id if pod else None,
        file_id=database,
        path=path,
        mount_point=mount.mount_point,
        volume_name=volume_name,
        lock=lock,
        waiting_pids=tuple(waiting_pids),
        message=_message(database, pid, lock, path, mount, evidence, waiting_pids),
        remedy=WAL_REMEDY if evidence.mode is JournalMode.WAL else REMEDY,
    )


def _database_path(database: FileId, process: ProcessFiles | None) -> tuple[str | None, bool]:
    """The database's path as the process sees it, and whether a file descriptor (not a mapping) showed it."""
    if process is None:
        return None, False
    for open_file in process.open_files:
        if open_file.file_id == database:
            return open_file.path, True
    # SQLite maps the database itself only with PRAGMA mmap_size > 0.
    for mapping in process.mappings:
        if mapping.is_file and (mapping.major, mapping.minor, mapping.inode) == database:
            return mapping.pathname, False
    return None, False


def _journal_evidence(
    database: FileId,
    pid: int | None,
    lock: SqliteLock | None,
    path: str | None,
    listed_by_fd: bool,
    process: ProcessFiles | None,
    wal_index: _WalIndexLocks,
) -> _Evidence:
    if path is not None and process is not None:
        open_paths = {open_file.path: open_file.file_id for open_file in process.open_files}
        mapped_paths = {
            mapping.pathname: FileId(mapping.major, mapping.minor, mapping.inode)
            for mapping in process.mappings
            if mapping.is_file and mapping.is_shared
        }
        shm_path, wal_path, journal_path = (path + suffix for suffix in SIDE_FILE_SUFFIXES)
        shm = mapped_paths.get(shm_path) or open_paths.get(shm_path)
        if shm is not None:
            seen = [f"-shm {'mapped' if shm_path in mapped_paths else 'open'}"]
            if wal_path in open_paths:
                seen.append("-wal open")
            lock_names = wal_index.names(pid, shm)
            if lock_names:
                seen.append("WAL-index locks " + ", ".join(lock_names))
            return _wal(seen)
        if wal_path in open_paths and lock is not None:
            return _Evidence(
                JournalMode.WAL,
                Severity.WARNING,
                ("-wal open", "no -shm"),
                "WAL with locking_mode=EXCLUSIVE keeps its index in this process's memory, so it is safe "
                "only while no other process opens the database; every commit still waits for the server.",
            )
        if journal_path in open_paths and lock is not None:
            return _rollback(("-journal open",))
        if listed_by_fd and lock is not None:
            return _rollback(("no -wal or -shm open",))
    is_wal, shm = wal_index.shm_for(pid, database)
    if is_wal:
        lock_names = " " + ", ".join(wal_index.names(pid, shm)) if shm else ""
        return _wal([f"WAL-index locks{lock_names} on a -shm beside it"])
    if lock is None:
        return _Evidence(
            JournalMode.UNKNOWN,
            Severity.INFO,
            (),
            "No lock is held now; its next transaction takes its locks through the server.",
        )
    if pid is None:
        unseen = "the holder is outside this pid namespace, so its files cannot be read"
    else:
        unseen = (
            f"the open files of pid {pid} do not show it (it exited or closed it after /proc/locks was read, "
            "or the scan lacks CAP_SYS_PTRACE)"
        )
    return _Evidence(
        JournalMode.UNKNOWN,
        Severity.WARNING,
        (),
        f"Its journal mode is not visible: {unseen}. Each lock change is a round trip to the server.",
    )


def _wal(seen: list[str]) -> _Evidence:
    return _Evidence(
        JournalMode.WAL,
        Severity.CRITICAL,
        tuple(seen),
        "WAL keeps its index in memory shared through the -shm file, which a network filesystem cannot share "
        "between hosts: a connection on another node reads a stale index, and the database can be corrupted.",
    )


def _rollback(seen: tuple[str, ...]) -> _Evidence:
    return _Evidence(
        JournalMode.ROLLBACK,
        Severity.WARNING,
        seen,
        "Rollback-journal mode works on a network filesystem, slowly: each lock change is a round trip to "
        "the server and each commit waits for the server to make the journal and the database durable.",
    )


def _mount_of(candidates: Sequence[NetworkMount], pod_uid: str | None) -> tuple[NetworkMount, str | None]:
    """The mount to name for a device, and its volume when that is certain.

    Pods on one node can share one NFS superblock, so several mounts may carry the
    device: prefer the one of the process's own pod, then a single pod volume.
    """
    same_pod = [mount for mount in candidates if pod_uid is not None and mount.pod_uid == pod_uid]
    if same_pod:
        # Two volumes of the pod on one superblock: which holds the file, only its path could tell.
        certain = len({mount.volume_name for mount in same_pod}) == 1
        return same_pod[0], same_pod[0].volume_name if certain else None
    pod_volumes = [mount for mount in candidates if mount.volume_name is not None]
    if len({mount.volume_name for mount in pod_volumes}) == 1:
        return pod_volumes[0], pod_volumes[0].volume_name
    return candidates[0], None


def _message(
    database: FileId,
    pid: int | None,
    lock: SqliteLock | None,
    path: str | None,
    mount: NetworkMount,
    evidence: _Evidence,
    waiting_pids: Sequence[int],
) -> str:
    name = path or f"inode {database.inode} on device {database.major_minor}"
    mode = {
        JournalMode.WAL: " in WAL mode",
        JournalMode.ROLLBACK: " in rollback-journal mode",
        JournalMode.UNKNOWN: "",
    }[evidence.mode]
    holder = f"pid {pid}" if pid is not None else "a process outside this pid namespace"
    use = f"holds {lock}" if lock is not None else "has it open"
    seen = f" ({', '.join(evidence.seen)})" if evidence.seen else ""
    where = f"{mount.fstype} {mount.mount_point}"
    message = f"SQLite database {name}{mode} on {where}: {holder} {use}{seen}. {evidence.why}"
    if waiting_pids:
        message += f" Contention: pid(s) {', '.join(map(str, waiting_pids))} wait for its locks."
    return message


def _is_held_posix(lock: FileLock) -> bool:
    return lock.lock_class == "POSIX" and not lock.is_waiter and lock.lock_type in ("READ", "WRITE")


def _overlaps(lock: FileLock, first: int, last: int) -> bool:
    return lock.start <= last and (lock.end is None or lock.end >= first)


def _file_id(lock: FileLock) -> FileId:
    return FileId(lock.major, lock.minor, lock.inode)


def _holder(lock: FileLock) -> int | None:
    """The lock owner's pid; None when /proc/locks shows 0 (an owner outside the reader's pid namespace)."""
    return lock.pid if lock.pid > 0 else None
