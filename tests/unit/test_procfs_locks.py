"""/proc/locks parser: real captures, locks this test takes itself, malformed lines."""

import fcntl
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.samples import LOCAL_SAMPLES, shared_sample

from mountwarden.core.procfs.locks import FileLock, parse_locks, read_locks

SQLITE_PENDING_BYTE = 0x40000000
SQLITE_SHARED_FIRST_BYTE = 0x40000002



def test_a_lock_with_four_waiters():
    result = parse_locks((LOCAL_SAMPLES / "locks-procfs-rs.txt").read_text(encoding="utf-8"))

    assert len(result.locks) == 18
    assert result.skipped_lines == 0
    holder = next(lock for lock in result.locks if lock.ordinal == 6 and not lock.is_waiter)
    assert (holder.pid, holder.device_hex, holder.inode, holder.start, holder.end) == (
        1280,
        "00:14",
        16200,
        0,
        0,
    )
    waiters = result.waiters(6)
    assert [waiter.pid for waiter in waiters] == [1281, 1279, 1282, 1283]
    assert {(waiter.blocked_by, waiter.lock_class, waiter.lock_type) for waiter in waiters} == {
        (6, "POSIX", "WRITE")
    }
    assert holder.blocked_by is None
    assert result.waiters(5) == ()


def test_ofd_lock_has_pid_minus_one_and_hex_devices_decode():
    result = parse_locks((LOCAL_SAMPLES / "locks-procfs-rs.txt").read_text(encoding="utf-8"))

    ofd = next(lock for lock in result.locks if lock.lock_class == "OFDLCK")
    assert ofd == FileLock(
        ordinal=7,
        is_waiter=False,
        lock_class="OFDLCK",
        mode="ADVISORY",
        lock_type="READ",
        pid=-1,
        device_hex="00:06",
        major=0,
        minor=6,
        inode=1028,
        start=0,
        end=None,
        line_number=11,
    )
    flock = next(lock for lock in result.locks if lock.ordinal == 3)
    assert (flock.lock_class, flock.device_hex, flock.major_minor, flock.inode) == (
        "FLOCK",
        "fd:00",
        "253:0",
        396528,
    )


def test_real_capture_001_counts_and_sqlite_ranges():
    result = parse_locks(shared_sample("locks-pcp-001.txt"))
    locks = result.locks

    assert (len(locks), result.skipped_lines) == (49, 0)
    posix = [lock for lock in locks if lock.lock_class == "POSIX"]
    assert len(posix) == 46
    assert (
        sum(lock.lock_type == "READ" for lock in posix),
        sum(lock.lock_type == "WRITE" for lock in posix),
    ) == (17, 29)
    assert sum(lock.lock_class == "FLOCK" for lock in locks) == 2
    assert [lock.pid for lock in locks if lock.lock_class == "OFDLCK"] == [-1]
    first = locks[0]
    assert (first.device_hex, first.major, first.minor, first.major_minor) == ("fd:02", 253, 2, "253:2")
    assert (first.start, first.end) == (1073741824, 1073742335)
    assert first.covers(SQLITE_PENDING_BYTE) and not first.covers(SQLITE_PENDING_BYTE - 1)
    assert locks[3].start == locks[3].end == 128
    assert (locks[37].major_minor, locks[37].start, locks[37].end) == ("0:45", 1, 3)
    shared_readers = [
        lock for lock in posix if lock.lock_type == "READ" and lock.covers(SQLITE_SHARED_FIRST_BYTE)
    ]
    assert {(lock.start, lock.end) for lock in shared_readers} == {(1073741826, 1073742335)}


def test_real_capture_002_counts():
    locks = parse_locks(shared_sample("locks-pcp-002.txt")).locks
    posix = [lock for lock in locks if lock.lock_class == "POSIX"]

    assert (len(locks), len(posix)) == (22, 20)
    assert sorted(lock.lock_type for lock in posix).count("READ") == 2
    assert sum(lock.lock_class == "FLOCK" for lock in locks) == 2


