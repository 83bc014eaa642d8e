"""Real SQLite processes holding real locks, read back from the real /proc by `mountwarden sqlite-scan`.

Each test mounts its own tmpfs where the kubelet would mount a CSI volume, and
declares tmpfs a network filesystem with --network-fstypes tmpfs. SQLite runs in
child processes (`python -c`) that take their locks, print "ready" and wait on
stdin, so the locks are POSIX locks of other pids, as on a node. /proc/locks also
holds every other process's locks (and other tmpfs mounts may hold other SQLite
databases), so everything is filtered by this test's tmpfs device.

Needs root (mount, cgroups); fails, never skips, when it cannot have them.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.sqlitescan import scan_sqlite
from mountwarden.core.procfs import parse_locks, parse_mountinfo
from mountwarden.core.sqlite import kubelet_pod_volume, network_mounts

POD = "5f0c3a9e-8d21-4b7e-9c1a-3e2f4d5c6b7a"
CONTAINER = "e1" * 32
VOLUME = "pvc-sqlite"
PENDING, RESERVED, SHARED_FIRST, SHARED_LAST = 1073741824, 1073741825, 1073741826, 1073742335

#: Runs the SQL in argv, printing "ready" at each "ready" in it and at the end, then waits on stdin.
CHILD = """
import sqlite3, sys
path, timeout, *statements = sys.argv[1:]
db = sqlite3.connect(path, isolation_level=None, timeout=float(timeout))
for statement in statements:
    if statement == "ready":
        print("ready", flush=True)
    else:
        db.execute(statement).fetchall()
print("ready", flush=True)
sys.stdin.read()
"""


@dataclass
class Volume:
    """A tmpfs mounted at a kubelet CSI volume path under ``kubelet_root``."""

    kubelet_root: Path
    mount_point: Path
    major_minor: str = ""

    def path(self, name: str) -> str:
        return str(self.mount_point / name)


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Volume]:
    kubelet_root = tmp_path / "kubelet"
    mount_point = kubelet_root / "pods" / POD / "volumes" / "kubernetes.io~csi" / VOLUME / "mount"
    mount_point.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "mountwarden-test", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.fail(
            f"cannot mount a tmpfs (these tests need root): {mounted.stderr.strip() or mounted.returncode}",
            pytrace=False,
        )
    status = os.stat(mount_point)
    try:
        yield Volume(kubelet_root, mount_point, f"{os.major(status.st_dev)}:{os.minor(status.st_dev)}")
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


@dataclass
class Children:
    """SQLite child processes; all stopped at the end of the test."""

    started: list[subprocess.Popen] = field(default_factory=list)

    def start(self, database: str, *statements: str, timeout: float = 0.0) -> subprocess.Popen:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, database, str(timeout), *statements],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.started.append(child)
        self.wait_ready(child)
        return child

    @staticmethod
    def wait_ready(child: subprocess.Popen) -> None:
        line = child.stdout.readline()
        if line.strip() != "ready":
            child.kill()
            pytest.fail(f"SQLite child {child.pid} failed: {line!r} {child.stderr.read()}", pytrace=False)

    @staticmethod
    def stop(child: subprocess.Popen) -> None:
        child.stdin.close()
        child.wait(timeout=30)

    def stop_all(self) -> None:
        for child in self.started:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)
            for stream in (child.stdin, child.stdout, child.stderr):
                stream.close()


@pytest.fixture
def children() -> Iterator[Children]:
    started = Children()
    try:
        yield started
    finally:
        started.stop_all()


def create_database(path: str, journal_mode: str = "delete") -> None:
    subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            path,
            "0",
            f"PRAGMA journal_mode={journal_mode}",
            "CREATE TABLE t (x)",
            "INSERT INTO t VALUES (1)",
        ],
        input="",
        capture_output=True,
        text=True,
        check=True,
    )


def scan(volume: Volume, *options: str, fstypes: str = "tmpfs") -> tuple[int, list[dict], dict]:
    """Run the CLI as users do; return its exit code and the findings on this test's tmpfs."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mountwarden",
            "sqlite-scan",
            "--proc-root",
            "/proc",
            "--network-fstypes",
            fstypes,
            "--kubelet-root",
            str(volume.kubelet_root),
            "--json",
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    return result.returncode, [f for f in document["findings"] if f["device"] == volume.major_minor], document


def of_pid(findings: list[dict], pid: int) -> dict:
    matching = [finding for finding in findings if finding["pid"] == pid]
    assert len(matching) == 1, findings
    return matching[0]


def held_locks(volume: Volume, pid: int) -> set[tuple[str, int, int | None]]:
    """What /proc/locks shows for this pid on this test's tmpfs: (type, first byte, last byte)."""
    return {
        (lock.lock_type, lock.start, lock.end)
        for lock in parse_locks(Path("/proc/locks").read_text()).locks
        if lock.major_minor == volume.major_minor and lock.pid == pid and not lock.is_waiter
    }


