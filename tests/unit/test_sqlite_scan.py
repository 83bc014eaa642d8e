"""`scan_sqlite` and `mountwarden sqlite-scan` on a proc root assembled in a temporary directory.

The proc root's fd entries are symlinks to real files, so stat() through them gives
real devices and inodes, which its mountinfo declares an nfs4 pod volume and its
/proc/locks lines name. One lock holder has no /proc entry: it exited after
/proc/locks was read.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.sqlitescan import scan_sqlite
from mountwarden.cli import app
from mountwarden.core.sqlite import (
    SQLITE_HEADER,
    WAL_REMEDY,
    FileId,
    JournalMode,
    Severity,
    SqliteLock,
    kubelet_pod_volume,
    network_mounts,
)

POD = "3d1b6e2d-0d6c-4b5e-9a3f-1c2d3e4f5a6b"
OTHER_POD = "4e2c7f3e-1e7d-4c6f-8b4a-2d3e4f5a6b7c"
CONTAINER = "c0" * 32
VOLUME_MOUNT = f"/var/lib/kubelet/pods/{POD}/volumes/kubernetes.io~csi/pvc-42/mount"
VANISHED_PID = 4343
FINDING_KEYS = {
    # The contract's keys, and the three it allows besides.
    *("severity", "mode", "pid", "device", "inode", "path", "mount_point", "pod_uid", "lock", "message"),
    *("remedy", "volume_name", "container_id"),
}


@dataclass
class FakeNode:
    proc: Path
    data: Path

    def file_id(self, name: str) -> FileId:
        status = os.stat(self.data / name)
        return FileId(os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)

    def path(self, name: str) -> str:
        return str(self.data / name)


def cgroup_of(pod: str) -> str:
    pod_slice = f"kubepods-burstable-pod{pod.replace('-', '_')}.slice"
    return f"0::/kubepods.slice/kubepods-burstable.slice/{pod_slice}/cri-containerd-{CONTAINER}.scope\n"


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("app.db", "other.db", "idle.db"):
        (data / name).write_bytes(SQLITE_HEADER + bytes(4080))
    (data / "app.db-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    (data / "app.db-shm").write_bytes(bytes(32768))
    (data / "notes.txt").write_bytes(b"not a database, but long enough to read")
    node = FakeNode(tmp_path / "proc", data)
    app_db, shm, other = node.file_id("app.db"), node.file_id("app.db-shm"), node.file_id("other.db")
    major, minor = app_db.device
    hex_device = f"{major:02x}:{minor:02x}"

    def process(pid: int, fds: dict[int, str], cgroup: str | None = None, maps: str = "") -> None:
        directory = node.proc / str(pid)
        (directory / "fd").mkdir(parents=True)
        for fd, target in fds.items():
            (directory / "fd" / str(fd)).symlink_to(target)
        if cgroup is not None:
            (directory / "cgroup").write_text(cgroup)
        (directory / "maps").write_text(maps)
        # A user process's stat as the kernel writes it (flags 0x400000, PF_FORKNOEXEC; no PF_KTHREAD).
        (directory / "stat").write_text(f"{pid} (sqlite3) S 1 {pid} {pid} 0 -1 4194304 {'0 ' * 43}\n")

    process(1, {})
    (node.proc / "1" / "mountinfo").write_text(
        f"27 1 {major + 1}:{minor} / / rw,relatime - ext4 /dev/sda1 rw\n"
        f"300 27 {major}:{minor} / {VOLUME_MOUNT} rw,relatime - nfs4 fs-1.efs.amazonaws.com:/ rw,vers=4.1\n"
    )
    (node.proc / "locks").write_text(
        f"1: POSIX  ADVISORY  READ 100 {hex_device}:{shm.inode} 123 123\n"
        f"2: POSIX  ADVISORY  READ 100 {hex_device}:{shm.inode} 128 128\n"
        f"3: POSIX  ADVISORY  READ 100 {hex_device}:{app_db.inode} 1073741826 1073742335\n"
        f"4: POSIX  ADVISORY  WRITE {VANISHED_PID} {hex_device}:{other.inode} 1073741825 1073741825\n"
        f"5: POSIX  ADVISORY  READ {VANISHED_PID} {hex_device}:{other.inode} 1073741826 1073742335\n"
        "6: POSIX  ADVISORY  WRITE 100 fd:02:777 0 EOF\n"
    )
    # A WAL reader: the database, its -wal and its -shm open, the -shm mapped.
    process(
        100,
        {3: node.path("app.db"), 4: node.path("app.db-wal"), 5: node.path("app.db-shm"), 6: "socket:[1234]"},
        cgroup_of(POD),
        f"7f6632e85000-7f6632e8d000 rw-s 00000000 {hex_device} {shm.inode}      {node.path('app.db-shm')}\n",
    )
    # A process with a database open and no lock, and a file that is no database.
    process(200, {3: node.path("idle.db"), 4: node.path("notes.txt")}, cgroup_of(OTHER_POD))
    # A descriptor whose file is gone by the time it is stat()ed.
    process(300, {3: str(tmp_path / "gone.db")})
    return node


def scan(node: FakeNode, **options):
    proc_root = ProcRoot(node.proc)
    mounts = network_mounts(proc_root.mountinfo(1).mounts, {"nfs4"}, kubelet_pod_volume)
    return scan_sqlite(proc_root, mounts, **options)


def test_a_wal_reader_in_a_pod_and_a_holder_that_exited(node: FakeNode):
    result = scan(node)

    wal_reader, exited = result.findings
    assert (wal_reader.severity, wal_reader.mode, wal_reader.lock) == (
        Severity.CRITICAL,
        JournalMode.WAL,
        SqliteLock.SHARED,
    )
    assert (wal_reader.pid, wal_reader.pod_uid, wal_reader.container_id) == (100, POD, CONTAINER)
    assert (wal_reader.file_id, wal_reader.path) == (node.file_id("app.db"), node.path("app.db"))
    assert (wal_reader.mount_point, wal_reader.volume_name) == (VOLUME_MOUNT, "pvc-42")
    assert "(-shm mapped, -wal open, WAL-index locks READ0, DMS)" in wal_reader.message
    assert wal_reader.remedy == WAL_REMEDY
    # The holder of other.db exited: what /proc/locks said is kept, the rest is unknown.
    assert (exited.pid, exited.lock, exited.mode, exited.severity) == (
        VANISHED_PID,
        SqliteLock.RESERVED,
        JournalMode.UNKNOWN,
        Severity.WARNING,
    )
    assert (exited.path, exited.pod_uid, exited.volume_name) == (None, None, "pvc-42")
    counters = result.counters
    assert (counters.lock_lines, counters.sqlite_lock_lines, counters.processes_read) == (6, 3, 2)
    assert counters.vanished == 3  # its fd directory, cgroup and maps
    assert (counters.headers_read, counters.headers_over_budget, counters.forbidden) == (0, 0, 0)


def test_header_scan_finds_a_database_that_holds_no_lock(node: FakeNode):
    result = scan(node, header_scan=True)

    idle = next(finding for finding in result.findings if finding.pid == 200)
    assert (idle.severity, idle.mode, idle.lock, idle.path) == (
        Severity.INFO,
        JournalMode.UNKNOWN,
        None,
        node.path("idle.db"),
    )
    assert (idle.pod_uid, idle.volume_name) == (OTHER_POD, "pvc-42")
    assert len(result.findings) == 3
    # idle.db and notes.txt read; app.db (known from its locks), -wal, -shm and the socket not.
    assert (result.counters.headers_read, result.counters.headers_over_budget) == (2, 0)
    assert result.counters.vanished == 3 + 1  # and the descriptor of gone.db


@pytest.mark.parametrize(("budget", "read", "over", "found_idle"), [(1, 1, 1, True), (0, 0, 2, False)])
def test_header_scan_stops_at_its_budget(node: FakeNode, budget, read, over, found_idle):
    result = scan(node, header_scan=True, header_scan_budget=budget)

    assert (result.counters.headers_read, result.counters.headers_over_budget) == (read, over)
    assert any(finding.pid == 200 for finding in result.findings) is found_idle


def test_a_negative_budget_is_refused(node: FakeNode):
    with pytest.raises(ValueError, match="header_scan_budget"):
        scan(node, header_scan=True, header_scan_budget=-1)


def run(*args: str | Path):
    return CliRunner().invoke(app, ["sqlite-scan", *map(str, args)])


def test_cli_json_document(node: FakeNode):
    result = run("--proc-root", node.proc, "--network-fstypes", "nfs,nfs4", "--json")

    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert set(document) == {"findings", "network_fstypes", "network_mounts", "counters"}
    assert (document["network_fstypes"], document["network_mounts"]) == (["nfs", "nfs4"], 1)
    assert [set(finding) for finding in document["findings"]] == [FINDING_KEYS, FINDING_KEYS]
    wal_reader = document["findings"][0]
    app_db = node.file_id("app.db")
    assert {key: wal_reader[key] for key in FINDING_KEYS - {"message", "remedy"}} == {
        "severity": "critical",
        "mode": "wal",
        "pid": 100,
        "pod_uid": POD,
        "container_id": CONTAINER,
        "device": app_db.major_minor,
        "inode": app_db.inode,
        "path": node.path("app.db"),
        "mount_point": VOLUME_MOUNT,
        "volume_name": "pvc-42",
        "lock": "SHARED",
    }
    assert document["counters"]["sqlite_lock_lines"] == 3


def test_cli_header_scan_and_kubelet_root(node: FakeNode):
    result = run("--proc-root", node.proc, "--kubelet-root", "/data/kubelet", "--header-scan", "--json")

    assert result.exit_code == 1, result.output
    findings = json.loads(result.stdout)["findings"]
    assert [(finding["pid"], finding["severity"]) for finding in findings] == [
        (100, "critical"),
        (VANISHED_PID, "warning"),
        (200, "info"),
    ]
    assert {finding["volume_name"] for finding in findings} == {None}  # not under this kubelet root


def test_cli_exit_zero_when_the_mount_is_not_a_network_type(node: FakeNode):
    result = run("--proc-root", node.proc, "--network-fstypes", "nfs", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["findings"] == []
    text = run("--proc-root", node.proc, "--network-fstypes", "nfs")
    assert (text.exit_code, text.stdout.strip()) == (
        0,
        "No SQLite database in use on 0 mount(s) of type nfs.",
    )


def test_cli_table_messages_and_one_remedy(node: FakeNode):
    result = run("--proc-root", node.proc)

    assert result.exit_code == 1, result.output
    text = " ".join(result.stdout.split())  # rich wraps to the terminal
    assert "critical" in text and "pvc-42" in text and "RESERVED" in text
    assert "1. SQLite database /" in text and "app.db in WAL mode on nfs4" in text
    assert f"2. SQLite database inode {node.file_id('other.db').inode}" in text
    # The WAL remedy contains the general one: printed once, not twice.
    assert text.count("remedy:") == 1
    assert "PRAGMA journal_mode=DELETE" in text
    assert "3 /proc entries vanished or were forbidden" in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--proc-root", "{tmp}/nowhere"], "is not a procfs"),
        (["--proc-root", "{proc}", "--network-fstypes", " , "], "names no filesystem type"),
        (["--proc-root", "{tmp}/data"], "is not a procfs"),
    ],
)
def test_cli_bad_input_exits_2(node: FakeNode, arguments, message):
    args = [argument.format(tmp=node.data.parent, proc=node.proc) for argument in arguments]

    result = run(*args, "--json")

    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
    assert result.stdout == ""


def test_cli_bad_input_without_a_mount_table_exits_2(node: FakeNode):
    (node.proc / "1" / "mountinfo").unlink()

    result = run("--proc-root", node.proc)

    assert result.exit_code == 2
    assert "no mount table" in " ".join(result.stderr.split())


def test_cli_help_teaches_the_lock_bytes_and_wal():
    result = CliRunner().invoke(app, ["sqlite-scan", "--help"], terminal_width=100)

    text = " ".join(result.stdout.split())
    for taught in (
        "1073741824 (0x40000000) is PENDING",
        "1073741825 is RESERVED",
        "(510 bytes) are SHARED",
        "WAL mode is critical",
        "cannot share memory between hosts",
        "bytes 120 to 128",
        "Exit codes: 0 nothing found, 1 findings, 2 bad input",
    ):
        assert taught in text, taught