def test_leases_delegations_and_deeper_waiters():
    text = (
        "1: LEASE  ACTIVE    READ 4242 08:01:12 0 EOF\n"
        "2: DELEG  BREAKING  UNLCK 4243 00:2d:99 0 EOF\n"
        "3: POSIX  ADVISORY  WRITE 10 00:2d:7 0 EOF\n"
        "3: -> POSIX  ADVISORY  WRITE 11 00:2d:7 0 EOF\n"
        "3:  -> POSIX  ADVISORY  WRITE 12 00:2d:7 0 EOF\n"
        "4: LEASE  BREAKER   UNLCK 4244 <none>:0 0 EOF\n"
    )
    result = parse_locks(text)

    assert [(lock.lock_class, lock.mode, lock.lock_type) for lock in result.locks[:2]] == [
        ("LEASE", "ACTIVE", "READ"),
        ("DELEG", "BREAKING", "UNLCK"),
    ]
    assert [waiter.pid for waiter in result.waiters(3)] == [11, 12]
    assert result.skipped_line_numbers == (6,)  # a lease breaker names no inode


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        ("POSIX  ADVISORY  WRITE 1 00:14:1 0 EOF", "no ordinal"),
        ("x: POSIX  ADVISORY  WRITE 1 00:14:1 0 EOF", "ordinal is not a number"),
        ("1: POSIX  ADVISORY  WRITE 1 00:14 0 EOF", "no inode"),
        ("1: POSIX  ADVISORY  WRITE 1 zz:14:1 0 EOF", "device is not hex"),
        ("1: POSIX  ADVISORY  WRITE one 00:14:1 0 EOF", "pid is not a number"),
        ("1: POSIX  ADVISORY  WRITE 1 00:14:1 0 END", "end is neither a number nor EOF"),
        ("1: POSIX  ADVISORY  WRITE 1 00:14:1 -5 EOF", "negative start"),
        ("1: POSIX  ADVISORY  WRITE 1 00:14:1 0", "no end"),
        ("1: ->", "a waiter with nothing"),
    ],
)
def test_malformed_lines_are_skipped_and_counted(bad_line, why):
    result = parse_locks(f"1: POSIX  ADVISORY  WRITE 723 00:14:16845 0 EOF\n{bad_line}\n")

    assert result.skipped_line_numbers == (2,), why
    assert len(result.locks) == 1


def locks_on(path: Path) -> list[FileLock]:
    """This system's /proc/locks entries for the file at ``path``."""
    status = path.stat()
    return [
        lock
        for lock in read_locks().locks
        if (lock.major, lock.minor, lock.inode)
        == (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
    ]


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    path.write_bytes(b"\0" * 4096)
    return path


def test_a_posix_lock_taken_here_appears_with_our_pid_device_and_inode(database):
    with database.open("r+b") as handle:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SQLITE_PENDING_BYTE)

        (lock,) = locks_on(database)

    assert (lock.lock_class, lock.lock_type, lock.pid) == ("POSIX", "WRITE", os.getpid())
    assert (lock.start, lock.end) == (SQLITE_PENDING_BYTE, SQLITE_PENDING_BYTE)


@pytest.mark.skipif(not hasattr(fcntl, "F_OFD_SETLK"), reason="no open file description locks here")
def test_an_ofd_lock_taken_here_has_pid_minus_one(database):
    with database.open("r+b") as handle:
        # struct flock: type, whence, start, len, pid (pid must be 0 for OFD locks).
        request = struct.pack("hhqqi", fcntl.F_RDLCK, os.SEEK_SET, SQLITE_SHARED_FIRST_BYTE, 510, 0)
        fcntl.fcntl(handle, fcntl.F_OFD_SETLK, request + b"\0" * 4)

        (lock,) = locks_on(database)

    assert (lock.lock_class, lock.lock_type, lock.pid) == ("OFDLCK", "READ", -1)
    assert (lock.start, lock.end) == (SQLITE_SHARED_FIRST_BYTE, SQLITE_SHARED_FIRST_BYTE + 509)


def test_a_blocked_request_from_another_process_is_a_waiter(database):
    waiter_code = (
        "import fcntl, sys\nhandle = open(sys.argv[1], 'r+b')\nfcntl.lockf(handle, fcntl.LOCK_EX, 0, 0)\n"
    )
    with database.open("r+b") as handle:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0)
        child = subprocess.Popen([sys.executable, "-c", waiter_code, str(database)])
        try:
            deadline = time.monotonic() + 10
            locks = locks_on(database)
            while not any(lock.is_waiter for lock in locks) and time.monotonic() < deadline:
                time.sleep(0.02)
                locks = locks_on(database)
        finally:
            child.kill()
            child.wait()

    (holder,) = [lock for lock in locks if not lock.is_waiter]
    (waiter,) = [lock for lock in locks if lock.is_waiter]
    assert (holder.pid, holder.end) == (os.getpid(), None)
    assert (waiter.pid, waiter.blocked_by) == (child.pid, holder.ordinal)


@settings(deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    result = parse_locks(text)

    assert len(result.locks) + result.skipped_lines == sum(1 for line in text.split("\n") if line.strip())


@settings(deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["1:", "->", "POSIX", "ADVISORY", "WRITE", "-1", "fd:02:17", "0", "EOF", "128", ":", "-"]
        ),
        max_size=12,
    )
)
def test_shuffled_real_tokens_never_raise(tokens):
    for lock in parse_locks(" ".join(tokens)).locks:
        assert lock.start >= 0 and lock.inode >= 0
