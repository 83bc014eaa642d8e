"""Whatever /proc/locks, open files and mappings say, the detector answers and stays consistent."""

from hypothesis import given
from hypothesis import strategies as st

from mountwarden.core.procfs import FileLock, MemoryMapping, PodCgroup, parse_locks
from mountwarden.core.sqlite import (
    PENDING_BYTE,
    SHARED_LAST,
    SIDE_FILE_SUFFIXES,
    WAL_INDEX_DEAD_MAN_SWITCH,
    WAL_INDEX_LOCK_OFFSET,
    FileId,
    JournalMode,
    NetworkMount,
    OpenFile,
    ProcessFiles,
    Severity,
    find_sqlite_databases,
    is_sqlite_lock,
)

DEVICES = [(0, 53), (0, 54), (253, 2)]
INODES = [1, 2, 3, 4]
PIDS = [-1, 0, 7, 8, 9]
# Offsets near every boundary the detector cares about, and anywhere at all.
OFFSETS = st.one_of(
    st.sampled_from(
        [0, 1, WAL_INDEX_LOCK_OFFSET - 1, WAL_INDEX_LOCK_OFFSET, 123, WAL_INDEX_DEAD_MAN_SWITCH, 129]
        + [PENDING_BYTE - 1, PENDING_BYTE, PENDING_BYTE + 1, PENDING_BYTE + 2, SHARED_LAST, SHARED_LAST + 1]
    ),
    st.integers(min_value=0, max_value=2**63 - 1),
)


@st.composite
def file_locks(draw) -> FileLock:
    major, minor = draw(st.sampled_from(DEVICES))
    start = draw(OFFSETS)
    end = draw(
        st.one_of(st.none(), st.integers(min_value=0, max_value=600).map(lambda length: start + length))
    )
    return FileLock(
        ordinal=draw(st.integers(min_value=1, max_value=6)),
        is_waiter=draw(st.booleans()),
        lock_class=draw(st.sampled_from(["POSIX", "FLOCK", "OFDLCK", "LEASE"])),
        mode="ADVISORY",
        lock_type=draw(st.sampled_from(["READ", "WRITE", "UNLCK"])),
        pid=draw(st.sampled_from(PIDS)),
        device_hex=f"{major:02x}:{minor:02x}",
        major=major,
        minor=minor,
        inode=draw(st.sampled_from(INODES)),
        start=start,
        end=end,
        line_number=1,
    )


FILE_IDS = st.builds(
    lambda device, inode: FileId(*device, inode), st.sampled_from(DEVICES), st.sampled_from(INODES)
)
PATHS = st.sampled_from(["/d/a.db", "/d/b.db"]).flatmap(
    lambda base: st.sampled_from([base, *(base + suffix for suffix in SIDE_FILE_SUFFIXES)])
)


@st.composite
def processes(draw) -> ProcessFiles:
    mapped = [
        MemoryMapping(
            0,
            4096,
            draw(st.sampled_from(["rw-s", "r--p"])),
            0,
            "",
            file_id.major,
            file_id.minor,
            file_id.inode,
            path,
            False,
            1,
        )
        for file_id, path in draw(st.lists(st.tuples(FILE_IDS, PATHS), max_size=3))
    ]
    return ProcessFiles(
        pid=draw(st.sampled_from([7, 8, 9])),
        pod=draw(st.none() | st.just(PodCgroup("uid", "burstable", "cgroupfs", None, None))),
        open_files=tuple(
            OpenFile(fd, path, file_id)
            for fd, (file_id, path) in enumerate(draw(st.lists(st.tuples(FILE_IDS, PATHS), max_size=4)))
        ),
        mappings=tuple(mapped),
    )


MOUNTS = st.lists(
    st.builds(
        lambda device, name: NetworkMount(*device, f"/mnt/{name}", "nfs4", None, name or None),
        st.sampled_from(DEVICES),
        st.sampled_from(["", "pvc-1", "pvc-2"]),
    ),
    max_size=4,
)


@given(
    locks=st.lists(file_locks(), max_size=12),
    mounts=MOUNTS,
    views=st.lists(processes(), max_size=3),
    header_databases=st.sets(FILE_IDS, max_size=2),
)
def test_any_locks_files_and_mappings_give_consistent_findings(locks, mounts, views, header_databases):
    by_pid = {view.pid: view for view in views}

    found = find_sqlite_databases(locks, mounts, by_pid, header_databases)

    keys = [(finding.file_id, finding.pid) for finding in found]
    assert len(keys) == len(set(keys)), "one finding per (database, process)"
    network = {mount.device for mount in mounts}
    held = {
        (FileId(lock.major, lock.minor, lock.inode), lock.pid if lock.pid > 0 else None)
        for lock in locks
        if is_sqlite_lock(lock)
    }
    for finding in found:
        assert finding.file_id.device in network
        assert (finding.lock is not None) == ((finding.file_id, finding.pid) in held)
        if finding.lock is None:  # found open, never from a waiter line
            assert finding.file_id in header_databases | {database for database, _ in held}
            assert any(f.file_id == finding.file_id for f in by_pid[finding.pid].open_files)
        if finding.mode is JournalMode.ROLLBACK:
            assert finding.severity is Severity.WARNING
        if finding.mode is JournalMode.UNKNOWN:
            assert finding.severity is (Severity.WARNING if finding.lock else Severity.INFO)
        assert finding.severity in (Severity.CRITICAL, Severity.WARNING) or finding.lock is None
        assert finding.message and finding.remedy
        assert set(finding.to_dict()) >= {
            "severity",
            "mode",
            "pid",
            "device",
            "inode",
            "path",
            "mount_point",
            "pod_uid",
            "lock",
            "message",
        }


@given(st.text(alphabet=st.sampled_from("0123456789:->EOFPOSIXFLOCKREADWRITE ab\n"), max_size=400))
def test_any_locks_text_parses_into_something_the_detector_takes(text):
    locks = parse_locks(text).locks
    devices = {(lock.major, lock.minor) for lock in locks}

    found = find_sqlite_databases(locks, [NetworkMount(*device, "/mnt", "nfs") for device in devices])

    assert all(finding.lock is not None for finding in found)