@pytest.mark.parametrize(
    ("statements", "proc_locks", "lock", "seen"),
    [
        pytest.param(
            ["BEGIN", "SELECT * FROM t"],
            {("READ", SHARED_FIRST, SHARED_LAST)},
            "SHARED",
            "(no -wal or -shm open)",
            id="read-transaction-shared",
        ),
        pytest.param(
            ["BEGIN IMMEDIATE"],
            {("WRITE", RESERVED, RESERVED), ("READ", SHARED_FIRST, SHARED_LAST)},
            "RESERVED",
            "(no -wal or -shm open)",
            id="begin-immediate-reserved",
        ),
        pytest.param(
            ["BEGIN IMMEDIATE", "INSERT INTO t VALUES (2)"],
            {("WRITE", RESERVED, RESERVED), ("READ", SHARED_FIRST, SHARED_LAST)},
            "RESERVED",
            "(-journal open)",
            id="write-in-progress-journal-open",
        ),
        pytest.param(
            ["BEGIN EXCLUSIVE"],
            {("WRITE", PENDING, SHARED_LAST)},
            "EXCLUSIVE",
            "(no -wal or -shm open)",
            id="begin-exclusive",
        ),
    ],
)
def test_rollback_journal_locks_are_one_warning_per_process(
    volume, children, statements, proc_locks, lock, seen
):
    database = volume.path("app.db")
    create_database(database)
    child = children.start(database, *statements)
    assert held_locks(volume, child.pid) == proc_locks

    exit_code, findings, document = scan(volume)

    assert exit_code == 1
    finding = of_pid(findings, child.pid)  # several lock lines, one finding
    assert {key: finding[key] for key in ("severity", "mode", "lock", "path", "inode", "volume_name")} == {
        "severity": "warning",
        "mode": "rollback",
        "lock": lock,
        "path": database,
        "inode": os.stat(database).st_ino,
        "volume_name": VOLUME,
    }
    assert finding["mount_point"] == str(volume.mount_point)
    assert seen in finding["message"]
    assert document["counters"]["processes_read"] >= 1


def test_a_writer_waiting_for_a_reader_holds_pending(volume, children):
    database = volume.path("app.db")
    create_database(database)
    reader = children.start(database, "BEGIN", "SELECT * FROM t")
    # Waits up to 30 s in SQLite's busy handler, holding PENDING so no new reader starts.
    writer = children.start(database, "ready", "BEGIN EXCLUSIVE", timeout=30)
    deadline = time.monotonic() + 10
    while ("WRITE", PENDING, RESERVED) not in held_locks(volume, writer.pid):
        assert time.monotonic() < deadline, held_locks(volume, writer.pid)
        time.sleep(0.05)

    _, findings, _ = scan(volume)

    assert of_pid(findings, reader.pid)["lock"] == "SHARED"
    assert of_pid(findings, writer.pid)["lock"] == "PENDING"
    assert len(findings) == 2

    children.stop(reader)
    children.wait_ready(writer)  # BEGIN EXCLUSIVE went through
    assert held_locks(volume, writer.pid) == {("WRITE", PENDING, SHARED_LAST)}
    _, findings, _ = scan(volume)
    assert [(finding["pid"], finding["lock"]) for finding in findings] == [(writer.pid, "EXCLUSIVE")]


def test_wal_readers_and_writers_are_critical(volume, children):
    database = volume.path("wal.db")
    create_database(database, "wal")
    reader = children.start(database, "SELECT * FROM t")
    writer = children.start(database, "BEGIN IMMEDIATE", "INSERT INTO t VALUES (2)")
    shm = os.stat(volume.path("wal.db-shm")).st_ino
    # The WAL-index locks are on the -shm: 128 for every open connection, 120 for the writer.
    wal_index = {
        (lock.pid, lock.lock_type, lock.start, lock.end)
        for lock in parse_locks(Path("/proc/locks").read_text()).locks
        if lock.major_minor == volume.major_minor and lock.inode == shm
    }
    assert {
        (reader.pid, "READ", 128, 128),
        (writer.pid, "READ", 128, 128),
        (writer.pid, "WRITE", 120, 120),
    } <= wal_index

    exit_code, findings, _ = scan(volume)

    assert exit_code == 1
    for child in (reader, writer):
        finding = of_pid(findings, child.pid)
        assert (finding["severity"], finding["mode"], finding["lock"], finding["path"]) == (
            "critical",
            "wal",
            "SHARED",
            database,
        )
        assert "-shm mapped, -wal open, WAL-index locks" in finding["message"]
        assert "journal_mode=DELETE" in finding["remedy"]
    assert "WAL-index locks WRITE" in of_pid(findings, writer.pid)["message"]
    assert len(findings) == 2


