"""The detector on /proc/locks captured by others, with their devices declared network filesystems."""

from collections import Counter

from tests.samples import LOCAL_SAMPLES, shared_sample

from mountwarden.core.procfs import parse_locks
from mountwarden.core.sqlite import JournalMode, NetworkMount, Severity, SqliteLock, find_sqlite_databases


def nfs(major: int, minor: int) -> NetworkMount:
    return NetworkMount(major, minor, f"/mnt/{major}-{minor}", "nfs4")


def test_pcp_001_wal_readers_and_an_exclusive_holder_when_fd02_is_nfs():
    locks = parse_locks(shared_sample("locks-pcp-001.txt")).locks

    found = find_sqlite_databases(locks, [nfs(253, 2)])  # fd:02

    # Five processes read WAL databases: each holds SHARED on the database and the
    # dead-man switch (byte 128) on a -shm beside it. Pid 20722 has four of each.
    wal = [finding for finding in found if finding.mode is JournalMode.WAL]
    assert sorted((finding.pid, finding.file_id.inode) for finding in wal) == [
        (19653, 16515179),
        (19657, 16515179),
        (19673, 16515179),
        (19676, 16515179),
        (20722, 16647985),
        (20722, 16647992),
        (20722, 16647996),
        (20722, 16648048),
    ]
    assert {(finding.severity, finding.lock) for finding in wal} == {(Severity.CRITICAL, SqliteLock.SHARED)}
    one_pair = next(finding for finding in wal if finding.pid == 19653)
    assert "(WAL-index locks DMS on a -shm beside it)" in one_pair.message
    # Pid 30503 holds five databases EXCLUSIVE and reads one, with no -shm in sight:
    # rollback, or WAL in locking_mode=EXCLUSIVE; without its open files, unknown.
    others = [finding for finding in found if finding.mode is not JournalMode.WAL]
    assert {(finding.pid, finding.mode, finding.severity) for finding in others} == {
        (30503, JournalMode.UNKNOWN, Severity.WARNING)
    }
    assert Counter(finding.lock for finding in others) == {SqliteLock.EXCLUSIVE: 5, SqliteLock.SHARED: 1}
    # The -shm files, the 0..EOF locks and the 1..3 lock on 00:2d are no databases.
    assert len(found) == 14
    assert {16515185, 16648184, 16647982, 17564463} & {finding.file_id.inode for finding in found} == set()


def test_pcp_001_on_local_disks_only_finds_nothing():
    locks = parse_locks(shared_sample("locks-pcp-001.txt")).locks

    assert find_sqlite_databases(locks, [nfs(0, 0x2D), nfs(0, 0x17)]) == ()


def test_pcp_002_one_process_with_seven_databases():
    locks = parse_locks(shared_sample("locks-pcp-002.txt")).locks

    found = find_sqlite_databases(locks, [nfs(253, 3)])

    assert {finding.pid for finding in found} == {1386}
    assert Counter(finding.lock for finding in found) == {SqliteLock.EXCLUSIVE: 5, SqliteLock.SHARED: 2}


def test_waiters_on_a_whole_byte_zero_lock_are_no_sqlite():
    locks = parse_locks((LOCAL_SAMPLES / "locks-procfs-rs.txt").read_text(encoding="utf-8")).locks
    every_device = {(lock.major, lock.minor) for lock in locks}

    assert find_sqlite_databases(locks, [nfs(*device) for device in every_device]) == ()