def test_wal_in_exclusive_locking_mode_has_no_shared_memory_and_is_a_warning(volume, children):
    database = volume.path("wal.db")
    create_database(database, "wal")
    child = children.start(database, "PRAGMA locking_mode=EXCLUSIVE", "SELECT * FROM t")
    assert not os.path.exists(volume.path("wal.db-shm"))

    _, findings, _ = scan(volume)

    finding = of_pid(findings, child.pid)
    assert (finding["severity"], finding["mode"], finding["lock"]) == ("warning", "wal", "EXCLUSIVE")
    assert "(-wal open, no -shm)" in finding["message"]


@pytest.fixture
def pod_cgroup() -> Iterator[Path]:
    """A cgroup named as the kubelet's cgroupfs driver names a container's, in the cgroup v2 hierarchy."""
    unified = [
        m for m in parse_mountinfo(Path("/proc/self/mountinfo").read_text()).mounts if m.fstype == "cgroup2"
    ]
    if not unified:
        pytest.fail("no cgroup2 hierarchy is mounted: cannot put a process in a pod cgroup", pytrace=False)
    top = Path(unified[0].mount_point) / f"mountwarden-test-{uuid.uuid4().hex[:8]}"
    container = top / "kubepods" / "burstable" / f"pod{POD}" / CONTAINER
    try:
        container.mkdir(parents=True)
    except OSError as error:
        pytest.fail(f"cannot create a cgroup under {top.parent} (needs root): {error}", pytrace=False)
    try:
        yield container
    finally:
        for pid in (container / "cgroup.procs").read_text().split():  # a child still running
            (top.parent / "cgroup.procs").write_text(pid)
        for directory in (container, *container.parents):
            directory.rmdir()
            if directory == top:
                break


def test_the_process_pod_and_container_come_from_its_cgroup(volume, children, pod_cgroup):
    database = volume.path("app.db")
    create_database(database)
    child = children.start(database, "BEGIN", "SELECT * FROM t")
    (pod_cgroup / "cgroup.procs").write_text(str(child.pid))

    _, findings, _ = scan(volume)

    finding = of_pid(findings, child.pid)
    assert (finding["pod_uid"], finding["container_id"], finding["volume_name"]) == (POD, CONTAINER, VOLUME)


def test_header_scan_finds_a_database_open_without_a_lock(volume, children):
    database = volume.path("idle.db")
    create_database(database)
    child = children.start(database, "SELECT * FROM t")  # autocommit: the lock is gone once it returns
    assert held_locks(volume, child.pid) == set()

    _, without_header_scan, _ = scan(volume)
    # Other processes' tmpfs files may come first: a budget large enough to reach this one.
    _, findings, document = scan(volume, "--header-scan", "--header-scan-budget", "100000")

    assert without_header_scan == []
    finding = of_pid(findings, child.pid)
    assert (finding["severity"], finding["mode"], finding["lock"], finding["path"]) == (
        "info",
        "unknown",
        None,
        database,
    )
    assert document["counters"]["headers_read"] >= 1


def test_the_same_database_off_network_filesystems_is_no_finding(volume, children, tmp_path):
    local = str(tmp_path / "local.db")  # on the root filesystem, not a tmpfs
    create_database(local)
    on_volume = volume.path("app.db")
    create_database(on_volume)
    local_child = children.start(local, "BEGIN IMMEDIATE")
    volume_child = children.start(on_volume, "BEGIN IMMEDIATE")
    local_status = os.stat(local)
    local_device = f"{os.major(local_status.st_dev)}:{os.minor(local_status.st_dev)}"
    assert local_device != volume.major_minor

    _, _, document = scan(volume)
    assert not [f for f in document["findings"] if f["device"] == local_device or f["pid"] == local_child.pid]
    assert of_pid(document["findings"], volume_child.pid)["lock"] == "RESERVED"

    # This machine has no NFS mount: with the default types nothing is found, and the exit code says so.
    exit_code, findings, document = scan(volume, fstypes="nfs,nfs4")
    assert (exit_code, findings, document["findings"]) == (0, [], [])


def test_a_holder_that_exits_right_after_proc_locks_is_read_is_kept_from_its_locks(volume, children):
    database = volume.path("app.db")
    create_database(database)
    child = children.start(database, "BEGIN IMMEDIATE")

    class ExitsAfterLocks(ProcRoot):
        """/proc, where the SQLite process dies between /proc/locks and its own entries."""

        def locks(self):
            result = super().locks()
            child.kill()
            child.wait(timeout=30)
            return result

    proc_root = ExitsAfterLocks(Path("/proc"))
    mounts = network_mounts(
        proc_root.mountinfo(1).mounts,
        {"tmpfs"},
        lambda mount_point: kubelet_pod_volume(mount_point, str(volume.kubelet_root)),
    )

    result = scan_sqlite(proc_root, mounts)

    finding = next(finding for finding in result.findings if finding.pid == child.pid)
    assert (finding.lock, finding.mode, finding.severity) == ("RESERVED", "unknown", "warning")
    assert (finding.path, finding.pod_uid, finding.volume_name) == (None, None, VOLUME)
    assert f"the open files of pid {child.pid} do not show it" in finding.message
    assert result.counters.vanished >= 3  # its fd directory, cgroup and maps
